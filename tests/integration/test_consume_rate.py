"""``max_rate``: a consumer receives at most that many messages a second, on every
transport, against the real cluster (messages waiting on the broker, not in the cache)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from aiorocket.consumer import ConsumerMessage
from aiorocket.message import Message
from aiorocket.producer import Producer
from aiorocket.testing.broker import LocalRocketMQ

from .helpers import eventually
from .test_pause_resume import _consumer

pytest.importorskip("grpclib")

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

RATE, N, BATCH = 20.0, 60, 4


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # grpclib is asyncio-only


@pytest.mark.parametrize("mode", ["pull", "pop", "grpc"])
async def test_max_rate_slows_receiving(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str], mode: str
) -> None:
    topic, group = unique_name(f"rate{mode}"), unique_name("g")
    await rocketmq.create_topic(topic, queues=2, brokers=[rocketmq.state["proxy_broker"]])
    await rocketmq.create_group(group)
    async with Producer("rate-producer", rocketmq.namesrv_addr) as producer:
        for i in range(N):
            await producer.send(Message(topic, f"m{i}".encode()))
    at: list[float] = []

    async def handle(msg: ConsumerMessage) -> None:
        at.append(time.monotonic())

    consumer = _consumer(rocketmq, mode, group, handler=handle, max_rate=RATE,
                         pull_batch_size=BATCH)  # fmt: skip
    consumer.subscribe(topic)
    async with consumer:
        await eventually(lambda: len(at) >= N, timeout=30)
    # A second's worth at once, one batch per receive loop more; then RATE a second.
    loops = 2  # receive loops: a pull task per queue; two pop receive loops
    least = (N - RATE - loops * BATCH) / RATE
    took = at[-1] - at[0]
    assert took >= least * 0.9, (mode, took, least)
    assert len(at) == N


@pytest.mark.parametrize("mode", ["pull", "pop", "grpc"])
async def test_topic_max_rate_slows_its_topic_only(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str], mode: str
) -> None:
    """Two topics, one limited (``topic_max_rate``): the other is received at full
    speed meanwhile, the limited one at its rate (over POP and gRPC by a receive loop
    of its own: in a shared loop it waited out the other topic's long polls, 4 messages
    every 5 s through the Proxy)."""
    slow, fast, group = unique_name(f"slow{mode}"), unique_name(f"fast{mode}"), unique_name("g")
    for topic in (slow, fast):
        await rocketmq.create_topic(topic, queues=2, brokers=[rocketmq.state["proxy_broker"]])
    await rocketmq.create_group(group)
    n, rate = 30, 10.0
    async with Producer("rate-producer", rocketmq.namesrv_addr) as producer:
        for i in range(n):
            await producer.send(Message(slow, b"s%d" % i))
            await producer.send(Message(fast, b"f%d" % i))
    at: dict[str, list[float]] = {slow: [], fast: []}

    async def handle(msg: ConsumerMessage) -> None:
        at[msg.topic].append(time.monotonic())

    settings: dict[str, Any] = {"topic_max_rate": {slow: rate}, "pull_batch_size": BATCH}
    consumer = _consumer(rocketmq, mode, group, handler=handle, **settings)
    consumer.subscribe(slow)
    consumer.subscribe(fast)
    async with consumer:
        await eventually(lambda: len(at[slow]) >= n and len(at[fast]) >= n, timeout=30)
    least = (n - rate - 2 * BATCH) / rate  # a second's worth, a batch per loop, then rate
    assert at[slow][-1] - at[slow][0] >= least * 0.9, (mode, at[slow][-1] - at[slow][0])
    # The fast topic was not held back by the slow one's limit.
    assert at[fast][-1] < at[slow][-1] - 0.5, (mode, at[fast][-1] - at[slow][-1])
