"""An exception raised in the body of ``async with`` / ``async for`` over a client comes
out as itself, never wrapped in an ExceptionGroup (so ``except RocketMQError`` or the
application's own ``except`` catches it), on asyncio and trio."""

from __future__ import annotations

from collections.abc import Callable

import anyio
import pytest

from aiorocket.client.instance import ClientInstance
from aiorocket.consumer import ConsumeFromWhere, Consumer, PullConsumer
from aiorocket.errors import ConnectionClosedError
from aiorocket.message import Message
from aiorocket.producer import Producer
from aiorocket.testing.broker import LocalRocketMQ

from .helpers import send_many, wait_dispatched

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

#: the application's own error, and one of ours (what a failed send raises).
ERRORS = [
    pytest.param(lambda: ValueError("the application's own"), id="ValueError"),
    pytest.param(lambda: ConnectionClosedError("send failed"), id="ConnectionClosedError"),
]
FAST = {"long_poll_timeout": 1.0, "persist_offset_interval": 0.5, "shutdown_timeout": 5.0}


async def _topic_with_one_message(rocketmq: LocalRocketMQ, topic: str) -> None:
    await rocketmq.create_topic(topic, queues=1)
    async with ClientInstance(rocketmq.namesrv_addr) as client:
        await wait_dispatched(client, topic, await send_many(client, topic, [Message(topic, b"x")]))


@pytest.mark.parametrize("make_error", ERRORS)
async def test_producer_body_error_comes_out_unwrapped(
    rocketmq: LocalRocketMQ,
    unique_name: Callable[[str], str],
    make_error: Callable[[], Exception],
) -> None:
    topic = unique_name("t")
    await rocketmq.create_topic(topic, queues=1)
    error = make_error()
    with pytest.raises(type(error)) as caught:
        async with Producer(unique_name("pg"), rocketmq.namesrv_addr) as producer:
            await producer.send(Message(topic, b"warm-up"))  # start the background work
            raise error
    assert caught.value is error


@pytest.mark.parametrize("make_error", ERRORS)
@pytest.mark.parametrize("where", ["async_with", "async_for"])
@pytest.mark.parametrize("client", [Consumer, PullConsumer])
async def test_consumer_body_error_comes_out_unwrapped(
    rocketmq: LocalRocketMQ,
    unique_name: Callable[[str], str],
    make_error: Callable[[], Exception],
    where: str,
    client: type[Consumer | PullConsumer],
) -> None:
    topic = unique_name("t")
    await _topic_with_one_message(rocketmq, topic)
    error = make_error()
    consumer = client(
        unique_name("g"), rocketmq.namesrv_addr,
        consume_from_where=ConsumeFromWhere.FIRST_OFFSET, **FAST,
    )  # fmt: skip
    consumer.subscribe(topic)
    with pytest.raises(type(error)) as caught:
        async with consumer:
            if where == "async_for":
                async for _msg in consumer:
                    raise error
            raise error
    assert caught.value is error


async def test_producer_body_cancelled_from_outside_closes_cleanly(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    topic = unique_name("t")
    await rocketmq.create_topic(topic, queues=1)
    with anyio.move_on_after(0.5) as scope:
        async with Producer(unique_name("pg"), rocketmq.namesrv_addr, auto_batch=True) as producer:
            await producer.send(Message(topic, b"warm-up"))
            await anyio.sleep_forever()
    assert scope.cancelled_caught
    assert producer.closed
