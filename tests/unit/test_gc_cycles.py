"""The consumer leaves no cyclic garbage per message (issue 43, goal 4).

An object freed by reference counting costs nothing later; one in a reference cycle
(an exception holding its traceback's frames, a task referencing itself, a closure on
``self``) stays alive until the cyclic collector runs, and that collector stops the
event loop while it scans. Per message, that would be a collection every few hundred
messages and its pause in the latency tail. Here N messages go through the consumer with
automatic collection off; what ``gc.collect()`` then frees must not grow with N (what it
finds is a few objects of the consumer's own timers, not one per message)."""

from __future__ import annotations

import gc
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import pytest

from aiorocket.consumer import ConsumerMessage

from .consumer_fakes import Collector, FakeBroker, FakeCluster, consumer_of, running

pytestmark = pytest.mark.anyio

#: messages a run: a cycle per message would leave at least this many objects
MESSAGES = 1500
#: what a run may leave, whatever its length (timers, a long poll that ended); a cycle
#: per pull (~50 pulls of 32) exceeds it too
BOUND = 30


@asynccontextmanager
async def collector_off() -> AsyncIterator[list[int]]:
    """Automatic collection off, the heap collected first; yields [objects freed by the
    collection at the end]."""
    found: list[int] = []
    gc.collect()
    was = gc.isenabled()
    gc.disable()
    try:
        yield found
        found.append(gc.collect())
    finally:
        if was:
            gc.enable()


def _fill(broker: FakeBroker, count: int, tag: str) -> None:
    for i in range(count):
        broker.add(i % 2, f"{tag}{i}".encode())


async def test_handled_messages_leave_no_cyclic_garbage() -> None:
    broker = FakeBroker("broker-a", 0)
    _fill(broker, 2, "warm")
    handler = Collector(2 + MESSAGES)
    warm = Collector(2)  # started: connections, pull tasks, workers

    async def handle(msg: ConsumerMessage) -> None:
        await warm(msg)
        await handler(msg)

    async with (
        running(FakeCluster({"broker-a": [broker]})) as cluster,
        consumer_of(cluster, handle),
    ):
        with anyio.fail_after(30):
            await warm.done.wait()
            async with collector_off() as found:
                _fill(broker, MESSAGES, "m")
                await handler.done.wait()
    assert len(handler.got) == 2 + MESSAGES
    assert found[0] < BOUND, f"{found[0]} objects in cycles after {MESSAGES} messages"


async def test_iterated_messages_leave_no_cyclic_garbage() -> None:
    broker = FakeBroker("broker-a", 0)
    _fill(broker, 2, "warm")
    got = 0
    async with (
        running(FakeCluster({"broker-a": [broker]})) as cluster,
        consumer_of(cluster) as consumer,
    ):
        with anyio.fail_after(30):
            async for msg in consumer:
                got += 1
                await msg.ack()
                if got == 2:
                    break
            async with collector_off() as found:
                _fill(broker, MESSAGES, "m")
                async for msg in consumer:
                    got += 1
                    await msg.ack()
                    if got == 2 + MESSAGES:
                        break
    assert found[0] < BOUND, f"{found[0]} objects in cycles after {MESSAGES} messages"
