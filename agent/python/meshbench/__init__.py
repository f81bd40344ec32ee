"""meshbench: report a PyTorch program's training live to the Meshbench engine.

A program that a job spec's launch.command names runs under `meshbench-engine run` in the agent's
place, one process per rank, and speaks the agent's telemetry wire format (engine/wire/telemetry.h):

    import meshbench

    mb = meshbench.connect()                    # endpoint, rank and keys from the environment
    for batch in data:
        with mb.op("F", stage=0, microbatch=0):
            loss = model(batch)
        with mb.op("B", stage=0, microbatch=0):
            loss.backward()
        with mb.op("optimizer"):
            optimizer.step()
        mb.memory("params", param_bytes)
        mb.step(loss=loss, tokens=tokens_in_global_batch)
    mb.close()                                  # also at exit, or use `with meshbench.connect() as mb:`

A rank that leaves `with meshbench.connect() as mb:` by an exception ends Failed; by one that
torch.distributed raised (a collective or send/recv whose peer ended first) with the communication
status (wire.COMMUNICATION_FAILED_STATUS), which the engine weighs below what it learns of that peer.

Op kinds are the engine's: F, B, W, send-act, recv-act, send-grad, recv-grad, optimizer, dp-reduce,
idle. On a program that uses CUDA through torch, ops are timed by CUDA events read back without
synchronising; otherwise by the host clock. Records leave from a background thread through a bounded
queue that drops (and counts, in every heartbeat) rather than blocking training.

Environment (set by the engine for the programs it launches; see meshbench.environment):
    MESHBENCH_COLLECTOR        the collector's ZeroMQ endpoint (required)
    MESHBENCH_CLOCK            the engine's clock server, for this rank's clock offset (optional)
    MESHBENCH_JOB              the job spec's absolute path (meshbench.job_spec_path())
    MESHBENCH_TELEMETRY_KEYS   CURVE keys "SERVER AGENT-PUBLIC AGENT-SECRET" (off loopback)
    rank / world size / local rank: MESHBENCH_RANK, OMPI_COMM_WORLD_RANK, PMIX_RANK, SLURM_PROCID or
    RANK; MESHBENCH_WORLD_SIZE, OMPI_COMM_WORLD_SIZE, SLURM_NTASKS or WORLD_SIZE;
    MESHBENCH_LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID or LOCAL_RANK.

Profiler traces: profiler_handler(mb) is an on_trace_ready for torch.profiler.profile. It exports each
trace (prof.export_chrome_trace) into a folder (MESHBENCH_TRACE_DIR, else a new temporary one) and
sends a Log record of level info whose text is exactly

    meshbench-import: <absolute path>

the convention by which a rank asks the engine to import a Kineto trace into the live session.

Pipelines: meshbench.pipelining.record_schedule(mb, schedule) records every action of a
torch.distributed.pipelining schedule (PyTorch 2.4 and later).
"""

from . import pipelining
from .client import Client, connect
from .environment import ConnectError, Keys, job_spec_path
from .profiler import IMPORT_PREFIX, profiler_handler
from .wire import LOG_LEVELS, MEMORY_CATEGORIES, SPAN_KINDS, RankState

__all__ = [
    "Client",
    "ConnectError",
    "IMPORT_PREFIX",
    "Keys",
    "LOG_LEVELS",
    "MEMORY_CATEGORIES",
    "RankState",
    "SPAN_KINDS",
    "connect",
    "job_spec_path",
    "pipelining",
    "profiler_handler",
]
