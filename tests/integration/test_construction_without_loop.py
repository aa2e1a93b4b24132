"""Consumers, like the producer, are constructed outside a running event loop (as their
docstring examples do) and started later inside one."""

from __future__ import annotations

from collections.abc import Callable

import anyio
import pytest

from aiorocket.client.instance import ClientInstance
from aiorocket.consumer import ConsumeFromWhere, Consumer, ConsumerMessage, PullConsumer
from aiorocket.message import Message
from aiorocket.testing.broker import LocalRocketMQ

from .helpers import send_many, wait_dispatched

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_consumers_constructed_outside_an_event_loop_start_and_consume_in_one(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str], backend: str
) -> None:
    topic = unique_name("noloop")
    first = ConsumeFromWhere.FIRST_OFFSET
    # No event loop runs here.
    push = Consumer(unique_name("g"), rocketmq.namesrv_addr, consume_from_where=first)
    pull = PullConsumer(unique_name("g"), rocketmq.namesrv_addr, consume_from_where=first)
    push.subscribe(topic)
    pull.subscribe(topic)

    async def main() -> list[bytes]:
        await rocketmq.create_topic(topic, queues=1)
        async with ClientInstance(rocketmq.namesrv_addr) as client:
            results = await send_many(client, topic, [Message(topic, b"hello")])
            await wait_dispatched(client, topic, results)
        got: list[bytes] = []
        with anyio.fail_after(30):
            async with push:
                msg: ConsumerMessage
                async for msg in push:
                    got.append(msg.body)
                    await msg.ack()
                    break
            async with pull:
                got.append((await pull.getone()).body)
        return got

    assert anyio.run(main, backend=backend) == [b"hello", b"hello"]
