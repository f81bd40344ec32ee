"""The Python client (agent/python/meshbench) against the engine's wire format.

- Every record type's bytes against a frame written by hand from the layout in engine/wire/telemetry.h.
- A live session: the client connected to a ZeroMQ PULL socket here, its frames decoded by a minimal
  decoder of this file's own, with sequence numbers checked for loss; the clock exchange against a
  ROUTER that answers as the engine's clock server does; CURVE with keys as the engine hands them out.
- The bounded queue: what does not fit is dropped, counted, and reported in the last heartbeat.
- The ConnectError a program gets outside the engine.
When MESHBENCH_WIRE_DECODE_CHECK names the wire_decode_check program (tests/wire, built with the
engine), the hand-written frames and every frame of the live sessions are also decoded by the
engine's own decoder, field by field.

Run: python3 tests/python/test_meshbench_client.py (or python3 -m unittest from tests/python).
"""

from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "agent", "python"))

try:
    import zmq
except ImportError:  # python3-zmq is the client's one dependency
    zmq = None

if zmq is not None:
    import meshbench
    from meshbench import environment, pipelining, wire

DECODE_CHECK = os.environ.get("MESHBENCH_WIRE_DECODE_CHECK")


def h(text: str) -> bytes:
    """Hex with spaces and '|' between fields, for frames written by hand."""
    return bytes.fromhex(text.replace("|", " "))


# ---- a minimal decoder of this test's own: the layout of telemetry.h, not the client's code ----

_LAYOUTS = {
    1: ("span", "i:step h:stage h:chunk i:microbatch B:kind i:peer q:begin_ns q:end_ns Q:bytes"),
    2: ("expert_load", "i:step i:layer A:routed A:dropped"),
    3: ("memory_sample", "i:step q:time_ns B:category q:current_bytes q:peak_bytes"),
    4: (
        "step_metrics",
        "i:step q:begin_ns q:end_ns d:loss d:aux_loss d:grad_norm d:learning_rate d:tokens_per_s "
        "d:bubble_ratio q:tokens",
    ),
    5: (
        "node_sample",
        "q:time_ns S:host q:host_memory_total q:host_memory_used i:device q:device_memory_total "
        "q:device_memory_used f:device_utilization",
    ),
    6: ("log", "q:time_ns B:level S:text"),
    7: ("heartbeat", "q:time_ns B:state i:step i:pid i:detail Q:dropped_records S:host"),
    8: ("clock_offset", "q:time_ns q:offset_ns q:round_trip_ns"),
}


def decode_frame(frame: bytes) -> dict:
    magic, version, flags, rank, sequence, count = struct.unpack_from("<IHHIQI", frame, 0)
    assert frame[:4] == b"MBTW" and magic == 0x5754424D, "bad magic"
    assert version == 1 and flags == 0
    at, records = 24, []
    for _ in range(count):
        rtype, r1, r2, length = struct.unpack_from("<BBHI", frame, at)
        assert r1 == 0 and r2 == 0, "reserved bytes"
        at += 8
        body, at = frame[at : at + length], at + length
        assert len(body) == length, "truncated"
        name, layout = _LAYOUTS[rtype]
        record, pos = {"type": name}, 0
        for item in layout.split():
            code, field = item.split(":")
            if code == "S":
                (n,) = struct.unpack_from("<I", body, pos)
                record[field] = body[pos + 4 : pos + 4 + n].decode("utf-8")
                pos += 4 + n
            elif code == "A":
                (n,) = struct.unpack_from("<I", body, pos)
                record[field] = list(struct.unpack_from(f"<{n}I", body, pos + 4))
                pos += 4 + 4 * n
            else:
                (record[field],) = struct.unpack_from("<" + code, body, pos)
                pos += struct.calcsize(code)
        assert pos == length, f"{name}: body of {length} bytes, fields of {pos}"
        records.append(record)
    assert at == len(frame), "trailing bytes"
    return {"rank": rank, "sequence": sequence, "records": records}


_ENUM_NAMES = {
    "kind": ["F", "B", "W", "send-act", "recv-act", "send-grad", "recv-grad", "optimizer", "dp-reduce", "idle"],
    "category": ["params", "grads", "optimizer", "activations", "workspace"],
    "level": ["debug", "info", "warning", "error"],
    "state": ["starting", "running", "finished", "failed", "terminated"],
}


def engine_decode(frames: list[bytes]) -> list[dict]:
    """The frames through the engine's decoder (wire_decode_check): one dict per record."""
    with tempfile.NamedTemporaryFile(suffix=".frames", delete=False) as f:
        for frame in frames:
            f.write(struct.pack("<I", len(frame)) + frame)
        path = f.name
    try:
        out = subprocess.run([DECODE_CHECK, path], capture_output=True, text=True, timeout=60)
    finally:
        os.unlink(path)
    lines = [json.loads(line) for line in out.stdout.splitlines()]
    errors = [line for line in lines if "error" in line]
    if out.returncode != 0 or errors:
        raise AssertionError(f"the engine's decoder refused frames: {errors or out.stderr}")
    return lines


def same_as_engine(test: unittest.TestCase, frames: list[bytes]) -> None:
    """Every record as this file's decoder reads it equals what the engine's decoder read."""
    mine = []
    for index, frame in enumerate(frames):
        batch = decode_frame(frame)
        for record in batch["records"]:
            mine.append(dict(record, frame=index, rank=batch["rank"], sequence=batch["sequence"]))
    theirs = engine_decode(frames)
    test.assertEqual(len(theirs), len(mine))
    for a, b in zip(mine, theirs):
        for key, value in a.items():
            expected = _ENUM_NAMES[key][value] if key in _ENUM_NAMES else value
            if isinstance(value, float) and value != value:
                test.assertIsNone(b[key], key)  # NaN: null in JSON
            elif isinstance(value, float):
                test.assertAlmostEqual(b[key], expected, places=6, msg=key)
            else:
                test.assertEqual(b[key], expected, f"{a['type']}.{key}")


# ---- frames written by hand ----

# The batch header: "MBTW" | version 1 | flags 0 | rank 2 | sequence 7 | count 1.
HEADER_ONE = "4d425457|0100|0000|02000000|0700000000000000|01000000"

GOLDEN = {
    # type 1, body 41 bytes: step 3 | stage 1 | chunk 2 | mb 5 | kind B (1) | peer -1 | begin 1000 |
    # end 2000 | bytes 4096
    "span": (
        lambda: wire.Span(3, 1, 2, 5, 1, -1, 1000, 2000, 4096),
        "01|00|0000|29000000|03000000|0100|0200|05000000|01|ffffffff|e803000000000000|d007000000000000|"
        "0010000000000000",
    ),
    # type 2, body 16 + 8*2: step 1 | layer 3 | n 2 | 5 6 | n 2 | 0 1
    "expert_load": (
        lambda: wire.ExpertLoad(1, 3, [5, 6], [0, 1]),
        "02|00|0000|20000000|01000000|03000000|02000000|05000000|06000000|02000000|00000000|01000000",
    ),
    # type 3, body 29: step 2 | time 0x0102030405060708 | activations (3) | current 1024 | peak 2048
    "memory_sample": (
        lambda: wire.MemorySample(2, 0x0102030405060708, 3, 1024, 2048),
        "03|00|0000|1d000000|02000000|0807060504030201|03|0004000000000000|0008000000000000",
    ),
    # type 4, body 76: step 4 | begin 10 | end 20 | loss 1.5 | aux 0 | grad norm 0 | lr 0.25 |
    # tokens/s 2.0 | bubble 0 | tokens 256
    "step_metrics": (
        lambda: wire.StepMetrics(4, 10, 20, 1.5, 0.0, 0.0, 0.25, 2.0, 0.0, 256),
        "04|00|0000|4c000000|04000000|0a00000000000000|1400000000000000|000000000000f83f|0000000000000000|"
        "0000000000000000|000000000000d03f|0000000000000040|0000000000000000|0001000000000000",
    ),
    # type 5, body 52 + 2: time 5 | host "ab" | host total 100 | used 50 | device -1 | device total -1 |
    # used -1 | utilization -1.0f
    "node_sample": (
        lambda: wire.NodeSample(5, "ab", 100, 50, -1, -1, -1, -1.0),
        "05|00|0000|36000000|0500000000000000|02000000|6162|6400000000000000|3200000000000000|ffffffff|"
        "ffffffffffffffff|ffffffffffffffff|000080bf",
    ),
    # type 6, body 13 + 3: time 7 | warning (2) | "hé" (UTF-8 68 c3 a9)
    "log": (
        lambda: wire.Log(7, 2, "h\u00e9"),
        "06|00|0000|10000000|0700000000000000|02|03000000|68c3a9",
    ),
    # type 7, body 33 + 1: time 9 | finished (2) | step 3 | pid 42 | detail 0 | dropped 5 | host "h"
    "heartbeat": (
        lambda: wire.Heartbeat(9, 2, 3, 42, 0, 5, "h"),
        "07|00|0000|22000000|0900000000000000|02|03000000|2a000000|00000000|0500000000000000|01000000|68",
    ),
    # type 8, body 24: time 11 | offset -3 | round trip 6
    "clock_offset": (
        lambda: wire.ClockOffset(11, -3, 6),
        "08|00|0000|18000000|0b00000000000000|fdffffffffffffff|0600000000000000",
    ),
}


@unittest.skipIf(zmq is None, "python3-zmq is not installed")
class WireBytes(unittest.TestCase):
    def test_each_record_type_matches_the_layout(self):
        for name, (make, record_hex) in GOLDEN.items():
            with self.subTest(record=name):
                self.assertEqual(wire.encode_batch(2, 7, [make()]), h(HEADER_ONE + record_hex))

    def test_a_batch_of_every_type_and_the_engine_reads_it(self):
        frame = wire.encode_batch(2, 7, [make() for make, _ in GOLDEN.values()])
        header = "4d425457|0100|0000|02000000|0700000000000000|08000000"
        self.assertEqual(frame, h(header + "".join(hex_ for _, hex_ in GOLDEN.values())))
        decoded = decode_frame(frame)
        self.assertEqual([r["type"] for r in decoded["records"]], list(GOLDEN))
        if DECODE_CHECK:
            same_as_engine(self, [frame] + [wire.encode_batch(2, 7, [make()]) for make, _ in GOLDEN.values()])

    def test_text_is_made_valid_utf8_and_cut_at_a_whole_character(self):
        self.assertEqual(wire.wire_text("a\ud800b"), b"a\xef\xbf\xbdb")
        self.assertEqual(wire.wire_text(b"a\xffb"), b"a\xef\xbf\xbdb")
        cut = wire.wire_text("a" + "\u00e9" * 40000)
        self.assertEqual(len(cut), 1 + 2 * 32767)
        cut.decode("utf-8")

    def test_what_the_engine_would_refuse_is_refused(self):
        with self.assertRaisesRegex(ValueError, "span kind 10 is out of range"):
            wire.encode_batch(0, 0, [wire.Span(1, 0, 0, 0, 10, -1, 0, 0)])
        with self.assertRaisesRegex(ValueError, "2 routed counts but 1 dropped"):
            wire.encode_batch(0, 0, [wire.ExpertLoad(1, 0, [1, 2], [0])])
        with self.assertRaisesRegex(ValueError, "unknown op kind 'fwd'"):
            wire.span_kind("fwd")

    def test_clock_frames(self):
        # request: "MBCQ" | rank 1 | t1 0x10
        self.assertEqual(wire.encode_clock_request(1, 16), h("4d424351|01000000|1000000000000000"))
        # reply: "MBCR" | rank 1 | t1 16 | t2 20 | t3 22
        reply = h("4d424352|01000000|1000000000000000|1400000000000000|1600000000000000")
        self.assertEqual(wire.decode_clock_reply(reply), (1, 16, 20, 22))
        self.assertIsNone(wire.decode_clock_reply(reply[:-1]))
        # t1 16, t2 20, t3 22, t4 30: offset ((16-20)+(30-22))/2 = 2, round trip 14-2 = 12, midpoint 23
        self.assertEqual(wire.measure_clock(16, 20, 22, 30), (2, 12, 23))
        self.assertEqual(wire.measure_clock(0, 3, 3, 0)[0], -3)  # truncated toward zero, as in C++


class Collector:
    """A PULL socket standing for the engine's collector, reading frames on a thread."""

    def __init__(self, endpoint: str | None = None, curve_secret: bytes | None = None):
        self.context = zmq.Context()
        self.socket = self.context.socket(zmq.PULL)
        if curve_secret is not None:
            self.socket.curve_server = True
            self.socket.curve_secretkey = curve_secret
        if endpoint is None:
            port = self.socket.bind_to_random_port("tcp://127.0.0.1")
            endpoint = f"tcp://127.0.0.1:{port}"
        else:
            self.socket.bind(endpoint)
        self.endpoint = endpoint
        self.frames: list[bytes] = []

    def receive_until_final(self, timeout: float = 10.0) -> list[dict]:
        """Frames until a final heartbeat (finished, failed or terminated), decoded."""
        batches, end = [], time.monotonic() + timeout
        while time.monotonic() < end:
            if not self.socket.poll(100):
                continue
            frame = self.socket.recv()
            self.frames.append(frame)
            batches.append(decode_frame(frame))
            if any(r["type"] == "heartbeat" and r["state"] >= 2 for r in batches[-1]["records"]):
                return batches
        raise AssertionError("no final heartbeat arrived")

    def close(self):
        self.socket.close(0)
        self.context.term()


def records_in_order(test: unittest.TestCase, batches: list[dict], rank: int) -> list[dict]:
    """The records of every batch, checking that sequences leave no gap: nothing was lost."""
    expected, records = 0, []
    for batch in batches:
        test.assertEqual(batch["rank"], rank)
        test.assertEqual(batch["sequence"], expected, "a gap in the sequence: records were lost")
        expected += len(batch["records"])
        records.extend(batch["records"])
    return records


@unittest.skipIf(zmq is None, "python3-zmq is not installed")
class LiveSession(unittest.TestCase):
    def setUp(self):
        self.collector = Collector()

    def tearDown(self):
        self.collector.close()

    def connect(self, **kwargs):
        kwargs.setdefault("rank", 3)
        kwargs.setdefault("world_size", 4)
        kwargs.setdefault("keys", None)
        kwargs.setdefault("clock", None)
        kwargs.setdefault("handle_signals", False)
        kwargs.setdefault("sample_node", False)
        kwargs.setdefault("timing", "cpu")
        return meshbench.connect(self.collector.endpoint, **kwargs)

    def test_steps_arrive_whole_in_order_and_the_engine_reads_them(self):
        mb = self.connect(report_metrics=True, heartbeat_interval=0.05)
        with mb.op("F", stage=1, microbatch=0, chunk=0):
            time.sleep(0.002)
        with mb.op("send-act", stage=1, microbatch=0, peer=2, nbytes=1 << 20):
            pass
        with mb.op("B", stage=1, microbatch=0):
            time.sleep(0.002)
        mb.memory("params", 4096)
        mb.expert_load(1, [3, 4, 5], dropped=[0, 1, 0])
        self.assertEqual(mb.step(loss=2.5, tokens=1000), 1)
        with mb.op("F", stage=1, microbatch=0):
            pass
        with mb.op("optimizer", stage=1):
            pass
        mb.log("hello from rank 3", "warning")
        time.sleep(0.15)  # a few Running heartbeats
        self.assertEqual(mb.step(loss=2.0), 2)
        mb.close()
        records = records_in_order(self, self.collector.receive_until_final(), 3)

        first, last = records[0], records[-1]
        self.assertEqual((first["type"], first["state"], first["step"]), ("heartbeat", 0, 0))
        self.assertEqual((last["type"], last["state"], last["step"], last["dropped_records"]), ("heartbeat", 2, 2, 0))
        self.assertEqual(last["pid"], os.getpid())
        running = [r for r in records if r["type"] == "heartbeat" and r["state"] == 1]
        self.assertGreaterEqual(len(running), 1)

        spans = [r for r in records if r["type"] == "span"]
        kinds = [(r["step"], _ENUM_NAMES["kind"][r["kind"]]) for r in spans]
        # Step 1 recorded no optimizer op: step() adds a zero-length one so the engine can close it.
        self.assertEqual(kinds, [(1, "F"), (1, "send-act"), (1, "B"), (1, "optimizer"), (2, "F"), (2, "optimizer")])
        f, send, b, opt1 = spans[:4]
        self.assertEqual((f["stage"], f["microbatch"], f["chunk"], f["peer"]), (1, 0, 0, -1))
        self.assertGreaterEqual(f["end_ns"] - f["begin_ns"], 2_000_000)
        self.assertLessEqual(f["end_ns"], send["begin_ns"])
        self.assertEqual((send["peer"], send["bytes"]), (2, 1 << 20))
        self.assertEqual(opt1["begin_ns"], opt1["end_ns"])
        # The wire's clock is the wall clock's (aligned once): within a second of time.time_ns().
        self.assertLess(abs(f["begin_ns"] - time.time_ns()), 60_000_000_000)

        metrics = [r for r in records if r["type"] == "step_metrics"]
        self.assertEqual([m["step"] for m in metrics], [1, 2])
        m1, m2 = metrics
        self.assertEqual((m1["loss"], m1["tokens"], m1["bubble_ratio"]), (2.5, 1000, 0.0))
        self.assertLessEqual(m1["begin_ns"], f["begin_ns"])  # the first step begins at its first op
        self.assertEqual(m1["end_ns"], opt1["end_ns"])
        self.assertAlmostEqual(m1["tokens_per_s"], 1000 / ((m1["end_ns"] - m1["begin_ns"]) / 1e9), places=3)
        self.assertEqual(m2["begin_ns"], m1["end_ns"])
        self.assertEqual(m2["tokens_per_s"], 0.0)

        (load,) = [r for r in records if r["type"] == "expert_load"]
        self.assertEqual((load["step"], load["layer"], load["routed"], load["dropped"]), (1, 1, [3, 4, 5], [0, 1, 0]))
        (memory,) = [r for r in records if r["type"] == "memory_sample"]
        self.assertEqual((memory["step"], memory["category"], memory["current_bytes"], memory["peak_bytes"]),
                         (1, 0, 4096, 4096))
        (log,) = [r for r in records if r["type"] == "log"]
        self.assertEqual((log["level"], log["text"]), (2, "hello from rank 3"))
        if DECODE_CHECK:
            same_as_engine(self, self.collector.frames)

    def test_only_rank_0_reports_step_metrics_by_default(self):
        mb = self.connect(rank=1)
        mb.step(loss=1.0, tokens=10)
        mb.close()
        records = records_in_order(self, self.collector.receive_until_final(), 1)
        self.assertEqual([r for r in records if r["type"] == "step_metrics"], [])
        self.assertEqual([r["type"] for r in records], ["heartbeat", "span", "heartbeat"])

    def test_node_samples_open_the_stream_of_a_node_sampling_rank(self):
        mb = self.connect(sample_node=True)
        mb.close()
        records = records_in_order(self, self.collector.receive_until_final(), 3)
        self.assertEqual(records[0]["type"], "node_sample")
        self.assertEqual(records[0]["device"], -1)
        self.assertGreater(records[0]["host_memory_total"], 0)
        self.assertEqual(records[1]["type"], "heartbeat")

    def test_a_failure_in_the_with_block_says_failed(self):
        with self.assertRaises(ZeroDivisionError):
            with self.connect():
                1 / 0
        records = records_in_order(self, self.collector.receive_until_final(), 3)
        self.assertEqual(records[-1]["state"], 3)  # failed
        self.assertIn("ZeroDivisionError", [r for r in records if r["type"] == "log"][0]["text"])

    def test_the_clock_offset_opens_the_stream(self):
        context = zmq.Context.instance()
        router = context.socket(zmq.ROUTER)
        port = router.bind_to_random_port("tcp://127.0.0.1")
        behind = 5_000_000  # the engine's clock is 5 ms behind this rank's
        stop = threading.Event()

        def serve():
            while not stop.is_set():
                if not router.poll(50):
                    continue
                identity, request = router.recv_multipart()
                magic, rank, t1 = struct.unpack("<IIq", request)
                self.assertEqual((magic, rank), (0x5143424D, 3))
                now = time.monotonic_ns() + meshbench.clock.wall_offset_ns() - behind
                router.send_multipart([identity, struct.pack("<IIqqq", 0x5243424D, rank, t1, now, now)])

        server = threading.Thread(target=serve)
        server.start()
        try:
            mb = self.connect(clock=f"tcp://127.0.0.1:{port}")
            mb.close()
            records = records_in_order(self, self.collector.receive_until_final(), 3)
        finally:
            stop.set()
            server.join()
            router.close(0)
        offset = records[0]
        self.assertEqual(offset["type"], "clock_offset")
        self.assertGreaterEqual(offset["round_trip_ns"], 0)
        self.assertLess(abs(offset["offset_ns"] - behind), offset["round_trip_ns"] // 2 + 1_000_000)
        self.assertEqual(records[1]["type"], "heartbeat")

    def test_an_unanswered_clock_is_said_in_a_log(self):
        mb = self.connect(clock="tcp://127.0.0.1:1")  # nothing listens there
        mb.close()
        records = records_in_order(self, self.collector.receive_until_final(), 3)
        self.assertEqual(records[0]["type"], "log")
        self.assertIn("did not answer", records[0]["text"])

    def test_profiler_traces_are_handed_to_the_engine(self):
        class Profile:
            def export_chrome_trace(self, path):
                with open(path, "w") as f:
                    f.write('{"traceEvents": []}')

        with tempfile.TemporaryDirectory() as folder:
            mb = self.connect()
            handler = meshbench.profiler_handler(mb, directory=folder)
            path = handler(Profile())
            mb.close()
            self.assertTrue(os.path.isabs(path) and os.path.isfile(path))
            self.assertIn("rank3", os.path.basename(path))
            records = records_in_order(self, self.collector.receive_until_final(), 3)
            (log,) = [r for r in records if r["type"] == "log"]
            self.assertEqual(log["text"], "meshbench-import: " + path)
            self.assertEqual(log["level"], 1)

    def test_pipeline_stages_are_recorded(self):
        class Stage:
            def __init__(self, index):
                self.stage_index, self.group_rank, self.calls = index, 1, []

            def forward_one_chunk(self, fwd_chunk_id, args, kwargs=None):
                self.calls.append(("F", fwd_chunk_id))
                return "out"

            def backward_one_chunk(self, bwd_chunk_id, loss=None, full_backward=True, last_backward=False):
                self.calls.append(("B", bwd_chunk_id))

            def backward_weight_one_chunk(self, bwd_chunk_id, last_backward=False):
                self.calls.append(("W", bwd_chunk_id))

        class Schedule:  # an interleaved schedule's rank 1 of 2: stages 1 and 3
            def __init__(self):
                self._stages = [Stage(3), Stage(1)]

        schedule = Schedule()
        mb = self.connect()
        self.assertIs(pipelining.wrap_stages(mb, schedule), schedule)
        pipelining.wrap_stages(mb, schedule)  # twice wraps once
        late, early = schedule._stages
        self.assertEqual(early.forward_one_chunk(0, ()), "out")
        late.forward_one_chunk(fwd_chunk_id=0, args=())
        late.backward_one_chunk(0, full_backward=False)
        late.backward_weight_one_chunk(0)
        early.backward_one_chunk(0)
        mb.step()
        mb.close()
        self.assertEqual(late.calls, [("F", 0), ("B", 0), ("W", 0)])
        records = records_in_order(self, self.collector.receive_until_final(), 3)
        spans = [(_ENUM_NAMES["kind"][r["kind"]], r["stage"], r["chunk"], r["microbatch"])
                 for r in records if r["type"] == "span"]
        self.assertEqual(spans, [("F", 1, 0, 0), ("F", 1, 1, 0), ("B", 1, 1, 0), ("W", 1, 1, 0), ("B", 1, 0, 0),
                                 ("optimizer", 1, 0, -1)])

    def test_record_schedule_says_when_torch_lacks_pipelining(self):
        try:
            import importlib.util

            has = importlib.util.find_spec("torch.distributed.pipelining") is not None
        except (ImportError, ValueError):
            has = False
        if has:
            self.skipTest("this torch has torch.distributed.pipelining")
        if importlib.util.find_spec("torch") is None:
            self.skipTest("torch is not installed")
        with self.assertRaisesRegex(pipelining.PipeliningUnavailable, "torch.distributed.pipelining"):
            pipelining.record_schedule(None, object())


class FakeCuda:
    """torch as the client sees it on a GPU: events stamped with a device clock the test moves, done
    only when the test says the device got there; synchronising is a failure."""

    def __init__(self):
        fake = self
        self.device_ms = 0.0
        self.done = False
        self.synchronized = False

        class Event:
            def __init__(self, enable_timing=False):
                self.at_ms = None

            def record(self, stream=None):
                self.at_ms = 0.0 if stream is not None else fake.device_ms  # our idle stream: at once

            def query(self):
                return fake.done

            def elapsed_time(self, other):
                return other.at_ms - self.at_ms

        class Tensor:
            def __init__(self, value, is_cuda=True):
                self.value, self.is_cuda, self.shape, self.dtype = value, is_cuda, (), "float32"

            def detach(self):
                return self

            def reshape(self, *shape):
                return self

            def copy_(self, other, non_blocking=False):
                assert non_blocking, "a device-to-host copy that waits"
                self.value = other.value

            def tolist(self):
                assert fake.done, "read before the device wrote it"
                return self.value

        class Cuda:
            @staticmethod
            def Stream(device=None):
                return object()

            @staticmethod
            def device(index):
                import contextlib

                return contextlib.nullcontext()

            is_available = is_initialized = staticmethod(lambda: True)
            current_device = staticmethod(lambda: 0)
            device_count = staticmethod(lambda: 0)

            @staticmethod
            def synchronize(*args):
                fake.synchronized = True

        Cuda.Event = Event
        self.Tensor = Tensor
        self.cuda = Cuda
        self.__version__ = "fake"

    def empty(self, shape, dtype=None, pin_memory=False):
        assert pin_memory, "a non-blocking copy needs pinned memory"
        return self.Tensor(None, is_cuda=False)


@unittest.skipIf(zmq is None, "python3-zmq is not installed")
class GpuTiming(unittest.TestCase):
    def test_events_are_read_when_the_device_is_done_never_by_waiting(self):
        fake, saved = FakeCuda(), sys.modules.get("torch")
        sys.modules["torch"] = fake
        collector = Collector()
        try:
            mb = meshbench.connect(collector.endpoint, rank=0, keys=None, clock=None, handle_signals=False,
                                   sample_node=False, heartbeat_interval=100.0)
            fake.device_ms = 2.0
            with mb.op("F", microbatch=0):
                fake.device_ms = 5.5  # the device ran F from 2 ms to 5.5 ms after our anchor
            mb.step(loss=fake.Tensor(3.25))
            time.sleep(0.2)
            self.assertEqual(collector.socket.poll(0) and decode_frame(collector.socket.recv())["records"][0]["type"],
                             "heartbeat")  # the Starting heartbeat; the step waits for the device
            self.assertFalse(collector.socket.poll(100), "the step left before its device work was done")
            fake.done = True
            mb.close()
            records = collector.receive_until_final()
        finally:
            collector.close()
            if saved is None:
                del sys.modules["torch"]
            else:
                sys.modules["torch"] = saved
        records = [r for b in records for r in b["records"]]
        f = next(r for r in records if r["type"] == "span" and r["kind"] == 0)
        self.assertEqual(f["end_ns"] - f["begin_ns"], 3_500_000)
        (metrics,) = [r for r in records if r["type"] == "step_metrics"]
        self.assertEqual(metrics["loss"], 3.25)
        self.assertFalse(fake.synchronized)


@unittest.skipIf(zmq is None, "python3-zmq is not installed")
class Curve(unittest.TestCase):
    @unittest.skipUnless(zmq is not None and zmq.has("curve"), "libzmq without CURVE")
    def test_keys_as_the_engine_hands_them_out(self):
        server_public, server_secret = zmq.curve_keypair()
        agent_public, agent_secret = zmq.curve_keypair()
        collector = Collector(curve_secret=server_secret)
        try:
            text = " ".join(k.decode() for k in (server_public, agent_public, agent_secret))
            mb = meshbench.connect(collector.endpoint, rank=0, keys=text, clock=None, handle_signals=False,
                                   sample_node=False)
            mb.log("over CURVE")
            mb.close()
            records = records_in_order(self, collector.receive_until_final(), 0)
            self.assertIn("over CURVE", [r.get("text") for r in records])
        finally:
            collector.close()


@unittest.skipIf(zmq is None, "python3-zmq is not installed")
class BoundedQueue(unittest.TestCase):
    def test_what_does_not_fit_is_dropped_counted_and_reported(self):
        with tempfile.TemporaryDirectory() as folder:
            endpoint = f"ipc://{folder}/collector"
            # No collector yet: records wait in the client's queue of 10 (the Starting heartbeat is one).
            mb = meshbench.connect(endpoint, rank=0, keys=None, clock=None, queue_capacity=10,
                                   heartbeat_interval=100.0, handle_signals=False, sample_node=False)
            start = time.monotonic()
            for i in range(20):
                mb.log(f"line {i}")
            self.assertLess(time.monotonic() - start, 1.0, "posting must never wait for the network")
            self.assertEqual(mb.dropped, 11)
            collector = Collector(endpoint)
            try:
                mb.close()
                records = records_in_order(self, collector.receive_until_final(), 0)
            finally:
                collector.close()
        self.assertEqual([r["text"] for r in records if r["type"] == "log"], [f"line {i}" for i in range(9)])
        self.assertEqual(records[-1]["type"], "heartbeat")
        self.assertEqual(records[-1]["dropped_records"], 11)
        self.assertEqual(len(records), 1 + 9 + 1)


@unittest.skipIf(zmq is None, "python3-zmq is not installed")
class StopSignal(unittest.TestCase):
    def test_sigterm_ends_the_rank_after_a_terminated_heartbeat(self):
        collector = Collector()
        package = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "agent", "python")
        program = (f"import sys, time; sys.path.insert(0, {package!r}); import meshbench; "
                   "mb = meshbench.connect(rank=0, sample_node=False); print('ready', flush=True); time.sleep(30)")
        child = subprocess.Popen([sys.executable, "-c", program], stdout=subprocess.PIPE, text=True,
                                 env=dict(os.environ, MESHBENCH_COLLECTOR=collector.endpoint))
        try:
            self.assertEqual(child.stdout.readline().strip(), "ready")
            child.send_signal(signal.SIGTERM)
            records = records_in_order(self, collector.receive_until_final(), 0)
            self.assertEqual(child.wait(10), 128 + signal.SIGTERM)
        finally:
            child.kill()
            child.stdout.close()
            child.wait()
            collector.close()
        self.assertEqual((records[-1]["type"], records[-1]["state"], records[-1]["detail"]),
                         ("heartbeat", 4, int(signal.SIGTERM)))


@unittest.skipIf(zmq is None, "python3-zmq is not installed")
class FailedRank(unittest.TestCase):
    """An exception that leaves `with meshbench.connect() as mb:` ends the rank Failed: with the
    communication status (3, wire::kCommunicationFailedStatus) when torch.distributed raised it (a peer
    ended first), so that the engine names that peer; with 1 otherwise. torch is stood in for by a
    module whose code is compiled under torch/distributed's file name, as Debian's torch 1.13 raises a
    plain RuntimeError from there (gloo's "Connection closed by peer")."""

    FAKE_TORCH = (
        "import sys, types\n"
        "torch = types.ModuleType('torch'); distributed = types.ModuleType('torch.distributed')\n"
        "torch.distributed = distributed\n"
        "sys.modules['torch'] = torch; sys.modules['torch.distributed'] = distributed\n"
        "exec(compile('def recv():\\n    raise RuntimeError(\"Connection closed by peer\")\\n',\n"
        "             '/usr/lib/python3/dist-packages/torch/distributed/distributed_c10d.py', 'exec'),\n"
        "     distributed.__dict__)\n"
    )

    def last_words(self, body: str):
        collector = Collector()
        package = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "agent", "python")
        program = (f"import sys; sys.path.insert(0, {package!r}); import meshbench\n{self.FAKE_TORCH}"
                   f"with meshbench.connect(rank=0, sample_node=False) as mb:\n    {body}\n")
        child = subprocess.Popen([sys.executable, "-c", program], stderr=subprocess.DEVNULL,
                                 env=dict(os.environ, MESHBENCH_COLLECTOR=collector.endpoint))
        try:
            records = records_in_order(self, collector.receive_until_final(), 0)
            self.assertEqual(child.wait(10), 1)
        finally:
            child.kill()
            child.wait()
            collector.close()
        logs = [r["text"] for r in records if r["type"] == "log"]
        return (records[-1]["type"], records[-1]["state"], records[-1]["detail"]), logs

    def test_a_failed_send_or_recv_says_communication(self):
        last, logs = self.last_words("distributed.recv()")
        self.assertEqual(last, ("heartbeat", 3, 3))
        self.assertEqual(logs, ["communication: RuntimeError: Connection closed by peer"])

    def test_a_torch_distributed_error_says_communication(self):
        last, _ = self.last_words("distributed.DistError = type('DistError', (RuntimeError,), {}); "
                                  "raise distributed.DistError('NCCL communicator was aborted')")
        self.assertEqual(last, ("heartbeat", 3, 3))

    def test_the_programs_own_error_is_its_own(self):
        last, logs = self.last_words("raise RuntimeError('shapes do not match')")
        self.assertEqual(last, ("heartbeat", 3, 1))
        self.assertEqual(logs, ["RuntimeError: shapes do not match"])


@unittest.skipIf(zmq is None, "python3-zmq is not installed")
class Environment(unittest.TestCase):
    def setUp(self):
        self.saved = dict(os.environ)
        for name in list(os.environ):
            if name.startswith(("MESHBENCH_", "OMPI_", "PMIX_", "SLURM_")) or name in ("RANK", "WORLD_SIZE",
                                                                                       "LOCAL_RANK"):
                del os.environ[name]

    def tearDown(self):
        os.environ.clear()
        os.environ.update(self.saved)

    def test_outside_the_engine_connect_says_what_to_do(self):
        with self.assertRaises(meshbench.ConnectError) as caught:
            meshbench.connect()
        message = str(caught.exception)
        self.assertIn("MESHBENCH_COLLECTOR", message)
        self.assertIn("run this program under `meshbench-engine run` with a job spec whose launch.command names it",
                      message)

    def test_rank_and_endpoints_come_from_the_launcher_and_the_engine(self):
        os.environ.update({"MESHBENCH_COLLECTOR": "tcp://10.0.0.1:5555", "MESHBENCH_CLOCK": "tcp://10.0.0.1:5556",
                           "OMPI_COMM_WORLD_RANK": "5", "OMPI_COMM_WORLD_SIZE": "8",
                           "OMPI_COMM_WORLD_LOCAL_RANK": "1"})
        s = environment.settings()
        self.assertEqual((s.endpoint, s.clock_endpoint, s.rank, s.world_size, s.local_rank, s.keys),
                         ("tcp://10.0.0.1:5555", "tcp://10.0.0.1:5556", 5, 8, 1, None))
        del os.environ["OMPI_COMM_WORLD_RANK"]
        os.environ["SLURM_PROCID"] = "6"
        self.assertEqual(environment.settings().rank, 6)

    def test_bad_keys_are_named(self):
        os.environ.update({"MESHBENCH_COLLECTOR": "tcp://127.0.0.1:5555", "MESHBENCH_TELEMETRY_KEYS": "abc"})
        with self.assertRaisesRegex(meshbench.ConnectError, "MESHBENCH_TELEMETRY_KEYS holds 1 keys"):
            meshbench.connect()
        os.environ["MESHBENCH_TELEMETRY_KEYS"] = " ".join(["~" * 40] * 3)
        with self.assertRaisesRegex(meshbench.ConnectError, "not one of Z85's"):
            meshbench.connect()


if __name__ == "__main__":
    if zmq is None:
        print("SKIP: python3-zmq is not installed (apt install python3-zmq)")
        sys.exit(77)
    unittest.main()
