"""The engine's telemetry wire format (engine/wire/telemetry.h) and clock exchange (engine/wire/clock.h).

This module is the Python twin of the C++ codec: the layout, the enumerations' values and the limits
are telemetry.h's, and tests/python/test_meshbench_client.py checks its bytes against frames written
by hand from that header and, when built, against the engine's own decoder (tests/wire/wire_decode_check).
Everything is little-endian; a batch is a 24-byte header followed by records, each record a type byte,
three reserved zero bytes, a u32 body length and the body in the order record_fields.h lists the fields.
"""

from __future__ import annotations

import dataclasses
import enum
import struct
from typing import ClassVar, Sequence

BATCH_MAGIC = 0x5754424D  # bytes 'M' 'B' 'T' 'W'
FORMAT_VERSION = 1
BATCH_HEADER_BYTES = 24
RECORD_HEADER_BYTES = 8
MAX_BATCH_BYTES = 64 << 20
MAX_RECORDS_PER_BATCH = 1 << 22
MAX_EXPERTS_PER_LAYER = 1 << 16
MAX_TEXT_BYTES = 1 << 16

_BATCH_HEADER = struct.Struct("<IHHIQI")
_RECORD_HEADER = struct.Struct("<BBHI")


class RecordType(enum.IntEnum):
    SPAN = 1
    EXPERT_LOAD = 2
    MEMORY_SAMPLE = 3
    STEP_METRICS = 4
    NODE_SAMPLE = 5
    LOG = 6
    HEARTBEAT = 7
    CLOCK_OFFSET = 8


# The names are telemetry.cpp's (spanKindName, memoryCategoryName, logLevelName, rankStateName); a
# name's index is its value on the wire.
SPAN_KINDS = ("F", "B", "W", "send-act", "recv-act", "send-grad", "recv-grad", "optimizer", "dp-reduce", "idle")
MEMORY_CATEGORIES = ("params", "grads", "optimizer", "activations", "workspace")
LOG_LEVELS = ("debug", "info", "warning", "error")


class RankState(enum.IntEnum):
    STARTING = 0
    RUNNING = 1
    FINISHED = 2
    FAILED = 3
    TERMINATED = 4


# The Failed heartbeat's detail of a rank whose collective or send/recv failed: a peer ended or the
# network broke (wire::kCommunicationFailedStatus). The engine weighs it below any evidence about that
# peer, so that the rank that ended first, not the one that noticed, is named.
COMMUNICATION_FAILED_STATUS = 3


def span_kind(name: str) -> int:
    """The wire value of a span kind named as the engine names it ("F", "send-act", ...)."""
    try:
        return SPAN_KINDS.index(name)
    except ValueError:
        raise ValueError(f"unknown op kind {name!r}: the engine knows {', '.join(SPAN_KINDS)}") from None


def memory_category(name: str) -> int:
    try:
        return MEMORY_CATEGORIES.index(name)
    except ValueError:
        raise ValueError(
            f"unknown memory category {name!r}: the engine knows {', '.join(MEMORY_CATEGORIES)}"
        ) from None


def log_level(name: str) -> int:
    try:
        return LOG_LEVELS.index(name)
    except ValueError:
        raise ValueError(f"unknown log level {name!r}: the engine knows {', '.join(LOG_LEVELS)}") from None


def wire_text(text: str | bytes) -> bytes:
    """Text as the C++ encoder sends it: valid UTF-8 (what is not becomes U+FFFD), cut after the last
    whole character that fits in MAX_TEXT_BYTES."""
    if isinstance(text, (bytes, bytearray)):
        data = bytes(text).decode("utf-8", "replace").encode("utf-8")
    else:
        try:
            data = text.encode("utf-8")
        except UnicodeEncodeError:  # lone surrogates
            data = "".join("\ufffd" if "\ud800" <= c <= "\udfff" else c for c in text).encode("utf-8")
    if len(data) > MAX_TEXT_BYTES:
        data = data[:MAX_TEXT_BYTES].decode("utf-8", "ignore").encode("utf-8")
    return data


def _string(text: str | bytes) -> bytes:
    data = wire_text(text)
    return struct.pack("<I", len(data)) + data


def _enum(value: int, count: int, what: str) -> int:
    if not 0 <= int(value) < count:
        raise ValueError(f"{what} {value} is out of range (0..{count - 1})")
    return int(value)


# ---- records: each a dataclass with its type and body ----


@dataclasses.dataclass
class Span:
    TYPE: ClassVar[RecordType] = RecordType.SPAN
    step: int
    stage: int
    chunk: int
    microbatch: int
    kind: int
    peer: int
    begin_ns: int
    end_ns: int
    bytes: int = 0

    def body(self) -> bytes:
        return struct.pack(
            "<ihhiBiqqQ",
            self.step,
            self.stage,
            self.chunk,
            self.microbatch,
            _enum(self.kind, len(SPAN_KINDS), "span kind"),
            self.peer,
            self.begin_ns,
            self.end_ns,
            self.bytes,
        )


@dataclasses.dataclass
class ExpertLoad:
    TYPE: ClassVar[RecordType] = RecordType.EXPERT_LOAD
    step: int
    layer: int
    routed: Sequence[int]
    dropped: Sequence[int]

    def body(self) -> bytes:
        n = len(self.routed)
        if len(self.dropped) != n:
            raise ValueError(
                f"{n} routed counts but {len(self.dropped)} dropped counts; both need one entry per expert"
            )
        if n > MAX_EXPERTS_PER_LAYER:
            raise ValueError(f"{n} experts exceed the limit of {MAX_EXPERTS_PER_LAYER}")
        return struct.pack(f"<iiI{n}II{n}I", self.step, self.layer, n, *self.routed, n, *self.dropped)


@dataclasses.dataclass
class MemorySample:
    TYPE: ClassVar[RecordType] = RecordType.MEMORY_SAMPLE
    step: int
    time_ns: int
    category: int
    current_bytes: int
    peak_bytes: int

    def body(self) -> bytes:
        category = _enum(self.category, len(MEMORY_CATEGORIES), "memory category")
        return struct.pack("<iqBqq", self.step, self.time_ns, category, self.current_bytes, self.peak_bytes)


@dataclasses.dataclass
class StepMetrics:
    TYPE: ClassVar[RecordType] = RecordType.STEP_METRICS
    step: int
    begin_ns: int
    end_ns: int
    loss: float = 0.0
    aux_loss: float = 0.0
    grad_norm: float = 0.0
    learning_rate: float = 0.0
    tokens_per_s: float = 0.0
    bubble_ratio: float = 0.0
    tokens: int = 0

    def body(self) -> bytes:
        return struct.pack(
            "<iqqddddddq",
            self.step,
            self.begin_ns,
            self.end_ns,
            self.loss,
            self.aux_loss,
            self.grad_norm,
            self.learning_rate,
            self.tokens_per_s,
            self.bubble_ratio,
            self.tokens,
        )


@dataclasses.dataclass
class NodeSample:
    TYPE: ClassVar[RecordType] = RecordType.NODE_SAMPLE
    time_ns: int
    host: str
    host_memory_total: int = -1
    host_memory_used: int = -1
    device: int = -1
    device_memory_total: int = -1
    device_memory_used: int = -1
    device_utilization: float = -1.0

    def body(self) -> bytes:
        return (
            struct.pack("<q", self.time_ns)
            + _string(self.host)
            + struct.pack(
                "<qqiqqf",
                self.host_memory_total,
                self.host_memory_used,
                self.device,
                self.device_memory_total,
                self.device_memory_used,
                self.device_utilization,
            )
        )


@dataclasses.dataclass
class Log:
    TYPE: ClassVar[RecordType] = RecordType.LOG
    time_ns: int
    level: int
    text: str

    def body(self) -> bytes:
        return struct.pack("<qB", self.time_ns, _enum(self.level, len(LOG_LEVELS), "log level")) + _string(self.text)


@dataclasses.dataclass
class Heartbeat:
    TYPE: ClassVar[RecordType] = RecordType.HEARTBEAT
    time_ns: int
    state: int
    step: int
    pid: int
    detail: int
    dropped_records: int
    host: str

    def body(self) -> bytes:
        state = _enum(self.state, len(RankState), "rank state")
        return struct.pack(
            "<qBiiiQ", self.time_ns, state, self.step, self.pid, self.detail, self.dropped_records
        ) + _string(self.host)


@dataclasses.dataclass
class ClockOffset:
    TYPE: ClassVar[RecordType] = RecordType.CLOCK_OFFSET
    time_ns: int
    offset_ns: int
    round_trip_ns: int

    def body(self) -> bytes:
        return struct.pack("<qqq", self.time_ns, self.offset_ns, self.round_trip_ns)


Record = Span | ExpertLoad | MemorySample | StepMetrics | NodeSample | Log | Heartbeat | ClockOffset


def encode_record(record: Record) -> bytes:
    """A record's header and body. Raises ValueError (as the C++ encoder throws) for what the engine
    would refuse: an enumeration out of range, expert arrays of unequal length or too long."""
    body = record.body()
    return _RECORD_HEADER.pack(int(record.TYPE), 0, 0, len(body)) + body


def encode_batch(rank: int, sequence: int, records: Sequence[Record]) -> bytes:
    """One ZeroMQ message: the batch header and `records`. `sequence` is the number of records this
    rank sent before the batch."""
    if len(records) > MAX_RECORDS_PER_BATCH:
        raise ValueError(f"telemetry batch of {len(records)} records exceeds the limit of {MAX_RECORDS_PER_BATCH}")
    parts = [_BATCH_HEADER.pack(BATCH_MAGIC, FORMAT_VERSION, 0, rank, sequence, len(records))]
    parts.extend(encode_record(r) for r in records)
    frame = b"".join(parts)
    if len(frame) > MAX_BATCH_BYTES:
        raise ValueError(f"telemetry batch of {len(frame)} bytes exceeds the limit of {MAX_BATCH_BYTES}; split it")
    return frame


# ---- the clock exchange (wire/clock.h, NTP's four timestamps, RFC 5905 sec. 8) ----

CLOCK_REQUEST_MAGIC = 0x5143424D  # bytes 'M' 'B' 'C' 'Q'
CLOCK_REPLY_MAGIC = 0x5243424D  # bytes 'M' 'B' 'C' 'R'
_CLOCK_REQUEST = struct.Struct("<IIq")
_CLOCK_REPLY = struct.Struct("<IIqqq")


def encode_clock_request(rank: int, sent_ns: int) -> bytes:
    return _CLOCK_REQUEST.pack(CLOCK_REQUEST_MAGIC, rank, sent_ns)


def decode_clock_reply(frame: bytes) -> tuple[int, int, int, int] | None:
    """(rank, t1 echoed, t2, t3) of a reply; None for anything that is not one."""
    if len(frame) != _CLOCK_REPLY.size:
        return None
    magic, rank, t1, t2, t3 = _CLOCK_REPLY.unpack(frame)
    return (rank, t1, t2, t3) if magic == CLOCK_REPLY_MAGIC else None


def measure_clock(t1: int, t2: int, t3: int, t4: int) -> tuple[int, int, int]:
    """(offset, round trip, midpoint) as wire::measureClock gives them: the offset is this rank's clock
    minus the engine's, off by at most half the round trip. C++'s integer division truncates toward
    zero, so it is written out rather than Python's floor division."""

    def halve(v: int) -> int:
        return -((-v) // 2) if v < 0 else v // 2

    return halve((t1 - t2) + (t4 - t3)), (t4 - t1) - (t3 - t2), t1 + halve(t4 - t1)
