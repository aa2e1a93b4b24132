"""Orderly queues change hands only once their running handler has finished (real broker).

The Java client holds a queue's consume lock while its listener runs and does not
unlock a revoked queue before that; these tests hold a handler on a queue's first
message while the queue is revoked, and check that nobody else consumes the queue (not
another consumer, not a second loop of the same one) until the handler returns.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import anyio
import pytest

from aiorocket.client.instance import ClientInstance
from aiorocket.consumer import ConsumeFromWhere, Consumer, ConsumerMessage
from aiorocket.message import Message, MessageQueue
from aiorocket.testing.broker import LocalRocketMQ

from ..unit.consumer_fakes import engine_of, reallocate, rebalance_memory, take_all, take_none
from .helpers import eventually, one_queue_topic, send_raw, wait_dispatched

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

FAST = {"persist_offset_interval": 0.5, "long_poll_timeout": 2.0, "pull_request_timeout": 12.0,
        "rebalance_interval": 60.0, "shutdown_timeout": 0.2}  # fmt: skip


class Recorder:
    """Records (consumer, offset); the first delivery of offset 0 waits for ``release``."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []
        self.running = 0
        self.max_running = 0
        self.entered = anyio.Event()
        self.release = anyio.Event()

    def handler(self, name: str) -> Callable[[ConsumerMessage], object]:
        async def handle(msg: ConsumerMessage) -> None:
            self.calls.append((name, msg.queue_offset))
            self.running += 1
            self.max_running = max(self.max_running, self.running)
            try:
                if msg.queue_offset == 0 and not self.entered.is_set():
                    self.entered.set()
                    await self.release.wait()
            finally:
                self.running -= 1

        return handle


async def one_queue_with(rocketmq: LocalRocketMQ, topic: str, group: str, n: int) -> MessageQueue:
    await one_queue_topic(rocketmq, topic, group, orderly=True)
    async with ClientInstance(rocketmq.namesrv_addr) as client:
        (mq,) = (await client.namesrv.query_route(topic)).write_queues()
        results = [await send_raw(client, mq, Message(topic, f"m{i}".encode())) for i in range(n)]
        await wait_dispatched(client, topic, results)
    return mq


def orderly_consumer(
    rocketmq: LocalRocketMQ, group: str, topic: str, handle: Callable[[ConsumerMessage], object]
) -> Consumer:
    c = Consumer(group, rocketmq.namesrv_addr, handler=handle, orderly=True,  # type: ignore[arg-type]
                 allocate=take_all, consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
                 **FAST)  # fmt: skip
    c.subscribe(topic)
    return c


def owned(consumer: Consumer, mq: MessageQueue) -> bool:
    return mq in consumer.assignment()


async def passes_after(consumer: Consumer, n: int, unless: Callable[[], bool]) -> None:
    """Wait until ``consumer`` has run ``n`` more rebalance passes, or ``unless()``."""
    start = rebalance_memory(consumer).passes
    await eventually(lambda: rebalance_memory(consumer).passes >= start + n or unless())


@asynccontextmanager
async def handling_first_message(
    rocketmq: LocalRocketMQ, topic: str, group: str, rec: Recorder
) -> AsyncIterator[tuple[Consumer, MessageQueue]]:
    """Consumer "a" of a one-queue topic of 3 messages, in its handler of offset 0."""
    mq = await one_queue_with(rocketmq, topic, group, 3)
    async with orderly_consumer(rocketmq, group, topic, rec.handler("a")) as a:
        with anyio.fail_after(30):
            await rec.entered.wait()
        yield a, mq


async def test_orderly_revoked_queue_stays_locked_until_its_handler_returns(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    topic, group = unique_name("handover"), unique_name("g")
    rec = Recorder()
    # b wants the queue too, but a holds its lock: b asks again every second.
    async with (
        handling_first_message(rocketmq, topic, group, rec) as (a, mq),
        orderly_consumer(rocketmq, group, topic, rec.handler("b")) as b,
    ):
        assert not owned(b, mq)
        reallocate(a, take_none)  # a gives the queue up while offset 0 is handled
        await eventually(lambda: not owned(a, mq) and mq in engine_of(a).state.releasing)
        # b asks for the lock again, three times (or consumes: the defect)
        await passes_after(b, 3, unless=lambda: len(rec.calls) > 1)
        assert rec.calls == [("a", 0)], "b consumed the queue while a's handler ran"
        assert not owned(b, mq)
        rec.release.set()
        await eventually(lambda: ("b", 2) in rec.calls)
        assert mq not in engine_of(a).state.releasing
    # a committed its message before unlocking: b starts after it, nothing twice.
    assert rec.calls == [("a", 0), ("b", 1), ("b", 2)]
    assert rec.max_running == 1


async def test_orderly_queue_assigned_again_waits_for_its_running_handler(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    topic, group = unique_name("reassign"), unique_name("g")
    rec = Recorder()
    async with handling_first_message(rocketmq, topic, group, rec) as (a, mq):
        reallocate(a, take_none)
        await eventually(lambda: not owned(a, mq) and mq in engine_of(a).state.releasing)
        reallocate(a, take_all)  # and back, while the old loop's handler still runs
        await passes_after(a, 1, unless=lambda: len(rec.calls) > 1)
        assert not owned(a, mq), "a second loop started beside the running one"
        assert rec.calls == [("a", 0)]
        rec.release.set()
        await eventually(lambda: ("a", 2) in rec.calls)
        assert owned(a, mq)
    assert rec.calls == [("a", 0), ("a", 1), ("a", 2)]
    assert rec.max_running == 1
