"""A rebalance listener that raises is logged; the consumer goes on (real broker)."""

from __future__ import annotations

from collections.abc import Callable

import anyio
import pytest

from aiorocket.client.instance import ClientInstance
from aiorocket.consumer import ConsumeFromWhere, Consumer, ConsumerMessage
from aiorocket.message import Message, MessageQueue
from aiorocket.testing.broker import LocalRocketMQ
from aiorocket.testing.logs import capture_logs

from ..unit.consumer_fakes import reallocate, take_none
from .helpers import eventually, send_many, wait_dispatched

pytestmark = [pytest.mark.anyio, pytest.mark.integration]


class Faulty:
    def __init__(self) -> None:
        self.calls: list[str] = []

    async def on_queues_assigned(self, queues: list[MessageQueue]) -> None:
        self.calls.append("assigned")
        raise RuntimeError("listener bug (assigned)")

    async def on_queues_revoked(self, queues: list[MessageQueue]) -> None:
        self.calls.append("revoked")
        raise RuntimeError("listener bug (revoked)")


@pytest.mark.parametrize("orderly", [False, True], ids=["concurrent", "orderly"])
async def test_rebalance_listener_exception_is_logged_and_consuming_goes_on(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str], orderly: bool
) -> None:
    topic, group = unique_name("listener"), unique_name("g")
    await rocketmq.create_topic(topic, queues=2)
    await rocketmq.create_group(group, orderly=orderly)
    got: list[bytes] = []
    done = anyio.Event()

    async def handle(msg: ConsumerMessage) -> None:
        got.append(msg.body)
        if len(got) == 10:
            done.set()

    listener = Faulty()
    consumer = Consumer(group, rocketmq.namesrv_addr, handler=handle, listener=listener,
                        orderly=orderly, consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
                        long_poll_timeout=2.0, pull_request_timeout=12.0)  # fmt: skip
    consumer.subscribe(topic)
    with capture_logs() as logs:
        async with consumer:
            async with ClientInstance(rocketmq.namesrv_addr) as client:
                bodies = [f"m{i}".encode() for i in range(10)]
                sent = await send_many(client, topic, [Message(topic, b) for b in bodies])
                await wait_dispatched(client, topic, sent)
            with anyio.fail_after(30):
                await done.wait()
            reallocate(consumer, take_none)  # revoke everything: the other callback raises
            await eventually(lambda: not consumer.assignment())
    assert sorted(got) == sorted(bodies)
    assert listener.calls == ["assigned", "revoked"]
    failures = [e for e in logs if e["event"] == "rebalance_listener_failed"]
    assert [e["callback"] for e in failures] == ["on_queues_assigned", "on_queues_revoked"]
    assert all(e["group"] == group and topic in e["topics"] for e in failures)
    assert all(e["log_level"] == "error" for e in failures)
