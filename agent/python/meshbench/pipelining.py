"""Ops of a torch.distributed.pipelining schedule, recorded as they run.

record_schedule(mb, schedule) wraps the forward_one_chunk, backward_one_chunk and
backward_weight_one_chunk methods of the schedule's stages on this rank, so every action of every
step() of the schedule is an F, B or W span with its micro-batch. The stage is the stage's rank in
its pipeline group (Meshbench's stage) and the chunk its place among this rank's stages in stage
order (Meshbench's virtual chunk; interleaved and V schedules hold several). Sends and receives are
left out: the schedules batch them asynchronously, so their host times would not be their transfer's.
"""

from __future__ import annotations

import functools
import importlib.util


class PipeliningUnavailable(RuntimeError):
    """This torch has no torch.distributed.pipelining (it came with PyTorch 2.4)."""


def record_schedule(mb, schedule):
    """Records every forward and backward action of `schedule` (a PipelineSchedule of
    torch.distributed.pipelining) through `mb`. Returns the schedule."""
    try:
        found = importlib.util.find_spec("torch.distributed.pipelining") is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        import torch

        raise PipeliningUnavailable(
            f"meshbench.pipelining needs torch.distributed.pipelining, which PyTorch {torch.__version__} "
            "lacks (it came with PyTorch 2.4); record the ops yourself with mb.op(...)"
        )
    return wrap_stages(mb, schedule)


def _stages_of(schedule) -> list:
    if getattr(schedule, "_stages", None):
        return list(schedule._stages)
    if getattr(schedule, "_stage", None) is not None:
        return [schedule._stage]
    raise TypeError(f"{type(schedule).__name__} holds no pipeline stage (_stage or _stages): is it a schedule?")


def _chunk_id(args, kwargs, name: str) -> int:
    value = kwargs.get(name, args[0] if args else -1)
    return int(value)


def wrap_stages(mb, schedule):
    """The wrapping itself, on any object shaped like a schedule of torch.distributed.pipelining."""
    stages = sorted(_stages_of(schedule), key=lambda s: getattr(s, "stage_index", 0))
    for chunk, stage in enumerate(stages):
        if getattr(stage, "_meshbench_recorded", False):
            continue
        pipeline_rank = int(getattr(stage, "group_rank", getattr(stage, "stage_index", 0)))

        def wrap(method_name: str, kind: str, id_name: str, stage=stage, chunk=chunk, pipeline_rank=pipeline_rank):
            original = getattr(stage, method_name, None)
            if original is None:
                return

            @functools.wraps(original)
            def recorded(*args, **kwargs):
                # A split backward's input half is B too (its weight half is the W that follows).
                with mb.op(kind, stage=pipeline_rank, microbatch=_chunk_id(args, kwargs, id_name), chunk=chunk):
                    return original(*args, **kwargs)

            setattr(stage, method_name, recorded)

        wrap("forward_one_chunk", "F", "fwd_chunk_id")
        wrap("backward_one_chunk", "B", "bwd_chunk_id")
        wrap("backward_weight_one_chunk", "W", "bwd_chunk_id")
        stage._meshbench_recorded = True
    return schedule
