"""benchmarks/_receive_split.py: a gRPC consumer's stored -> handler time split at the
receive, and the make-up of its p99 tail (compare.py's gRPC e2e note)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

import anyio
import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"bench{name}", BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


split_mod = _load("_receive_split")
report = _load("_report")


def test_each_message_is_split_at_its_receive_and_the_tail_shows_its_parts() -> None:
    split = split_mod.ReceiveSplit()
    # 99 messages stored while a receive was parked (left at 0 µs): the broker's answer
    # reached the client 2 ms after each was stored, the stream ended 1 ms later, the
    # handler ran 1 ms after that.
    for i in range(99):
        stored = 1_000 + i
        split._at[f"m{i}"] = (0, stored + 2_000, stored + 3_000)
        split.sample(f"m{i}", stored, stored + 4_000, steady=True)
    # One stored with no receive out: it waited 50 ms for the next one to leave.
    split._at["late"] = (60_000, 70_000, 71_000)
    split.sample("late", 10_000, 72_000, steady=True)
    # Not steady (warm-up): dropped, but its entry is gone all the same.
    split._at["warm"] = (0, 1, 2)
    split.sample("warm", 0, 3, steady=False)
    assert split._at == {}
    s = split.summary()
    assert s["samples"] == 100
    assert s["wait_p50_ms"] == 0 and s["wait_p99_ms"] == 0  # one in 100: above the p99
    assert s["server_p50_ms"] == 2.0 and s["stream_p50_ms"] == 1.0
    assert s["dispatch_p50_ms"] == 1.0
    # The slowest 1% (stored -> handler) is the late message: 62 ms, of
    # which 50 waiting for a receive and 10 on the server side.
    assert s["tail_stored_to_user_ms"] == pytest.approx(62.0)
    assert s["tail_wait_ms"] == pytest.approx(50.0)
    assert s["tail_server_ms"] == pytest.approx(10.0)
    note = report._split_note(s)
    assert "wait 0.0/0.0" in note and "server 10.0" in note and "62.0 ms" in note


def test_no_split_no_note() -> None:
    assert split_mod.ReceiveSplit().summary() == {}
    assert report._split_note(None) == "" and report._split_note({}) == ""


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the split keys a queue by its asyncio task


@pytest.mark.anyio
async def test_the_pull_split_times_each_pull_and_the_queues_turnaround(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """benchmarks/_pull_split.py: a remoting message is split at the pull that brought
    it (keyed by the object) and at the read of its answer (``stream``: the read -> the
    pull task decoded it), and a queue's next pull counts its turnaround (``gap``)."""
    import time
    from types import SimpleNamespace

    from aiorocket.client import broker
    from aiorocket.remoting.wire import ProtocolWire

    monkeypatch.syspath_prepend(str(BENCH))
    pull_split = _load("_pull_split")
    msgs = [object(), object()]
    reads: list[bytes] = []

    def data_received(wire: object, data: bytes) -> None:
        reads.append(data)

    async def pull(client: object, *args: object, **kw: object) -> object:
        await anyio.sleep(0.002)  # the broker and the network
        ProtocolWire.data_received(object.__new__(ProtocolWire), b"answer")
        await anyio.sleep(0.003)  # the loop's other callbacks, the decode
        return SimpleNamespace(messages=msgs)

    monkeypatch.setattr(broker.BrokerClient, "pull", pull)
    monkeypatch.setattr(ProtocolWire, "data_received", data_received)
    split = pull_split.PullSplit()
    split.install()
    cls: Any = broker.BrokerClient
    client = object.__new__(cls)
    await cls.pull(client)
    await cls.pull(client)  # the same queue (task): its turnaround
    assert reads == [b"answer", b"answer"]  # the read still goes to the wire
    now = time.time_ns() // 1000
    for m in msgs:
        split.sample(id(m), now - 20_000, now + 1_000, steady=True)
    s = split.summary()
    assert s["samples"] == 2 and s["receives"] == 2 and s["mean_batch"] == 2
    assert 0 <= s["gap_p50_ms"] < 1_000
    assert s["server_p50_ms"] >= 2.0 and s["stream_p50_ms"] >= 3.0  # at the read
    assert s["wait_p50_ms"] >= 10.0  # stored 20 ms before now: before the pull left
    assert split._at == {} and split._cpu_at == {}
    # The consumer's own CPU from the read to the handler: the fake's sleeps are not
    # CPU, so far below the wall time of stream + dispatch; the second message's
    # handler call came after the first's (one call ahead of it).
    assert 0 <= s["own_cpu_p99_ms"] < s["stream_p50_ms"]
    # The consumer's share of a message, stream + dispatch (goal 4's figure): the same
    # message's two parts, both at least the fake's 3 ms between the read and the decode
    assert s["share_p50_ms"] >= 3.0 and s["share_p99_ms"] >= s["stream_p50_ms"]
    # Both were stored before the first pull; the second pull brought them, so of their
    # wait the part after the first answer's read is the client's (its 3 ms, the gap)
    assert 3.0 <= s["wait_client_p50_ms"] <= s["wait_p50_ms"] - 2.0
    assert s["ahead_p50"] == 1 and s["ahead_p99"] == 1 and s["tail_ahead"] in (0, 1)
    note = report._split_note(s)
    assert "the consumer's CPU in stream + dispatch" in note and "ahead p50/p99 1/1" in note
    assert "the consumer's share (stream + dispatch of a message) p50/p99" in note
    assert "wait after its queue's previous answer was read" in note


def test_the_receives_out_at_each_store_time_are_counted() -> None:
    """``out_p50`` / ``out_zero_pct``: the receives out (left, first message not yet
    back) when each message was stored."""
    assert split_mod._receives_out([(0, 10), (5, 20)], [25, 1, 6, 15]) == [0, 1, 1, 2]
    split = split_mod.ReceiveSplit()
    split._spans = [(0, 10), (5, 20)]
    for i, stored in enumerate([1, 6, 15, 25]):
        split._at[i] = (0, 10, 11)
        split.sample(i, stored, 30, steady=True)
    s = split.summary()
    assert s["out_p50"] == 1 and s["out_zero_pct"] == 25
    assert s["early_pct"] == 0  # no stream flag: not counted as handed on early


def test_dispatch_is_split_into_the_loops_cpu_the_gc_and_its_callbacks() -> None:
    """Issue 43, goal 5b: ``dispatch`` (read -> handler) is split by the clocks read at
    the message's read and at its handler: the loop thread's CPU, the GC's pauses and
    the loop callbacks run in between; the tail's make-up is over the slowest 1% by
    dispatch."""
    split = split_mod.ReceiveSplit()
    clocks = iter([(10, 0, 5), (10 + 500, 0, 5 + 3)] * 99 + [(0, 0, 0), (20_000, 4_000, 40)])
    split._clocks.read = lambda: next(clocks)  # type: ignore[method-assign]
    for i in range(99):
        split._at[f"m{i}"] = (0, 1_000, 2_000)
        split._at_clocks[f"m{i}"] = split._clocks.read()
        split.sample(f"m{i}", 500, 3_000, steady=True)  # dispatch 1 ms
    split._at["slow"] = (0, 1_000, 2_000)
    split._at_clocks["slow"] = split._clocks.read()
    split.sample("slow", 500, 52_000, steady=True)  # dispatch 50 ms: 20 on a core, 4 GC
    s = split.summary()
    assert s["dispatch_cpu_p50_ms"] == 0.5 and s["dispatch_steps_p50"] == 3
    assert s["tail_dispatch_ms"] == pytest.approx(50.0)
    assert s["tail_dispatch_cpu_ms"] == pytest.approx(20.0)
    assert s["tail_dispatch_gc_ms"] == pytest.approx(4.0)
    assert s["tail_dispatch_steps"] == 40
    assert split._at_clocks == {}
    note = report._split_note(s)
    assert "dispatch's slowest 1% (50.0 ms): the loop's CPU 20.0, GC 4.0, off a core 26.0" in note


@pytest.mark.anyio
async def test_the_timed_read_passes_the_consumers_own_arguments_through(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The split wraps ``SimpleConsumer._read``: it must take and pass on whatever the
    real one takes (a parameter added there, 2026-11-29, failed every gRPC e2e run of
    compare.py with an AttributeError in the wrapper)."""
    import gc
    import inspect

    from aiorocket.grpc import _simple

    cls: Any = _simple.SimpleConsumer
    params = list(inspect.signature(cls._read).parameters)[1:]  # after self
    seen: list[tuple[Any, ...]] = []

    async def recording_read(consumer: Any, *args: Any) -> None:
        seen.append((consumer, *args))

    monkeypatch.setattr(cls, "_read", recording_read)
    monkeypatch.setattr(cls, "receive", cls.receive)
    callbacks = list(gc.callbacks)
    try:
        split_mod.ReceiveSplit().install()
        args: list[Any] = [object() for _ in params]
        out_at = params.index("out")
        args[out_at] = out = []
        await cls._read("consumer", *args)
    finally:
        gc.callbacks[:] = callbacks
    assert len(seen) == 1 and seen[0][0] == "consumer"
    passed = list(seen[0][1:])
    assert len(passed) == len(params)
    for i, (sent, got) in enumerate(zip(args, passed, strict=True)):
        if i != out_at:
            assert got is sent, params[i]
    assert out == []  # nothing arrived: the wrapper's list was empty and went into `out`
