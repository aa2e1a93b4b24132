"""Network faults against the real cluster: what a consumer does when part of it is gone."""

from __future__ import annotations

from collections.abc import Callable

import anyio
import anyio.abc
import pytest

from aiorocket.consumer import Consumer
from aiorocket.testing.broker import LocalRocketMQ

pytestmark = [pytest.mark.anyio, pytest.mark.integration]


async def test_consumer_starts_when_one_namesrv_is_down_and_the_real_one_answers(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    topic, group = unique_name("ns"), unique_name("g")
    await rocketmq.create_topic(topic, queues=2)
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    dead = f"127.0.0.1:{listener.extra(anyio.abc.SocketAttribute.local_port)}"
    await listener.aclose()
    consumer = Consumer(group, [dead, rocketmq.namesrv_addr], request_timeout=1.0)
    consumer.subscribe(topic)
    with anyio.fail_after(30):
        async with consumer:
            assert {mq.topic for mq in consumer.assignment()} >= {topic}
