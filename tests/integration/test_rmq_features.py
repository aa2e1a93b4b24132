"""What an older broker lacks fails at once with ``UnsupportedBrokerFeatureError``, naming
the feature and the release it needs (POP and timer messages: 5.0; recall: 5.3.2;
priority: 5.4; lite topics: 5.5), each against a release without it: no hang, no retry
loop, no raw broker code, and nothing stored by a send the broker would have misread."""

from __future__ import annotations

import base64
import time
from collections.abc import Callable

import anyio
import pytest

from aiorocket.admin import Admin
from aiorocket.consumer import ConsumeFromWhere, Consumer
from aiorocket.errors import UnsupportedBrokerFeatureError
from aiorocket.message import Message
from aiorocket.producer import Producer
from aiorocket.testing.broker import LocalRocketMQ

from .helpers import eventually

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

#: Each failure is immediate: well under any request or retry timeout.
AT_ONCE = 10.0


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def only_the_plain_one_stored(
    rocketmq: LocalRocketMQ, producer: Producer, topic: str
) -> None:
    """A plain message sent after the refused one is the topic's (one queue) only one:
    the refused send stored nothing."""
    result = await producer.send(Message(topic, b"plain"))
    assert result.queue_offset == 0
    async with Admin(rocketmq.namesrv_addr) as admin:
        await eventually(lambda: _messages(admin, topic, 1))


async def _messages(admin: Admin, topic: str, n: int) -> bool:
    return (await admin.topic_stats(topic)).messages == n


def expect(feature: str, since: str, broker: str) -> pytest.RaisesContext:  # type: ignore[type-arg]
    return pytest.raises(
        UnsupportedBrokerFeatureError,
        match=rf"^{feature}.*needs RocketMQ {since} or later; the broker at .* runs {broker}$",
    )


@pytest.mark.broker49
async def test_timer_message_on_4_9_is_refused_before_it_is_stored(
    rocketmq49: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    topic = unique_name("timer49")
    await rocketmq49.create_topic(topic, queues=1)
    async with Producer(unique_name("pg"), rocketmq49.namesrv_addr) as producer:
        with anyio.fail_after(AT_ONCE), expect("timer messages", "5.0.0", "4.9.7") as info:
            await producer.send(
                Message(topic, b"t", deliver_time_ms=int(time.time() * 1000) + 60_000)
            )
        assert info.value.broker_version == "4.9.7" and not info.value.retriable
        await only_the_plain_one_stored(rocketmq49, producer, topic)


@pytest.mark.broker49
async def test_pop_consumer_on_4_9_fails_to_start(
    rocketmq49: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    topic = unique_name("pop49")
    await rocketmq49.create_topic(topic, queues=1)
    consumer = Consumer(unique_name("g"), rocketmq49.namesrv_addr, consume_mode="pop",
                        consume_from_where=ConsumeFromWhere.FIRST_OFFSET)  # fmt: skip
    consumer.subscribe(topic)
    with anyio.fail_after(AT_ONCE), expect("POP consumption", "5.0.0", "4.9.7"):
        async with consumer:
            async for _ in consumer:
                break


@pytest.mark.broker49
async def test_recall_on_4_9_is_refused(
    rocketmq49: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    topic = unique_name("recall49")
    await rocketmq49.create_topic(topic, queues=1)
    raw = f"v1 {topic} broker-a {int(time.time() * 1000) + 60_000} 0A0000000000000000000000000000"
    handle = base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")
    async with Producer(unique_name("pg"), rocketmq49.namesrv_addr) as producer:
        with anyio.fail_after(AT_ONCE), expect("message recall", "5.3.2", "4.9.7"):
            await producer.recall(topic, handle)


@pytest.mark.broker53
async def test_priority_message_on_5_3_is_refused_before_it_is_stored(
    rocketmq53: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    topic = unique_name("prio53")
    await rocketmq53.create_topic(topic, queues=1)
    async with Producer(unique_name("pg"), rocketmq53.namesrv_addr) as producer:
        with anyio.fail_after(AT_ONCE), expect("priority messages", "5.4.0", "5.3.3"):
            await producer.send(Message(topic, b"p", priority=3))
        await only_the_plain_one_stored(rocketmq53, producer, topic)


@pytest.mark.broker53
async def test_lite_topics_on_5_3_are_refused(
    rocketmq53: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    topic = unique_name("lite53")
    await rocketmq53.create_topic(topic, queues=1)
    async with Producer(unique_name("pg"), rocketmq53.namesrv_addr) as producer:
        with anyio.fail_after(AT_ONCE), expect("lite topics", "5.5.0", "5.3.3"):
            await producer.send(Message(topic, b"l", lite_topic="l1"))
        await only_the_plain_one_stored(rocketmq53, producer, topic)
    consumer = Consumer(unique_name("g"), rocketmq53.namesrv_addr, bind_topic=topic,
                        long_poll_timeout=2)  # fmt: skip
    with anyio.fail_after(AT_ONCE), expect("lite topics", "5.5.0", "5.3.3"):
        async with consumer:
            await consumer.subscribe_lite("l1")
