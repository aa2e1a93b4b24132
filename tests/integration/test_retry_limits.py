"""What ``max_reconsume_times`` means, against the real broker."""

from __future__ import annotations

from collections.abc import Callable

import anyio
import pytest

from aiorocket.client.instance import ClientInstance
from aiorocket.consumer import ConsumeFromWhere, Consumer, ConsumerConfig, ConsumerMessage
from aiorocket.message import Message
from aiorocket.testing.broker import LocalRocketMQ

from .helpers import one_queue_topic, send_many, wait_dispatched

pytestmark = [pytest.mark.anyio, pytest.mark.integration]


async def test_max_reconsume_times_minus_one_retries_a_failed_message_concurrently(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    topic, group = unique_name("minus1"), unique_name("g")
    await one_queue_topic(rocketmq, topic, group)
    attempts: list[int] = []
    retried = anyio.Event()

    async def handle(msg: ConsumerMessage) -> None:
        attempts.append(msg.reconsume_times)
        if msg.reconsume_times == 0:
            raise RuntimeError("fails once")
        retried.set()

    # -1 is the Java client's default: 16 retries (not "straight to the DLQ").
    consumer = Consumer(group, rocketmq.namesrv_addr, handler=handle, max_reconsume_times=-1,
                        retry_delay_level=1, consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
                        long_poll_timeout=2.0, pull_request_timeout=12.0)  # fmt: skip
    consumer.subscribe(topic)
    async with consumer:
        async with ClientInstance(rocketmq.namesrv_addr) as client:
            sent = await send_many(client, topic, [Message(topic, b"once")])
            await wait_dispatched(client, topic, sent)
        with anyio.fail_after(40):  # delay level 1 is 1 s; the retry topic's pull adds some
            await retried.wait()
    assert attempts == [0, 1]


def test_max_reconsume_times_minus_one_is_the_java_default_of_each_mode() -> None:
    assert ConsumerConfig(max_reconsume_times=-1).reconsume_limit() == 16
    assert ConsumerConfig(max_reconsume_times=-1, orderly=True).reconsume_limit() == 2**31 - 1
    assert ConsumerConfig(max_reconsume_times=3, orderly=True).reconsume_limit() == 3
    assert ConsumerConfig(max_reconsume_times=0).reconsume_limit() == 0
