"""The client: what a training program calls, and the thread that ships it to the engine.

It behaves as agent/telemetry/telemetry_sender does, so the engine cannot tell a Python rank from a
C++ agent: records go from the training thread into a bounded queue and leave from a background
thread over a ZeroMQ PUSH socket (send high-water mark 64, ZMQ_IMMEDIATE, so that until the collector
answers records wait in the queue, whose bound and drop count are exact); a record that does not fit
is dropped and counted, and the count travels in every heartbeat. The stream opens with the clock
offset (when the engine's clock server is known) and a Starting heartbeat; Running heartbeats follow
every second, a new clock offset every five, and the last heartbeat says Finished, Failed or
Terminated. Frames carry up to 4096 records and the per-rank sequence number of their first record.

Steps are numbered from 1, as the agent numbers them. The engine closes a step when it has the step's
metrics (from rank 0 only, who speaks for the job) and an "optimizer" span from every rank; step()
adds a zero-length optimizer span at the step's end on a rank that recorded none.

GPU timing: an op on CUDA is a pair of torch.cuda.Event(enable_timing=True) recorded on the current
stream. They are put on the wire's clock through an anchor event recorded on an idle stream of our own
at a known host time (idle, so the device stamps it as soon as it sees it: microseconds), and resolved
by the sender thread with Event.query() once the device has passed them, so the training loop never
waits for the device. A step's records leave together once all its events are done, so the engine
never closes a step before its GPU spans arrive.
"""

from __future__ import annotations

import atexit
import collections
import math
import os
import signal
import struct
import socket as _socket
import sys
import threading
import time
import weakref
from typing import Any

from . import environment, wire
from .clock import ClockSync, now_ns

RECORDS_PER_BATCH = 4096  # as the agent: amortises a message's cost, stays far below the frame limit
CLOCK_INTERVAL_S = 5.0
ENGINE_STOP_SIGNAL = signal.SIGUSR2  # wire::kEngineStopSignal
STOP_LINGER_S = 30  # wire::kStopLingerSeconds


def _torch():
    """torch if the program imported it; never imported here first."""
    return sys.modules.get("torch")


# ---- what waits on the device ----


class _GpuSpan:
    """A span timed by two CUDA events, measured from an anchor event whose host time is known."""

    __slots__ = ("record", "anchor", "anchor_ns", "begin", "end", "device")

    def __init__(self, record, anchor, anchor_ns, begin, end, device):
        self.record, self.anchor, self.anchor_ns = record, anchor, anchor_ns
        self.begin, self.end, self.device = begin, end, device

    def ready(self) -> bool:
        return self.end.query() and self.begin.query() and self.anchor.query()

    def resolve(self) -> None:
        torch = _torch()
        with torch.cuda.device(self.device):
            begin_ms = self.anchor.elapsed_time(self.begin)
            end_ms = self.anchor.elapsed_time(self.end)
        self.record.begin_ns = self.anchor_ns + int(round(begin_ms * 1e6))
        self.record.end_ns = max(self.record.begin_ns, self.anchor_ns + int(round(end_ms * 1e6)))


class _DeviceValue:
    """A tensor's value, copied to pinned host memory behind an event (no synchronisation)."""

    __slots__ = ("host", "event", "apply")

    def __init__(self, tensor, apply):
        torch = _torch()
        self.host = torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=True)
        self.host.copy_(tensor.detach(), non_blocking=True)
        self.event = torch.cuda.Event()
        self.event.record()
        self.apply = apply

    def ready(self) -> bool:
        return self.event.query()

    def resolve(self) -> None:
        self.apply(self.host.tolist())


def _is_cuda_tensor(value) -> bool:
    torch = _torch()
    return torch is not None and isinstance(value, torch.Tensor) and value.is_cuda


def _host_value(value):
    """A number or list from a Python value or a CPU tensor."""
    torch = _torch()
    if torch is not None and isinstance(value, torch.Tensor):
        return value.detach().tolist()
    return value


class _Bundle:
    """Records that leave together, once what they wait on (device work) is done."""

    __slots__ = ("records", "waits", "resolved")

    def __init__(self, records: list, waits: list | None = None):
        self.records = records
        self.waits = waits or []
        self.resolved = 0

    def ready(self) -> bool:
        """Whether every wait is done, resolving those that are in order (work on one stream ends in
        the order it was queued, so the first that is not done ends the look)."""
        while self.resolved < len(self.waits):
            wait = self.waits[self.resolved]
            if not wait.ready():
                return False
            wait.resolve()
            self.resolved += 1
        return True


def _communication_failure(exc, tb) -> bool:
    """Whether an exception is torch.distributed's: a collective or send/recv that failed, most often
    because a peer ended first (the agent's CommError). torch 2.x raises torch.distributed.DistError
    and its subclasses; older ones (Debian's 1.13) a RuntimeError from the backend (gloo's "Connection
    closed by peer"), known by the frame that raised it: torch/distributed's own code."""
    torch = _torch()
    distributed = sys.modules.get("torch.distributed") if torch is not None else None
    dist_error = getattr(distributed, "DistError", None)
    if isinstance(dist_error, type) and isinstance(exc, dist_error):
        return True
    if not isinstance(exc, RuntimeError) or distributed is None:
        return False
    last = tb
    while last is not None and last.tb_next is not None:
        last = last.tb_next
    if last is None:
        return False
    filename = last.tb_frame.f_code.co_filename.replace(os.sep, "/")
    return "/torch/distributed/" in filename


# ---- the op context manager ----


class _Op:
    __slots__ = ("client", "span", "begin_event", "device", "anchor")

    def __init__(self, client: "Client", span: wire.Span):
        self.client, self.span = client, span
        self.begin_event = None

    def __enter__(self):
        if self.client._cuda_timing():
            torch = _torch()
            self.device = torch.cuda.current_device()
            # Taken before the op's first event, so that no elapsed time from it is negative.
            self.anchor = self.client._anchor(self.device)
            self.begin_event = torch.cuda.Event(enable_timing=True)
            self.begin_event.record()
        self.span.begin_ns = now_ns()
        return self

    def __exit__(self, *exc):
        self.span.end_ns = now_ns()
        if self.begin_event is None:
            self.client._add_span(self.span, None)
        else:
            torch = _torch()
            end = torch.cuda.Event(enable_timing=True)
            end.record()
            anchor, anchor_ns = self.anchor
            self.client._add_span(self.span, _GpuSpan(self.span, anchor, anchor_ns, self.begin_event, end, self.device))
        return False


class _NoOp:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


# ---- the client ----

_clients: "weakref.WeakSet[Client]" = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    for client in list(_clients):
        client.close()


class Client:
    """A rank's connection to the engine. Made by meshbench.connect(); see the package's docstring."""

    def __init__(
        self,
        settings: environment.Settings,
        *,
        queue_capacity: int = 1 << 20,
        heartbeat_interval: float = 1.0,
        finish_timeout: float = 5.0,
        timing: str = "auto",
        report_metrics: bool | None = None,
        sample_node: bool | None = None,
        handle_signals: bool = True,
    ):
        import zmq

        if timing not in ("auto", "cuda", "cpu"):
            raise ValueError(f"timing is {timing!r}; it is auto, cuda or cpu")
        self.rank = settings.rank
        self.world_size = settings.world_size
        self.endpoint = settings.endpoint
        self.clock_endpoint = settings.clock_endpoint
        self.report_metrics = self.rank == 0 if report_metrics is None else bool(report_metrics)
        self._sample_node = settings.local_rank == 0 if sample_node is None else bool(sample_node)
        self._timing = timing
        self._capacity = int(queue_capacity)
        self._heartbeat_interval = float(heartbeat_interval)
        self._finish_timeout = float(finish_timeout)
        self._host = _socket.gethostname() or "localhost"
        self._pid = os.getpid()

        # The step being recorded (training thread).
        self._step = 1
        self._completed = 0
        self._step_lock = threading.Lock()
        self._step_records: list = []
        self._step_waits: list = []
        self._step_optimizer = False
        self._last_stage = 0
        self._step_begin_ns: int | None = None
        self._connected_ns = now_ns()
        self._anchors: dict[int, tuple[Any, int]] = {}
        self._anchor_streams: dict[int, Any] = {}
        self._cuda: bool | None = None

        # The queue (shared with the sender thread, under _lock).
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._queue: collections.deque[_Bundle] = collections.deque()
        self._queued = 0  # records queued or in the sender's backlog
        self._dropped = 0
        self._sent = 0  # records the socket took: the next batch's sequence
        self._finishing = False
        self._final_state = wire.RankState.FINISHED
        self._final_detail = 0
        self._closed = False
        self._close_lock = threading.Lock()

        self._context = zmq.Context()
        self._push = self._context.socket(zmq.PUSH)
        try:
            self._push.setsockopt(zmq.SNDHWM, 64)
            self._push.setsockopt(zmq.IMMEDIATE, 1)
            self._push.setsockopt(zmq.LINGER, int(self._finish_timeout * 1000))
            if settings.keys is not None:
                settings.keys.apply(self._push)
            self._push.connect(self.endpoint)
            self._clock = (
                ClockSync(self._context, self.clock_endpoint, self.rank, settings.keys) if self.clock_endpoint else None
            )
        except zmq.ZMQError as e:
            self._push.close(0)
            self._context.term()
            raise environment.ConnectError(
                f"cannot connect telemetry to {self.endpoint!r}: {e} "
                "(expected an endpoint such as tcp://host:port or ipc:///path)"
            ) from None
        # Queued before anything can be posted, so the stream opens with them.
        opening = self._node_samples() if self._sample_node else []
        opening.append(self._heartbeat(wire.RankState.STARTING, 0))
        self._queue.append(_Bundle(opening))
        self._queued = len(opening)
        self._thread = threading.Thread(target=self._run, name="meshbench-telemetry", daemon=True)
        self._thread.start()
        _clients.add(self)
        if handle_signals:
            self._install_signal_handlers()

    # ---- what the training loop calls ----

    @property
    def step_number(self) -> int:
        """The step that ops are recorded into now (from 1)."""
        return self._step

    @property
    def dropped(self) -> int:
        """Records dropped so far because the queue was full."""
        return self._dropped

    def op(
        self,
        kind: str,
        stage: int = 0,
        microbatch: int = -1,
        chunk: int = 0,
        *,
        peer: int = -1,
        nbytes: int = 0,
    ):
        """A context manager that records the block as a span of `kind` (F, B, W, send-act, recv-act,
        send-grad, recv-grad, optimizer, dp-reduce, idle) in the current step. `peer` is the world
        rank on the other side of a send or receive, `nbytes` the bytes it moved."""
        if self._closed:
            return _NoOp()
        span = wire.Span(self._step, stage, chunk, microbatch, wire.span_kind(kind), peer, 0, 0, nbytes)
        return _Op(self, span)

    def step(
        self,
        loss=None,
        tokens: int = 0,
        *,
        aux_loss: float = 0.0,
        grad_norm: float = 0.0,
        learning_rate: float = 0.0,
    ) -> int:
        """Ends the current step and returns its number. On rank 0 (report_metrics) it sends the step's
        metrics: begin (the previous step's end; the first step begins at its first op, or at
        connect()), end (now), loss (a float or a tensor, read without synchronising; NaN when not
        given), `tokens` in the step's global batch and tokens/s. The bubble ratio is sent as 0: the
        engine measures it from every rank's spans (plan::measuredBubble)."""
        end = now_ns()
        with self._step_lock:
            step = self._step
            records, waits = self._step_records, self._step_waits
            begin = self._step_begin_ns
            if begin is None:
                begin = min((r.begin_ns for r in records if isinstance(r, wire.Span)), default=self._connected_ns)
            if not self._step_optimizer:
                records.append(
                    wire.Span(step, self._last_stage, 0, -1, wire.span_kind("optimizer"), -1, end, end)
                )
            self._step_records, self._step_waits, self._step_optimizer = [], [], False
            self._step_begin_ns = end
            self._anchors = {}
            self._step += 1
        if self.report_metrics:
            tokens = int(_host_value(tokens) or 0)
            seconds = (end - begin) / 1e9
            metrics = wire.StepMetrics(
                step,
                begin,
                end,
                math.nan,
                float(_host_value(aux_loss)),
                float(_host_value(grad_norm)),
                float(learning_rate),
                tokens / seconds if tokens and seconds > 0 else 0.0,
                0.0,
                tokens,
            )
            if _is_cuda_tensor(loss):
                waits.append(_DeviceValue(loss.reshape(()), lambda v, m=metrics: setattr(m, "loss", float(v))))
            elif loss is not None:
                metrics.loss = float(_host_value(loss))
            records.append(metrics)
        self._post(_Bundle(records, waits))
        self._completed = step
        return step

    def expert_load(self, layer: int, tokens_per_expert, dropped=None) -> None:
        """Tokens routed to each expert of MoE layer `layer` (global index) in this step, and those its
        capacity dropped (zeros when not given): lists or tensors, summed over the data-parallel group.
        One rank per (stage, tensor-parallel group) reports a layer; the engine ignores repeats."""
        record = wire.ExpertLoad(self._step, int(layer), [], [])
        waits = []

        def setter(name):
            def apply(values):
                setattr(record, name, [int(x) for x in values])
                if dropped is None:
                    record.dropped = [0] * len(record.routed)

            return apply

        for name, value in (("routed", tokens_per_expert), ("dropped", dropped)):
            if value is None:
                continue
            if _is_cuda_tensor(value):
                waits.append(_DeviceValue(value.reshape(-1), setter(name)))
            else:
                setter(name)(_host_value(value))
        with self._step_lock:
            self._step_records.append(record)
            self._step_waits.extend(waits)

    def memory(self, category: str, nbytes: int, peak: int | None = None) -> None:
        """Bytes this rank holds in `category` (params, grads, optimizer, activations, workspace) now,
        and the peak during the step (nbytes when not given)."""
        current = int(nbytes)
        record = wire.MemorySample(
            self._step, now_ns(), wire.memory_category(category), current, current if peak is None else int(peak)
        )
        with self._step_lock:
            self._step_records.append(record)

    def log(self, text: str, level: str = "info") -> None:
        """A log line for the session (debug, info, warning or error)."""
        self._post(_Bundle([wire.Log(now_ns(), wire.log_level(level), str(text))]))

    def close(self, state: wire.RankState | str = wire.RankState.FINISHED, detail: int = 0) -> None:
        """Sends what is queued and the last heartbeat (Finished unless told), waiting for the
        collector at most finish_timeout seconds. Later calls do nothing."""
        if isinstance(state, str):
            state = wire.RankState[state.upper()]
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
            with self._step_lock:  # what was recorded after the last step() still goes
                leftover, waits = self._step_records, self._step_waits
                self._step_records, self._step_waits = [], []
            if leftover:
                self._post(_Bundle(leftover, waits))
            with self._lock:
                self._finishing = True
                self._final_state = wire.RankState(state)
                self._final_detail = int(detail)
                self._wake.notify()
            self._thread.join(self._finish_timeout + 2.0)
            self._push.close(int(self._finish_timeout * 1000))
            if self._clock is not None:
                self._clock.close()
            self._context.term()
            _clients.discard(self)

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc_type is None:
            self.close(wire.RankState.FINISHED, 0)
        elif issubclass(exc_type, KeyboardInterrupt):
            self.close(wire.RankState.TERMINATED, int(signal.SIGINT))
        elif issubclass(exc_type, SystemExit):
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            self.close(wire.RankState.FINISHED if code == 0 else wire.RankState.FAILED, code)
        else:
            communication = _communication_failure(exc, tb)
            self.log(f"{'communication: ' if communication else ''}{exc_type.__name__}: {exc}", "error")
            self.close(wire.RankState.FAILED, wire.COMMUNICATION_FAILED_STATUS if communication else 1)
        return False

    # ---- recording ----

    def _cuda_timing(self) -> bool:
        if self._cuda is None:
            torch = _torch()
            cuda_ready = torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized()
            if self._timing == "cuda" and not cuda_ready:
                raise RuntimeError("meshbench: timing='cuda' but this program has not initialised CUDA in torch")
            self._cuda = self._timing == "cuda" or (self._timing == "auto" and cuda_ready)
        return self._cuda

    def _anchor(self, device: int):
        """This step's anchor on `device`: an event on an idle stream of ours and its host time."""
        anchor = self._anchors.get(device)
        if anchor is None:
            torch = _torch()
            stream = self._anchor_streams.get(device)
            if stream is None:
                stream = self._anchor_streams[device] = torch.cuda.Stream(device=device)
            event = torch.cuda.Event(enable_timing=True)
            event.record(stream)
            anchor = self._anchors[device] = (event, now_ns())
        return anchor

    def _add_span(self, span: wire.Span, wait) -> None:
        with self._step_lock:
            self._step_records.append(span)
            if wait is not None:
                self._step_waits.append(wait)
            if span.kind == wire.SPAN_KINDS.index("optimizer"):
                self._step_optimizer = True
            self._last_stage = span.stage

    def _post(self, bundle: _Bundle) -> None:
        """Never blocks: queues the bundle, or drops (and counts) it when it does not fit."""
        n = len(bundle.records)
        if n == 0:
            return
        with self._lock:
            if self._finishing:
                return
            if self._queued + n > self._capacity:
                self._dropped += n
                return
            self._queued += n
            self._queue.append(bundle)
            self._wake.notify()

    def _heartbeat(self, state: wire.RankState, detail: int) -> wire.Heartbeat:
        return wire.Heartbeat(
            now_ns(), int(state), self._completed, self._pid, int(detail), self._dropped, self._host
        )

    def _node_samples(self) -> list:
        """The host's memory (/proc/meminfo: used = total - available), and each GPU's memory when
        this program has initialised CUDA in torch (utilisation unknown: -1)."""
        sample = wire.NodeSample(now_ns(), self._host)
        try:
            with open("/proc/meminfo") as meminfo:
                fields = dict(line.split()[:2] for line in meminfo if len(line.split()) >= 2)
            total = int(fields.get("MemTotal:", -1))
            available = int(fields.get("MemAvailable:", -1))
            if total > 0:
                sample.host_memory_total = total * 1024
                if available >= 0:
                    sample.host_memory_used = (total - available) * 1024
        except (OSError, ValueError):
            pass
        samples = [sample]
        torch = _torch()
        if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
            for device in range(torch.cuda.device_count()):
                try:
                    free, total = torch.cuda.mem_get_info(device)
                except Exception:  # a device this process cannot use
                    continue
                samples.append(
                    wire.NodeSample(sample.time_ns, self._host, device=device, device_memory_total=int(total),
                                    device_memory_used=int(total - free))
                )
        return samples

    # ---- the sender thread ----

    def _run(self) -> None:
        import zmq

        backlog: collections.deque = collections.deque()  # records taken from the queue, not yet sent
        waiting: collections.deque[_Bundle] = collections.deque()  # bundles whose device work is not done
        frame: bytes | None = None  # encoded, refused by a full socket: resent as is
        frame_records = 0
        next_heartbeat = time.monotonic() + self._heartbeat_interval
        next_clock = time.monotonic() + CLOCK_INTERVAL_S
        deadline = wait_deadline = None
        final_sent = False

        def add_own(record) -> None:
            backlog.append(record)
            with self._lock:
                self._queued += 1

        def drop(records: int, why: str) -> None:
            with self._lock:
                self._dropped += records
                self._queued -= records
            add_own(wire.Log(now_ns(), wire.log_level("error"), f"telemetry: dropped {records} records: {why}"))

        def send_frame() -> bool:
            nonlocal frame, frame_records
            if frame is None:
                return True
            try:
                self._push.send(frame, zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return False
            self._sent += frame_records
            with self._lock:
                self._queued -= frame_records
            frame, frame_records = None, 0
            return True

        def encode_next() -> None:
            nonlocal frame, frame_records
            n = min(len(backlog), RECORDS_PER_BATCH)
            records = [backlog.popleft() for _ in range(n)]
            try:
                frame, frame_records = wire.encode_batch(self.rank, self._sent, records), n
            except (ValueError, OverflowError, TypeError, struct.error) as e:
                # Records the format cannot carry: dropped, counted and said, never the end of the rank.
                drop(n, str(e))

        # Before anything else leaves, so that the engine has the rank's clock for every record after.
        if self._clock is not None:
            offset = self._measure_clock()
            add_own(
                offset
                if offset is not None
                else wire.Log(
                    now_ns(),
                    wire.log_level("warning"),
                    f"telemetry: the engine's clock at {self.clock_endpoint} did not answer; this rank's "
                    "times stay on its own clock until it does",
                )
            )

        while True:
            with self._lock:
                # Device work and a frame the socket refused are looked at again every few milliseconds.
                busy = frame is not None or bool(waiting)
                timeout = 0.005 if busy else max(0.0, next_heartbeat - time.monotonic())
                if not self._queue and not (self._finishing and deadline is None):
                    self._wake.wait(timeout)
                waiting.extend(self._queue)
                self._queue.clear()
                finishing = self._finishing
                final_state, final_detail = self._final_state, self._final_detail
            # Bundles leave in order; one whose device work is not done holds back those behind it.
            while waiting:
                try:
                    if not waiting[0].ready():
                        break
                except Exception as e:  # the device failed: the bundle's records are lost, counted and said
                    drop(len(waiting.popleft().records), f"their device timing failed: {e}")
                    continue
                backlog.extend(waiting.popleft().records)
            now = time.monotonic()
            if finishing and deadline is None:
                deadline = now + self._finish_timeout
                wait_deadline = now + self._finish_timeout / 2
            elif not finishing and now >= next_heartbeat:
                if self._sample_node:
                    for sample in self._node_samples():
                        add_own(sample)
                add_own(self._heartbeat(wire.RankState.RUNNING, 0))
                next_heartbeat = now + self._heartbeat_interval
            if not finishing and self._clock is not None and now >= next_clock:
                offset = self._measure_clock()
                if offset is not None:
                    add_own(offset)
                next_clock = time.monotonic() + CLOCK_INTERVAL_S
            if finishing and waiting and now >= wait_deadline:
                lost = sum(len(b.records) for b in waiting)
                waiting.clear()
                drop(lost, "the device had not run their work when the program closed the connection")
            if finishing and not waiting and not final_sent:
                # After every record the program posted, so it is the rank's last word.
                add_own(self._heartbeat(final_state, final_detail))
                final_sent = True
            while send_frame() and backlog:
                encode_next()
            if finishing and ((final_sent and frame is None and not backlog) or time.monotonic() >= deadline):
                return

    def _measure_clock(self):
        try:
            return self._clock.measure()
        except Exception:  # the exchange is best effort; times then stay on this rank's clock
            return None

    # ---- stop signals ----

    def _install_signal_handlers(self) -> None:
        """SIGTERM, SIGHUP and the engine's stop signal (SIGUSR2) end the rank after a Terminated
        heartbeat, as they end the agent, where the program left them at their defaults. A rank of a
        multi-rank job stopped by the engine waits (at most 30 s, or until the next signal) to be ended,
        so that its peers' collectives do not abort them before they too have said so."""
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in (signal.SIGTERM, signal.SIGHUP, ENGINE_STOP_SIGNAL):
            try:
                if signal.getsignal(sig) is signal.SIG_DFL:
                    signal.signal(sig, self._on_stop_signal)
            except (ValueError, OSError):
                pass

    _stopping = False

    def _on_stop_signal(self, signum, frame) -> None:
        if self._stopping:  # the second signal during the linger ends the rank now
            os._exit(128 + signum)
        self._stopping = True
        self.close(wire.RankState.TERMINATED, signum)
        if signum == ENGINE_STOP_SIGNAL and self.world_size > 1:
            end = time.monotonic() + STOP_LINGER_S
            while time.monotonic() < end:
                time.sleep(0.1)
        sys.stdout.flush()
        os._exit(128 + signum)


def connect(
    endpoint: str | None = None,
    *,
    rank: int | None = None,
    world_size: int | None = None,
    keys: "environment.Keys | str | None" = None,
    clock: str | None = None,
    local_rank: int | None = None,
    queue_capacity: int = 1 << 20,
    heartbeat_interval: float = 1.0,
    finish_timeout: float = 5.0,
    timing: str = "auto",
    report_metrics: bool | None = None,
    sample_node: bool | None = None,
    handle_signals: bool = True,
) -> Client:
    """Connects this rank to the engine. Everything not given comes from the environment (see
    meshbench.environment); raises ConnectError when the collector's endpoint is in neither."""
    settings = environment.settings(endpoint, rank, world_size, keys, clock, local_rank)
    return Client(
        settings,
        queue_capacity=queue_capacity,
        heartbeat_interval=heartbeat_interval,
        finish_timeout=finish_timeout,
        timing=timing,
        report_metrics=report_metrics,
        sample_node=sample_node,
        handle_signals=handle_signals,
    )
