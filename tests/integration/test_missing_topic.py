"""A consumer subscribed to a topic that does not exist yet (real broker): it says so
once, at WARNING, not at every rebalance pass, says once when the topic appears, and
then consumes it."""

from __future__ import annotations

from collections.abc import Callable

import anyio
import pytest

from aiorocket.consumer import ConsumeFromWhere, Consumer, ConsumerMessage
from aiorocket.message import Message
from aiorocket.testing.broker import LocalRocketMQ
from aiorocket.testing.logs import capture_logs

from ..unit.consumer_fakes import rebalance_memory
from .helpers import eventually, send_many

pytestmark = [pytest.mark.anyio, pytest.mark.integration]


async def test_missing_topic_is_reported_once_and_its_appearance_once(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    topic = unique_name("later")
    got = anyio.Event()

    async def handle(msg: ConsumerMessage) -> None:
        got.set()

    consumer = Consumer(
        unique_name("g"), rocketmq.namesrv_addr, handler=handle, rebalance_interval=0.1,
        consume_from_where=ConsumeFromWhere.FIRST_OFFSET, long_poll_timeout=1.0,
    )  # fmt: skip
    consumer.subscribe(topic)
    with capture_logs() as logs:
        async with consumer:
            state = rebalance_memory(consumer)
            await eventually(lambda: state.passes >= 5)
            await rocketmq.create_topic(topic, queues=2)
            await eventually(lambda: bool(consumer.assignment()))
            passes = state.passes
            await eventually(lambda: state.passes >= passes + 3)
            await send_many(consumer.client, topic, [Message(topic, b"x")])
            with anyio.fail_after(30):
                await got.wait()
    # Every WARNING naming the topic: one when missing (however many passes), one at last.
    mine = [e for e in logs if e.get("topic") == topic and e["log_level"] == "warning"]
    assert [(e["event"], e["log_level"]) for e in mine] == [
        ("topic_has_no_route", "warning"),
        ("topic_route_appeared", "warning"),
    ]
