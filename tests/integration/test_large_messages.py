"""Large messages against the real broker: what a pull answer can hold.

A broker does not fill a pull answer up to ``maxMsgNums`` whatever the size: it stops
once the answer would pass ``maxTransferBytesOnMessageInMemory`` (256 KiB; 64 KiB from
disk), though the first message always goes. So with default settings an answer holds
at most 256 KiB or one message (itself at most ``maxMessageSize``, 4 MiB), far below the
16 MiB frame limit, whatever the batch size: the over-limit case needs a broker with
larger limits and is tested against the fake broker (tests/unit/test_pull_answer_too_large).
"""

from __future__ import annotations

import os
from collections.abc import Callable

import anyio
import pytest

from aiorocket.client.broker import PULL_SUBSCRIPTION
from aiorocket.client.instance import ClientInstance
from aiorocket.client.results import PullStatus
from aiorocket.consumer import ConsumeFromWhere, Consumer, ConsumerMessage
from aiorocket.message import Message
from aiorocket.testing.broker import LocalRocketMQ
from aiorocket.testing.logs import capture_logs

from .helpers import send_raw, wait_dispatched

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

MIB = 1024 * 1024


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_broker_caps_pull_answers_far_below_the_frame_limit(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    topic, group = unique_name("big"), unique_name("g")
    await rocketmq.create_topic(topic, queues=1)
    bodies = [os.urandom(MIB) for _ in range(18)]  # 18 MiB in one queue
    async with ClientInstance(rocketmq.namesrv_addr) as client:
        mq = (await client.namesrv.query_route(topic)).write_queues()[0]
        results = [await send_raw(client, mq, Message(topic, b)) for b in bodies]
        await wait_dispatched(client, topic, results)
        addr = (await client.namesrv.get_route(topic)).master_addr(mq.broker_name)
        assert addr is not None
        answer = await client.broker.pull(
            addr, group, mq, 0, max_nums=32, sys_flag=PULL_SUBSCRIPTION, subscription="*",
            suspend_timeout_ms=0, timeout=10,
        )  # fmt: skip
    assert answer.status is PullStatus.FOUND
    assert [m.body for m in answer.messages] == bodies[:1]  # one message, not 32

    got: list[bytes] = []
    done = anyio.Event()

    async def handle(msg: ConsumerMessage) -> None:
        got.append(msg.body)
        if len(got) == len(bodies):
            done.set()

    consumer = Consumer(group, rocketmq.namesrv_addr, handler=handle, consume_concurrency=1,
                        consume_from_where=ConsumeFromWhere.FIRST_OFFSET)  # fmt: skip
    consumer.subscribe(topic)
    with capture_logs() as logs:
        async with consumer:
            with anyio.fail_after(60):
                await done.wait()
    assert got == bodies
    assert not [e for e in logs if e["event"] in ("pull_answer_too_large", "pull_failed")]
