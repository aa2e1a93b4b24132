"""PullConsumer with ``auto_commit=False``: only ``commit()`` stores an offset."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import anyio
import pytest

from aiorocket.client.instance import ClientInstance
from aiorocket.consumer import ConsumeFromWhere, PullConsumer
from aiorocket.errors import CommitFailedError
from aiorocket.message import Message, MessageQueue
from aiorocket.testing.broker import LocalRocketMQ

from ..unit.consumer_fakes import queues_of
from .helpers import eventually, send_many, wait_dispatched

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

FAST = {"persist_offset_interval": 0.2, "long_poll_timeout": 2.0, "pull_request_timeout": 12.0}


async def produce(namesrv: str, topic: str, n: int) -> list[MessageQueue]:
    async with ClientInstance(namesrv) as client:
        results = await send_many(client, topic, [Message(topic, b"m%d" % i) for i in range(n)])
        await wait_dispatched(client, topic, results)
        return (await client.namesrv.query_route(topic)).read_queues()


async def stored_offsets(namesrv: str, group: str, mqs: list[MessageQueue]) -> list[int | None]:
    async with ClientInstance(namesrv) as client:
        route = await client.namesrv.query_route(mqs[0].topic)
        out = []
        for mq in mqs:
            addr = route.master_addr(mq.broker_name)
            assert addr is not None
            out.append(await client.broker.query_consumer_offset(addr, group, mq))
        return out


def manual(namesrv: str, group: str) -> PullConsumer:
    return PullConsumer(group, namesrv, auto_commit=False,
                        consume_from_where=ConsumeFromWhere.FIRST_OFFSET, **FAST)  # fmt: skip


async def take(consumer: PullConsumer, n: int) -> None:
    got = 0
    with anyio.fail_after(30):
        while got < n:
            got += sum(len(m) for m in (await consumer.getmany(timeout=10)).values())


async def test_without_auto_commit_leaving_async_with_stores_only_what_commit_stored(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    """getmany() returned everything, the body raised before commit(): the broker keeps
    the one offset the application committed, and nothing for the other queue (not even
    the start offset computed at assignment)."""
    topic, group = unique_name("manual"), unique_name("g")
    await rocketmq.create_topic(topic, queues=1)  # one queue on each broker
    await rocketmq.create_group(group)
    q1, q2 = await produce(rocketmq.namesrv_addr, topic, 20)
    consumer = manual(rocketmq.namesrv_addr, group)
    consumer.assign([q1, q2])
    with pytest.raises(RuntimeError, match="before commit"):
        async with consumer:
            await take(consumer, 20)
            await consumer.commit({q1: 3})
            raise RuntimeError("processing failed before commit()")
    assert await stored_offsets(rocketmq.namesrv_addr, group, [q1, q2]) == [3, None]


@asynccontextmanager
async def half_taken_over(
    rocketmq: LocalRocketMQ, topic: str, group: str
) -> AsyncIterator[tuple[PullConsumer, list[MessageQueue], dict[MessageQueue, int]]]:
    """A member that was returned the 16 messages of the topic's 4 queues (nothing
    committed), after a second member joined and took 2 of them: the first member, the
    queues, and its positions before the second one joined."""
    await rocketmq.create_topic(topic, queues=2)
    await rocketmq.create_group(group)
    queues = await produce(rocketmq.namesrv_addr, topic, 16)
    one = manual(rocketmq.namesrv_addr, group)
    one.subscribe(topic)
    async with one:
        assert one.assignment() == set(queues)
        await take(one, 16)  # returned, never committed
        positions = {mq: one.position(mq) for mq in queues}
        two = manual(rocketmq.namesrv_addr, group)
        two.subscribe(topic)
        async with two:
            await eventually(lambda: len(queues_of(one)) == 2)  # revoked, forgotten
            yield one, queues, positions


async def test_without_auto_commit_a_revoked_queue_keeps_its_committed_offset(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    group = unique_name("g")
    async with half_taken_over(rocketmq, unique_name("manualrev"), group) as (one, queues, _):
        revoked = sorted(set(queues) - one.assignment())
        assert len(revoked) == 2
        assert await stored_offsets(rocketmq.namesrv_addr, group, revoked) == [None, None]


async def test_a_commit_naming_a_queue_revoked_by_a_rebalance_is_refused_and_stores_nothing(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    """As Kafka's commit after a rebalance (issue 30, item 3): the application processed
    messages of every queue; meanwhile a second member joined and took half of them. The
    commit of those positions raises CommitFailedError and stores nothing, not even for
    the queues still owned; commit() of the current positions stores the owned ones."""
    group = unique_name("g")
    async with half_taken_over(rocketmq, unique_name("manualgone"), group) as (
        one, queues, processed,
    ):  # fmt: skip
        assert sum(processed.values()) == 16
        kept = sorted(one.assignment())
        revoked = sorted(set(queues) - set(kept))
        with pytest.raises(CommitFailedError, match="not assigned"):
            await one.commit(processed)
        assert await stored_offsets(rocketmq.namesrv_addr, group, queues) == [None] * 4
        await one.commit()
        stored = await stored_offsets(rocketmq.namesrv_addr, group, [*kept, *revoked])
        assert stored == [processed[kept[0]], processed[kept[1]], None, None]
