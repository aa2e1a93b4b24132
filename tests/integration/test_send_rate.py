"""The producer's ``max_rate`` against the real cluster: concurrent sends are stored at
the rate (a second's worth at once, then paced), all of them."""

from __future__ import annotations

import time
from collections.abc import Callable

import anyio
import pytest

from aiorocket.message import Message
from aiorocket.producer import Producer
from aiorocket.testing.broker import LocalRocketMQ

pytestmark = [pytest.mark.anyio, pytest.mark.integration]


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # the pace is the same code on trio
async def test_max_rate_paces_concurrent_sends(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    topic = unique_name("sendrate")
    await rocketmq.create_topic(topic, queues=2)
    rate, n = 20.0, 40
    stored: list[float] = []
    async with Producer(unique_name("p"), rocketmq.namesrv_addr, max_rate=rate) as producer:
        await producer.send(Message(topic, b"warm"))  # routes known: the sends time the pace
        start = time.monotonic()

        async def send(i: int) -> None:
            result = await producer.send(Message(topic, b"%d" % i))
            assert result.msg_id
            stored.append(time.monotonic() - start)

        async with anyio.create_task_group() as tg:
            for i in range(n):
                tg.start_soon(send, i)
    assert len(stored) == n
    # The bucket had a second's worth less the warm-up send: the rest at 20 a second.
    least = (n - rate) / rate
    assert max(stored) >= least * 0.9, max(stored)
