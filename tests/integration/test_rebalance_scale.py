"""What a rebalance pass costs against the real broker: requests per pass, not per topic."""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Callable

import pytest

from aiorocket.consumer import Consumer, ConsumerMessage
from aiorocket.errors import TopicNotExistError
from aiorocket.testing.broker import LocalRocketMQ

from ..unit.consumer_fakes import engine_of, rebalance_memory
from .helpers import eventually

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

TOPICS = 6


async def test_a_pass_asks_each_broker_once_and_skips_unchanged_topics(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    group = unique_name("g")
    topics = [unique_name(f"scale{i}") for i in range(TOPICS)]
    for t in topics:
        await rocketmq.create_topic(t, queues=2)  # 2 queues on each of the two brokers

    async def nop(msg: ConsumerMessage) -> None:
        return None

    consumer = Consumer(group, rocketmq.namesrv_addr, handler=nop)
    for t in topics:
        consumer.subscribe(t)
    async with consumer:
        broker = consumer.client.broker
        asked: Counter[str] = Counter()
        get_ids = broker.get_consumer_ids

        async def counting(addr: str, group: str) -> list[str]:
            asked[addr] += 1
            return await get_ids(addr, group)

        broker.get_consumer_ids = counting  # type: ignore[method-assign]

        retry = f"%RETRY%{group}"

        async def retry_topic_assigned() -> bool:
            # Its route appears once the brokers have seen the group; query it afresh so
            # the background refresh cannot change it during the passes below.
            with contextlib.suppress(TopicNotExistError):
                await consumer.client.namesrv.query_route(retry)
            await engine_of(consumer).rebalancer.rebalance()
            brokers = {mq.broker_name for mq in consumer.assignment() if mq.topic == retry}
            return len(brokers) == len(rocketmq.broker_addrs)

        await eventually(retry_topic_assigned)
        state = rebalance_memory(consumer)
        owned = consumer.assignment()
        allocations = state.allocations
        async with state.lock:  # not while a background pass is under way
            passes = state.passes
            asked.clear()
        for _ in range(3):
            await engine_of(consumer).rebalancer.rebalance()
            assert consumer.assignment() == owned
        # Every topic spans both brokers, so one answer serves all of them: one query
        # per pass (counting passes of the background loop that may have run too).
        assert sum(asked.values()) == state.passes - passes >= 3
        assert state.allocations == allocations

        other = Consumer(group, rocketmq.namesrv_addr, handler=nop)
        for t in topics:
            other.subscribe(t)
        async with other:
            # The broker's NOTIFY_CONSUMER_IDS_CHANGED makes both split at once.
            await eventually(lambda: len(consumer.assignment()) < len(owned), timeout=30)
            assert state.allocations > allocations
            mine, theirs = consumer.assignment, other.assignment
            await eventually(lambda: mine() | theirs() == owned and not mine() & theirs())
