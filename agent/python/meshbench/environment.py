"""What a launched program learns from its environment: where the engine listens, its rank, and keys.

The engine starts a job spec's launch.command under mpirun or srun as it starts meshbench-agent, and
exports (mpirun -x) the variables below. The rank and world size are the launcher's own: Open MPI's,
PMIx's, Slurm's, or torchrun's.
"""

from __future__ import annotations

import dataclasses
import os

COLLECTOR_VARIABLE = "MESHBENCH_COLLECTOR"  # the collector's ZeroMQ endpoint (the agent's --telemetry)
CLOCK_VARIABLES = ("MESHBENCH_CLOCK", "MESHBENCH_CLOCK_SERVER")  # the clock server (the agent's --clock); optional
JOB_VARIABLE = "MESHBENCH_JOB"  # the job spec's absolute path
KEYS_VARIABLE = "MESHBENCH_TELEMETRY_KEYS"  # "SERVER AGENT-PUBLIC AGENT-SECRET" (Z85), off loopback only
RANK_VARIABLES = ("MESHBENCH_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID", "RANK")
WORLD_SIZE_VARIABLES = ("MESHBENCH_WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS", "WORLD_SIZE")
LOCAL_RANK_VARIABLES = ("MESHBENCH_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "LOCAL_RANK")

_Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
Z85_KEY_LENGTH = 40


class ConnectError(RuntimeError):
    """The program cannot reach the engine: a variable is missing or malformed."""


def z85_key_problem(text: str) -> str:
    """Why `text` is not a CURVE key (wire::z85KeyProblem's rules); empty when it is one."""
    if len(text) != Z85_KEY_LENGTH:
        return f"it has {len(text)} characters; a key has {Z85_KEY_LENGTH} (Z85, ZeroMQ RFC 32)"
    for group in range(0, len(text), 5):
        value = 0
        for i in range(group, group + 5):
            digit = _Z85.find(text[i])
            if digit < 0:
                return f"character {i + 1} ({text[i]!r}) is not one of Z85's"
            value = value * 85 + digit
        if value > 0xFFFFFFFF:
            return f"characters {group + 1}-{group + 5} encode more than 32 bits, which no Z85 encoder writes"
    return ""


@dataclasses.dataclass(frozen=True)
class Keys:
    """The run's CURVE keys: the engine's public key and the agents' pair."""

    server: str
    public: str
    secret: str = dataclasses.field(repr=False)

    @classmethod
    def parse(cls, text: str, source: str = KEYS_VARIABLE) -> "Keys":
        fields = text.split()
        if len(fields) != 3:
            raise ConnectError(
                f"{source} holds {len(fields)} keys; it holds three (server, agent public, agent secret), "
                "and it is the engine's to set for the programs it launches"
            )
        for key in fields:
            problem = z85_key_problem(key)
            if problem:
                raise ConnectError(f"{source} holds a bad key ({problem}); it is the engine's to set")
        return cls(*fields)

    def apply(self, socket) -> None:
        """Makes a pyzmq socket a CURVE client with these keys (before it connects)."""
        import zmq

        socket.setsockopt(zmq.CURVE_SERVERKEY, self.server.encode())
        socket.setsockopt(zmq.CURVE_PUBLICKEY, self.public.encode())
        socket.setsockopt(zmq.CURVE_SECRETKEY, self.secret.encode())


@dataclasses.dataclass
class Settings:
    endpoint: str
    clock_endpoint: str | None
    rank: int
    world_size: int
    local_rank: int
    keys: Keys | None


_HOW = "run this program under `meshbench-engine run` with a job spec whose launch.command names it"


def _first_int(names: tuple[str, ...], default: int) -> int:
    for name in names:
        text = os.environ.get(name)
        if text is None or text == "":
            continue
        try:
            value = int(text)
        except ValueError:
            raise ConnectError(f"{name} is {text!r}, not a whole number") from None
        if value < 0:
            raise ConnectError(f"{name} is {value}; ranks and sizes are not negative")
        return value
    return default


def settings(
    endpoint: str | None = None,
    rank: int | None = None,
    world_size: int | None = None,
    keys: "Keys | str | None" = None,
    clock: str | None = None,
    local_rank: int | None = None,
) -> Settings:
    """The connection's settings: each argument given wins over the environment."""
    if endpoint is None:
        endpoint = os.environ.get(COLLECTOR_VARIABLE)
        if not endpoint:
            raise ConnectError(
                f"meshbench.connect(): {COLLECTOR_VARIABLE} is not set, so there is no engine to report to: "
                f"{_HOW} (or pass connect(endpoint=...))"
            )
        if clock is None:
            clock = next((os.environ[v] for v in CLOCK_VARIABLES if os.environ.get(v)), None)
    if rank is None:
        rank = _first_int(RANK_VARIABLES, 0)
    if world_size is None:
        world_size = max(_first_int(WORLD_SIZE_VARIABLES, 1), rank + 1)
    if local_rank is None:
        local_rank = _first_int(LOCAL_RANK_VARIABLES, 0 if world_size == 1 else rank)
    if keys is None:
        text = os.environ.get(KEYS_VARIABLE)
        keys = Keys.parse(text) if text else None
    elif isinstance(keys, str):
        keys = Keys.parse(keys, "keys=")
    if rank >= 1 << 32:
        raise ConnectError(f"rank {rank} does not fit the wire's u32")
    return Settings(endpoint, clock or None, rank, world_size, local_rank, keys)


def job_spec_path() -> str | None:
    """The job spec the engine runs this program for (MESHBENCH_JOB), if any: its model, layout and
    schedule are the program's to follow."""
    return os.environ.get(JOB_VARIABLE) or None
