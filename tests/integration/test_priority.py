"""Priority messages (RocketMQ 5.4+, RIP-80) against the local 5.5.0 broker: on a topic
of message type PRIORITY, POP consumers get higher priorities first, so a few urgent
messages overtake a backlog. Issue 33.
"""

from __future__ import annotations

from collections.abc import Callable

import anyio
import pytest

from aiorocket.admin import Admin
from aiorocket.consumer import ConsumeFromWhere, Consumer, ConsumerMessage
from aiorocket.errors import ConfigError
from aiorocket.message import Message
from aiorocket.producer import Producer
from aiorocket.testing.broker import LocalRocketMQ

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

LOW, MID, URGENT = 30, 20, 5


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.parametrize("transport", ["remoting", "grpc"])
async def test_higher_priorities_overtake_a_backlog(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str], transport: str
) -> None:
    """A backlog of priority 0, then one of priority 1, then a few messages of priority
    3; a POP consumer taking one message at a time gets the urgent ones first, then
    (on the whole) priority 1 before priority 0: the reverse of the sending order."""
    if transport == "grpc":
        pytest.importorskip("grpclib")
    topic, group = unique_name("prio"), unique_name("g")
    async with Admin(rocketmq.namesrv_addr) as admin:  # the admin API creates the kind
        await admin.create_topic(
            topic, queues=4, brokers=[rocketmq.state["proxy_broker"]], message_type="PRIORITY"
        )
    grpc = transport == "grpc"
    where = {"proxy": rocketmq.proxy_grpc} if grpc else {"namesrv": rocketmq.namesrv_addr}
    async with Producer(unique_name("p"), **where) as producer:  # type: ignore[arg-type]
        with pytest.raises(ConfigError, match="priority must be an int >= 0"):
            await producer.send(Message(topic, b"x", priority=-1))
        for i in range(LOW):
            await producer.send(Message(topic, b"low-%d" % i, priority=0))
        for i in range(MID):
            await producer.send(Message(topic, b"mid-%d" % i, priority=1))
        for i in range(URGENT):
            await producer.send(Message(topic, b"urgent-%d" % i, priority=3))
    order: list[bytes] = []
    done = anyio.Event()

    async def handle(msg: ConsumerMessage) -> None:
        order.append(msg.body)
        if len(order) == LOW + MID + URGENT:
            done.set()

    consumer = Consumer(group, rocketmq.namesrv_addr, handler=handle, consume_mode="pop",
                        consume_from_where=ConsumeFromWhere.FIRST_OFFSET, pull_batch_size=1,
                        consume_concurrency=1, pull_threshold_for_all=1,
                        long_poll_timeout=3)  # fmt: skip
    consumer.subscribe(topic)
    async with consumer:
        with anyio.fail_after(60):
            await done.wait()
    def at(prefix: bytes) -> list[int]:
        return [i for i, body in enumerate(order) if body.startswith(prefix)]

    urgent, mid, low = at(b"urgent"), at(b"mid"), at(b"low")
    assert (len(urgent), len(mid), len(low)) == (URGENT, MID, LOW)
    # Two receive loops pop at once: while one holds the urgent queue's pop lock, the
    # broker hands the other the next priority's message, so at most one other message
    # comes with each urgent one.
    assert max(urgent) < 2 * URGENT, order
    assert sum(mid) / MID < sum(low) / LOW, order
