"""What an operator reads when a handler fails, on both transports, against the real
broker: each failure is a WARNING with the attempt number (the traceback attached only
when DEBUG is enabled), and the failure of a message's last attempt a WARNING
``message_dead_lettered`` with its group, topic, message id, attempts and last error."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import anyio
import pytest

from aiorocket import Message
from aiorocket.consumer import ConsumeFromWhere, Consumer, ConsumerMessage
from aiorocket.producer import Producer
from aiorocket.testing.broker import LocalRocketMQ
from aiorocket.testing.logs import capture_logs

from .helpers import eventually

pytestmark = [pytest.mark.anyio, pytest.mark.integration]
FIRST = ConsumeFromWhere.FIRST_OFFSET


class Boom(Exception):
    pass


def _of(events: list[dict[str, Any]], name: str, msg_id: str) -> list[dict[str, Any]]:
    return [e for e in events if e["event"] == name and e.get("msg_id") == msg_id]


async def _one_message(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> tuple[str, str, str]:
    """A fresh topic holding one message: (topic, a fresh group, the message's id)."""
    topic = unique_name("faillog")
    await rocketmq.create_topic(topic, queues=1)
    async with Producer(unique_name("p"), rocketmq.namesrv_addr) as producer:
        sent = await producer.send(Message(topic, b"body"))
    return topic, unique_name("g"), sent.msg_id


@pytest.mark.parametrize("level", [logging.DEBUG, logging.WARNING])
async def test_failures_then_dead_lettering_over_remoting(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str], level: int
) -> None:
    topic, group, msg_id = await _one_message(rocketmq, unique_name)
    second = anyio.Event()
    calls: list[int] = []

    async def handle(msg: ConsumerMessage) -> None:
        calls.append(msg.reconsume_times)
        if len(calls) == 2:
            second.set()
        raise Boom(f"attempt {len(calls)}")

    # One retry (after delay level 1: 1 s), then the dead-letter queue.
    consumer = Consumer(group, rocketmq.namesrv_addr, handler=handle, max_reconsume_times=1,
                        retry_delay_level=1, consume_from_where=FIRST)  # fmt: skip
    consumer.subscribe(topic)
    with capture_logs(level=level) as events:
        async with consumer:
            with anyio.fail_after(30):
                await second.wait()
    assert calls == [0, 1]
    failed = _of(events, "handler_failed", msg_id)
    assert [(e["log_level"], e["attempt"], e["error"]) for e in failed] == [
        ("warning", 1, "Boom('attempt 1')"),
        ("warning", 2, "Boom('attempt 2')"),
    ]
    assert all(e["topic"] == topic and e["group"] == group for e in failed)
    # the traceback only when DEBUG is on
    traces = [e.get("exc_info") for e in failed]
    if level == logging.DEBUG:
        assert all(t is not None and t[0] is Boom and t[2] is not None for t in traces)
    else:
        assert traces == [None, None]
    # only the last attempt's failure dead-letters the message
    (dead,) = _of(events, "message_dead_lettered", msg_id)
    assert dead["log_level"] == "warning"
    assert (dead["group"], dead["topic"], dead["attempts"], dead["error"]) == (
        group, topic, 2, "Boom('attempt 2')",
    )  # fmt: skip


async def test_a_false_result_on_the_last_attempt_is_logged_over_remoting(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    topic, group, msg_id = await _one_message(rocketmq, unique_name)
    called = anyio.Event()

    async def handle(msg: ConsumerMessage) -> bool:
        called.set()
        return False

    consumer = Consumer(group, rocketmq.namesrv_addr, handler=handle, max_reconsume_times=0,
                        consume_from_where=FIRST)  # fmt: skip
    consumer.subscribe(topic)
    with capture_logs(level=logging.WARNING) as events:
        async with consumer:
            with anyio.fail_after(30):
                await called.wait()
    (dead,) = _of(events, "message_dead_lettered", msg_id)
    assert (dead["group"], dead["attempts"], dead["error"]) == (
        group, 1, "handler returned False"
    )  # fmt: skip


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # grpclib is asyncio-only
async def test_failure_and_dead_lettering_over_grpc(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    pytest.importorskip("grpclib")
    from aiorocket.grpc import PopMessage

    topic, group = unique_name("gfaillog"), unique_name("g")
    await rocketmq.create_topic(topic, queues=1, brokers=[rocketmq.state["proxy_broker"]])
    await rocketmq.create_group(group, retry_max_times=0)  # the Proxy's max attempts: 1
    async with Producer("pg-faillog", proxy=rocketmq.proxy_grpc) as producer:
        await producer.send(Message(topic, b"bad"))
    called = anyio.Event()
    ids: list[str] = []

    async def handle(msg: ConsumerMessage) -> None:
        assert isinstance(msg, PopMessage)
        ids.append(msg.message_id)
        called.set()
        raise Boom("no")

    with capture_logs(level=logging.DEBUG) as events:
        consumer = Consumer(group, proxy=rocketmq.proxy_grpc, handler=handle,
                            long_poll_timeout=5)  # fmt: skip
        consumer.subscribe(topic)
        async with consumer:
            with anyio.fail_after(30):
                await called.wait()
    (failed,) = _of(events, "handler_failed", ids[0])
    assert (failed["log_level"], failed["attempt"], failed["error"]) == ("warning", 1, "Boom('no')")
    assert failed["exc_info"][0] is Boom
    (dead,) = _of(events, "message_dead_lettered", ids[0])
    assert (dead["log_level"], dead["group"], dead["topic"], dead["attempts"]) == (
        "warning", group, topic, 1,
    )  # fmt: skip
    assert dead["error"] == "Boom('no')"


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # FastStream runs on asyncio
async def test_a_faststream_handler_s_exception_is_the_dead_letter_reason(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    """Issue 42: a pydantic ValidationError (the body is no Order) was dead-lettered as
    ``error='handler returned False'``; it is named now, as for a plain consumer."""
    pytest.importorskip("faststream")
    from pydantic import BaseModel

    from aiorocket.faststream import RocketBroker

    class Order(BaseModel):
        weight_kg: float

    topic, group = unique_name("fsfail"), unique_name("g")
    await rocketmq.create_topic(topic, queues=1)
    broker = RocketBroker(rocketmq.namesrv_addr)
    called = anyio.Event()

    @broker.subscriber(topic, group=group, consume_from_where=FIRST,
                       settings={"max_reconsume_times": 0})  # fmt: skip
    async def handle(order: Order) -> None:
        called.set()  # never: the body does not parse

    with capture_logs(level=logging.WARNING) as events:
        async with broker:
            await broker.start()
            sent = await broker.publish("not json", topic)
            await eventually(lambda: bool(_of(events, "message_dead_lettered", sent.msg_id)))
    (dead,) = _of(events, "message_dead_lettered", sent.msg_id)
    assert dead["group"] == group and "validation error for handle" in dead["error"]
    assert not called.is_set()
