"""``pull_threshold_for_all``: every way a cached message leaves the cache frees room for
pulls waiting on the global limit (taken by getmany, a seek, a revoked queue)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import anyio
import pytest

from aiorocket.client.instance import ClientInstance
from aiorocket.consumer import ConsumeFromWhere, PullConsumer
from aiorocket.message import Message, MessageQueue
from aiorocket.testing.broker import LocalRocketMQ

from ..unit.consumer_fakes import queues_of
from .helpers import eventually, send_many, send_raw, wait_dispatched

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

FAST = {"persist_offset_interval": 0.5, "long_poll_timeout": 1.0, "pull_request_timeout": 8.0}


def capped(namesrv: str, group: str, limit: int, batch: int = 32) -> PullConsumer:
    return PullConsumer(group, namesrv, pull_threshold_for_all=limit, pull_batch_size=batch,
                        consume_from_where=ConsumeFromWhere.FIRST_OFFSET, **FAST)  # fmt: skip


async def send_to(namesrv: str, mq: MessageQueue, n: int) -> None:
    async with ClientInstance(namesrv) as client:
        results = [await send_raw(client, mq, Message(mq.topic, b"x")) for _ in range(n)]
        await wait_dispatched(client, mq.topic, results)


@asynccontextmanager
async def cache_filled_by_one_queue(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> AsyncIterator[tuple[PullConsumer, MessageQueue, MessageQueue]]:
    """A consumer of two queues whose cache limit (4) the first one filled; the second
    queue's pull task found nothing and now waits for room."""
    topic, group = unique_name("cap"), unique_name("g")
    await rocketmq.create_topic(topic, queues=1)  # one queue on each broker
    await rocketmq.create_group(group)
    async with ClientInstance(rocketmq.namesrv_addr) as client:
        q1, q2 = (await client.namesrv.query_route(topic)).read_queues()
    await send_to(rocketmq.namesrv_addr, q1, 10)
    consumer = capped(rocketmq.namesrv_addr, group, 4, batch=4)
    consumer.assign([q1, q2])
    async with consumer:
        pq1, pq2 = (queues_of(consumer)[q] for q in (q1, q2))
        await eventually(
            lambda: pq1.cached_count == 4 and not (pq1.request_scope or pq2.request_scope)
        )
        yield consumer, q1, q2


async def test_pull_consumer_under_a_global_cache_limit_receives_every_message(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    topic, group = unique_name("cap"), unique_name("g")
    await rocketmq.create_topic(topic, queues=4)
    await rocketmq.create_group(group)
    async with ClientInstance(rocketmq.namesrv_addr) as client:
        msgs = [Message(topic, b"%d" % i) for i in range(400)]
        await wait_dispatched(client, topic, await send_many(client, topic, msgs))
    consumer = capped(rocketmq.namesrv_addr, group, 40)
    consumer.subscribe(topic)
    seen: set[bytes] = set()
    async with consumer:
        with anyio.fail_after(60):
            while len(seen) < 400:
                for batch in (await consumer.getmany(timeout=5)).values():
                    seen.update(m.body for m in batch)
    assert seen == {b"%d" % i for i in range(400)}


async def test_a_seek_frees_the_global_cache_for_waiting_pulls(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    async with cache_filled_by_one_queue(rocketmq, unique_name) as (consumer, q1, _):
        consumer.seek(q1, 2)  # the 4 cached messages are forgotten: the cache is empty
        batch = await consumer.getmany(timeout=10)
    assert [m.queue_offset for m in batch[q1]] == [2, 3, 4, 5]


async def test_a_revoked_queue_frees_the_global_cache_for_the_others(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    async with cache_filled_by_one_queue(rocketmq, unique_name) as (consumer, _, q2):
        await send_to(rocketmq.namesrv_addr, q2, 3)
        consumer.assign([q2])
        await eventually(lambda: consumer.assignment() == {q2})
        batch = await consumer.getmany(timeout=10)
    assert [m.queue_offset for m in batch[q2]] == [0, 1, 2]
