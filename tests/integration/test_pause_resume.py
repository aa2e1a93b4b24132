"""``Consumer.pause`` / ``resume`` / ``paused`` under load, against the real cluster, on
each way of consuming (remoting pull, POP over remoting, gRPC): once the pause has
taken effect nothing more is received while messages keep arriving; after ``resume``
every message comes, once, and over pull each queue goes on at the offset it stopped."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import anyio
import pytest

from aiorocket.consumer import ConsumeFromWhere, Consumer, ConsumerMessage
from aiorocket.errors import ConfigError, UnsupportedTransportError
from aiorocket.message import Message, MessageQueue
from aiorocket.producer import Producer
from aiorocket.testing.broker import LocalRocketMQ

from .helpers import eventually

pytest.importorskip("grpclib")

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

#: how long "nothing arrives while paused" is watched (the absence of an event)
QUIET = 2.0


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # grpclib is asyncio-only


def _consumer(rocketmq: LocalRocketMQ, mode: str, group: str, **settings: Any) -> Consumer:
    if mode == "grpc":
        return Consumer(group, proxy=rocketmq.proxy_grpc, long_poll_timeout=5, **settings)
    return Consumer(group, rocketmq.namesrv_addr, consume_mode=mode,  # type: ignore[arg-type]
                    consume_from_where=ConsumeFromWhere.FIRST_OFFSET, long_poll_timeout=2,
                    **settings)  # fmt: skip


@pytest.mark.parametrize("mode", ["pull", "pop", "grpc"])
async def test_pause_stops_receiving_under_load_and_resume_loses_nothing(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str], mode: str
) -> None:
    topic, group = unique_name(f"pause{mode}"), unique_name("g")
    await rocketmq.create_topic(topic, queues=2, brokers=[rocketmq.state["proxy_broker"]])
    await rocketmq.create_group(group)
    seen: list[bytes] = []
    offsets: dict[tuple[str, int], list[int]] = defaultdict(list)
    last_at = [time.monotonic()]

    async def handle(msg: ConsumerMessage) -> None:
        seen.append(msg.body)
        offsets[(msg.broker_name, msg.queue_id)].append(msg.queue_offset)
        last_at[0] = time.monotonic()
        await anyio.sleep(0.01)

    consumer = _consumer(rocketmq, mode, group, handler=handle, consume_concurrency=1)
    consumer.subscribe(topic)
    first = [f"a{i}".encode() for i in range(100)]
    during = [f"b{i}".encode() for i in range(100)]
    async with consumer, Producer("pause-producer", rocketmq.namesrv_addr) as producer:
        for body in first:
            await producer.send(Message(topic, body))
        await eventually(lambda: len(seen) >= 20, timeout=30)
        consumer.pause(topic)
        assert consumer.paused() == {topic}
        # What was received before the pause took effect is still handled; then quiet.
        await eventually(lambda: time.monotonic() - last_at[0] > 1.0, timeout=30)
        at_pause = len(seen)
        for body in during:  # load while paused
            await producer.send(Message(topic, body))
        await anyio.sleep(QUIET)  # the absence of deliveries: nothing to wait on
        assert len(seen) == at_pause, "received while paused"
        assert at_pause < len(first) + len(during)
        consumer.resume()
        assert consumer.paused() == frozenset()
        await eventually(lambda: set(first + during) <= set(seen), timeout=40)
    assert sorted(seen) == sorted(first + during)  # each once: nothing lost, no repeat
    if mode == "pull":  # each queue went on at the offset it stopped at
        for seq in offsets.values():
            assert seq == list(range(seq[0], seq[0] + len(seq)))


async def test_pause_everything_then_resume_one_topic(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    """``pause()`` pauses every subscribed topic; ``resume(t)`` only ``t``."""
    a, b, group = unique_name("pa"), unique_name("pb"), unique_name("g")
    for t in (a, b):
        await rocketmq.create_topic(t, queues=1)
    consumer = _consumer(rocketmq, "pull", group, handler=lambda m: None)
    consumer.subscribe(a)
    consumer.subscribe(b)
    consumer.pause()
    assert consumer.paused() >= {a, b}
    consumer.resume(a)
    assert a not in consumer.paused() and b in consumer.paused()
    with pytest.raises(ConfigError, match="not a subscribed topic"):
        consumer.pause("nope")
    consumer.pause(MessageQueue(a, "broker-a", 0))  # a queue: pull consumption only
    assert MessageQueue(a, "broker-a", 0) in consumer.paused()
    pop = _consumer(rocketmq, "pop", group, handler=lambda m: None)
    pop.subscribe(a)
    with pytest.raises(UnsupportedTransportError):
        pop.pause(MessageQueue(a, "broker-a", 0))
