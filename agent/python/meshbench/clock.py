"""The one clock of every record, and this rank's offset to the engine's clock.

now_ns() is engine/wire/wall_clock.h's wallAlignedNowNs: this process's monotonic clock moved onto the
wall clock once (the offset measured at the first call), so times never jump when NTP steps the wall
clock, and ranks of one host agree with each other and with C++ agents. MESHBENCH_CLOCK_SKEW_NS adds
that many nanoseconds, as it does for the agent (the tests' stand-in for a host whose clock is wrong).

ClockSync is agent/telemetry/clock_sync's burst of exchanges with the engine's clock server; the one
with the shortest round trip gives the ClockOffset record, whose error is at most half that round trip.
"""

from __future__ import annotations

import os
import threading
import time

from . import wire

_offset_lock = threading.Lock()
_offset_ns: int | None = None


def _measure_wall_offset_ns() -> int:
    # A wall-clock read bracketed by two monotonic reads; the tightest of a few tries.
    best, best_bracket = 0, None
    for _ in range(5):
        before = time.monotonic_ns()
        wall = time.time_ns()
        after = time.monotonic_ns()
        if best_bracket is None or after - before < best_bracket:
            best_bracket = after - before
            best = wall - (before + (after - before) // 2)
    return best


def _skew_ns() -> int:
    try:
        return int(os.environ.get("MESHBENCH_CLOCK_SKEW_NS", "0"))
    except ValueError:
        return 0


def wall_offset_ns() -> int:
    global _offset_ns
    if _offset_ns is None:
        with _offset_lock:
            if _offset_ns is None:
                _offset_ns = _measure_wall_offset_ns() + _skew_ns()
    return _offset_ns


def now_ns() -> int:
    """Nanoseconds on the wire's clock (monotonic, aligned to the wall clock once per process)."""
    return time.monotonic_ns() + wall_offset_ns()


class ClockSync:
    """The rank's side of the clock exchange over a ZeroMQ DEALER socket (used by one thread)."""

    EXCHANGES_PER_BURST = 8

    def __init__(self, context, endpoint: str, rank: int, keys=None):
        import zmq

        self._zmq = zmq
        self._rank = rank
        self._socket = context.socket(zmq.DEALER)
        self._socket.setsockopt(zmq.LINGER, 0)
        if keys is not None:
            keys.apply(self._socket)
        # Requests go to a completed connection only, so none is delivered late with a stale stamp.
        self._socket.setsockopt(zmq.IMMEDIATE, 1)
        self._socket.connect(endpoint)

    def close(self) -> None:
        self._socket.close(0)

    def measure(self, patience_ms: int = 250) -> wire.ClockOffset | None:
        """The burst's best exchange, or None when the engine did not answer within `patience_ms`
        (which ends the burst: an engine that does not answer one request will not answer the next)."""
        zmq = self._zmq
        best = None
        for _ in range(self.EXCHANGES_PER_BURST):
            t1 = now_ns()
            try:
                self._socket.send(wire.encode_clock_request(self._rank, t1), zmq.NOBLOCK)
            except zmq.Again:
                # Not connected yet: wait for the connection as long as for a reply, once.
                if not self._socket.poll(patience_ms, zmq.POLLOUT):
                    break
                continue
            answer = None
            give_up = time.monotonic() + patience_ms / 1000
            while answer is None:
                left_ms = int((give_up - time.monotonic()) * 1000)
                if left_ms <= 0 or not self._socket.poll(left_ms, zmq.POLLIN):
                    break
                try:
                    frame = self._socket.recv(zmq.NOBLOCK)
                except zmq.Again:
                    continue
                t4 = now_ns()
                reply = wire.decode_clock_reply(frame)
                if reply is not None and reply[1] == t1:  # a late reply to an earlier request is put aside
                    answer = wire.measure_clock(t1, reply[2], reply[3], t4)
            if answer is None:
                break
            if best is None or answer[1] < best[1]:
                best = answer
        if best is None:
            return None
        offset, round_trip, midpoint = best
        return wire.ClockOffset(time_ns=midpoint, offset_ns=offset, round_trip_ns=round_trip)
