"""How a sink task's rows move through the process's loop (aiorocket.spark._flow): the
next Arrow batch is read while the rows before it are sent, half messages go out from a
fixed set of workers (no task per row), and a failure on either side ends both."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pyarrow as pa
import pytest
from pyspark.sql.types import BinaryType, StructField, StructType

from aiorocket._message_id import offset_message_id
from aiorocket._send_result import SendResult, SendStatus
from aiorocket.errors import ConfigError, RequestTimeoutError
from aiorocket.message import Message, MessageQueue
from aiorocket.spark import _flow, _txn, sink
from aiorocket.spark._options import parse_write
from aiorocket.spark._runtime import runtime
from aiorocket.spark._txn import TXN_PROPERTY

SCHEMA = StructType([StructField("body", BinaryType())])


def arrow(first: int, n: int) -> pa.RecordBatch:
    return pa.record_batch([pa.array([b"row-%d" % i for i in range(first, first + n)])],
                           names=["body"])  # fmt: skip


class Batches:
    """Spark's iterator of Arrow batches; tells the loop when the second is read."""

    def __init__(self, sizes: list[int]) -> None:
        rt = runtime()

        async def make() -> asyncio.Event:
            return asyncio.Event()

        self.second_read = rt.run(make())
        self.sizes = sizes

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        first = 0
        for k, n in enumerate(self.sizes):
            if k == 1:
                runtime().loop.call_soon_threadsafe(self.second_read.set)
            yield arrow(first, n)
            first += n


class HeldProducer:
    """Answers no send of the first batch before Spark's thread has read the second."""

    def __init__(self, batches: Batches, max_in_flight: int = 4) -> None:
        self.batches = batches
        self.sent: list[Message] = []
        self.tasks: set[object] = set()  # the tasks themselves: no id reused
        self.running = self.peak = 0
        self.config = type("Config", (), {"max_in_flight": max_in_flight})()

    async def _held(self) -> None:
        with anyio.fail_after(5):  # the old sink never read on: it waited for these
            await self.batches.second_read.wait()

    async def start_send(self, tg: anyio.abc.TaskGroup, msg: Message) -> None:
        self.sent.append(msg)
        tg.start_soon(self._held)

    async def send_prepared(self, msg: Message, **kw: Any) -> SendResult:
        self.tasks.add(asyncio.current_task())
        self.sent.append(msg)
        n = len(self.sent)
        self.running += 1
        self.peak = max(self.peak, self.running)
        await self._held()
        self.running -= 1
        queue = MessageQueue(msg.topic, "broker-a", 0)
        offset_id = offset_message_id("127.0.0.1:10911", n)
        return SendResult(SendStatus.SEND_OK, f"ID-{n}", queue, 0, offset_id)


def test_a_task_reads_its_next_batch_while_the_rows_before_it_are_sent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """At-least-once: the sink sent a batch and waited for its last answer before it
    read the next one (the JVM stood still meanwhile); now the rows of every batch go
    into one stream of sends. Before: TimeoutError (the first batch's answers waited
    for a read that never came)."""
    batches = Batches([3, 2, 4])
    producer = HeldProducer(batches)
    monkeypatch.setattr(sink, "_check_topic", lambda o: None)
    monkeypatch.setattr(runtime(), "producer", lambda o: producer)
    writer = sink.RocketMQWriter(parse_write({"nameServer": "127.0.0.1:1", "topic": "out"}),
                                 SCHEMA)  # fmt: skip
    commit = writer.write(iter(batches))
    assert commit.count == 9
    assert [m.body for m in producer.sent] == [b"row-%d" % i for i in range(9)]
    keys = [m.properties["sparkDedupKey"].rsplit("-", 1)[1] for m in producer.sent]
    assert keys == [str(i) for i in range(9)]


def test_half_messages_go_out_from_a_fixed_set_of_workers_and_in_the_rows_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Exactly-once: a task per row before (and the next batch unread until the last
    half message of the one before was stored); now at most ``max_in_flight`` workers
    for the whole task, the handles in the rows' order."""
    batches = Batches([30, 20, 40])
    producer = HeldProducer(batches)
    monkeypatch.setattr(sink, "_check_topic", lambda o: None)
    monkeypatch.setattr(runtime(), "sender", lambda o: producer)
    opts = parse_write({"nameServer": "127.0.0.1:1", "topic": "out",
                        "deliveryGuarantee": "exactly-once",
                        "checkpointLocation": str(tmp_path)})  # fmt: skip
    writer = sink.RocketMQStreamWriter(opts, SCHEMA)
    commit = writer.write(iter(batches))
    assert commit.count == 90 and len(commit.halves) == 90
    # Workers leave when the rows run dry and come back with the next list: a few per
    # list, never more than 4 at once (before: 90 tasks, one per row).
    assert producer.peak <= 4 and len(producer.tasks) <= 3 * 4
    assert all(TXN_PROPERTY in m.properties for m in producer.sent)
    by_id = {f"ID-{i + 1}": m for i, m in enumerate(producer.sent)}
    keys = [by_id[h.msg_id].properties["sparkDedupKey"].rsplit("-", 1)[1] for h in commit.halves]
    assert keys == [str(i) for i in range(90)]


def test_half_messages_in_flight_are_bounded_below_the_producers_slots(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Exactly-once over remoting: a task kept the producer's 1,024 half messages in
    flight, which only queued at the brokers (answers past the 550 ms after which the
    producer avoids a broker); now at most ``_txn.HALVES_IN_FLIGHT``. Before: peak 30."""
    batches = Batches([30, 20, 40])
    producer = HeldProducer(batches, max_in_flight=1024)
    monkeypatch.setattr(_txn, "HALVES_IN_FLIGHT", 3)
    monkeypatch.setattr(sink, "_check_topic", lambda o: None)
    monkeypatch.setattr(runtime(), "sender", lambda o: producer)
    opts = parse_write({"nameServer": "127.0.0.1:1", "topic": "out",
                        "deliveryGuarantee": "exactly-once",
                        "checkpointLocation": str(tmp_path)})  # fmt: skip
    commit = sink.RocketMQStreamWriter(opts, SCHEMA).write(iter(batches))
    assert len(commit.halves) == 90 and producer.peak == 3


def test_each_of_keeps_at_most_parallel_in_flight_and_takes_lists_as_they_come() -> None:
    seen: list[int] = []
    running = peak = 0

    async def run() -> None:
        first_done = anyio.Event()

        async def one(i: int) -> None:
            nonlocal running, peak
            running += 1
            peak = max(peak, running)
            await anyio.lowlevel.checkpoint()
            seen.append(i)
            running -= 1
            if len(seen) == 2:
                first_done.set()

        async def lists() -> Any:
            yield [0, 1]
            await first_done.wait()  # the workers ran dry and left: new ones take these
            yield list(range(2, 20))
            yield []

        await _flow.each_of(lists(), 3, one)

    anyio.run(run)
    assert sorted(seen) == list(range(20)) and peak == 3


def test_a_failed_send_stops_the_reading_and_raises_typed() -> None:
    read: list[int] = []

    def lists() -> Iterator[list[int]]:
        for k in range(100):
            read.append(k)
            yield [k]

    async def consume(stream: Any) -> None:
        async for items in stream:
            if items == [2]:
                raise RequestTimeoutError("no answer")

    with pytest.raises(RequestTimeoutError):
        _flow.hand_over(runtime(), lists(), consume)
    assert len(read) < 10  # at most a list or two read past the failure


def test_a_failed_read_waits_for_the_sends_under_way_then_raises() -> None:
    finished: list[list[int]] = []

    def lists() -> Iterator[list[int]]:
        yield [1]
        raise ConfigError("row 1 has a null body")

    async def consume(stream: Any) -> None:
        async for items in stream:
            await anyio.sleep(0.05)
            finished.append(items)

    with pytest.raises(ConfigError, match="null body"):
        _flow.hand_over(runtime(), lists(), consume)
    assert finished == [[1]]  # nothing of the task ran on after it failed
