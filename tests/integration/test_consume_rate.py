"""``max_rate``: a consumer receives at most that many messages a second, on every
transport, against the real cluster (messages waiting on the broker, not in the cache)."""

from __future__ import annotations

import time
from collections.abc import Callable

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
