"""An operator's offset reset as a running consumer sees it (issue 42): applied at once
(not when its held long polls end, up to 15 s later), logged as the reset it is (INFO,
not a WARNING per queue), and ``group describe`` says what decides the retry count."""

from __future__ import annotations

from collections.abc import Callable

import anyio
import pytest

from aiorocket.admin import Admin
from aiorocket.consumer import ConsumeFromWhere, Consumer, ConsumerMessage
from aiorocket.message import Message
from aiorocket.producer import Producer
from aiorocket.testing.broker import LocalRocketMQ
from aiorocket.testing.logs import capture_logs

from .cli_helpers import invoke
from .helpers import eventually

pytestmark = [pytest.mark.anyio, pytest.mark.integration]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_a_reset_reaches_an_idle_consumer_at_once_and_is_no_warning(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    topic, group = unique_name("reset"), unique_name("g")
    await rocketmq.create_topic(topic, queues=2)
    await rocketmq.create_group(group)
    bodies = [b"m%d" % i for i in range(6)]
    async with Producer("reset-p", rocketmq.namesrv_addr) as producer:
        for body in bodies:
            await producer.send(Message(topic, body))
    got: list[bytes] = []

    async def handle(msg: ConsumerMessage) -> None:
        got.append(msg.body)

    # Long polls of 120 s (the default is 15 s): a reset applied only when they end
    # misses the 60 s guard below by far, whatever the machine's load (the check was
    # `took < 5` s of wall clock against 15 s).
    consumer = Consumer(group, rocketmq.namesrv_addr, handler=handle, max_reconsume_times=3,
                        consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
                        persist_offset_interval=0.2, long_poll_timeout=120,
                        pull_request_timeout=130)  # fmt: skip
    consumer.subscribe(topic)
    with capture_logs() as logs:
        async with consumer, Admin(rocketmq.namesrv_addr) as admin:
            await eventually(lambda: len(got) == len(bodies))

            async def committed() -> bool:
                return (await admin.lag(group, topic)).total == 0

            await eventually(committed)
            queues = [pq for mq, pq in consumer._state.process_queues.items() if mq.topic == topic]

            # Every queue of the topic idles in a long poll the broker holds.
            await eventually(lambda: all(pq.request_scope is not None for pq in queues))
            await admin.reset_offset(group, topic, "earliest")
            await eventually(lambda: len(got) == 2 * len(bodies), timeout=60)

            described = (await anyio.to_thread.run_sync(
                invoke, rocketmq.namesrv_addr, "group", "describe", group
            )).stdout  # fmt: skip
    assert sorted(got[len(bodies) :]) == sorted(bodies)
    resets = [e for e in logs if e["event"] == "offset_reset_by_operator"]
    assert {e["log_level"] for e in resets} == {"info"} and len(resets) == len(queues)
    assert not [e for e in logs if e["event"] == "pull_offset_illegal"]
    assert "retries: 3, the max_reconsume_times of the members" in described
    assert "the group's retry max times (16) for POP and gRPC consumers" in described
