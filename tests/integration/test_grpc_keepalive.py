"""A half-open connection to the Proxy is abandoned (issue 30, item 6).

The client reaches the real Proxy through a FaultProxy; ``stall()`` freezes the open
connection (no data, no FIN either way) while new connections work, as after a NAT
eviction. Before the keepalive, every call went on to the frozen connection until the
kernel gave up, minutes later: 0 successful calls in 15 s. Now a silent connection that
owes an answer gets an HTTP/2 PING; unanswered, the connection is dropped and the next
call opens a new one.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import anyio
import pytest

pytest.importorskip("grpclib")

from aiorocket.grpc import SimpleConsumer
from aiorocket.message import Message
from aiorocket.producer import Producer
from aiorocket.testing.broker import LocalRocketMQ
from aiorocket.testing.faultproxy import FaultProxy

pytestmark = [pytest.mark.integration, pytest.mark.anyio]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.parametrize("auto_batch", [True, False], ids=["batching", "plain"])
async def test_a_producer_leaves_a_stalled_connection_and_sends_on_a_new_one(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str], auto_batch: bool
) -> None:
    topic = unique_name("gstall")
    await rocketmq.create_topic(topic, queues=2)
    async with (
        FaultProxy(rocketmq.proxy_grpc) as link,
        Producer(unique_name("pg"), proxy=link.address, auto_batch=auto_batch,
                 send_timeout=15, request_timeout=3) as producer,
    ):  # fmt: skip
        await producer.send(Message(topic, b"before"))
        assert link.accepted == 2  # the streams' connection and the unary calls' own
        link.stall()
        stalled = time.monotonic()
        sent = 0
        while sent < 5:  # one send after another, as an application does
            await producer.send(Message(topic, b"during %d" % sent))
            sent += 1
            if sent == 1:
                recovered = time.monotonic() - stalled
        print(f"first send acknowledged {recovered:.2f}s after the stall")
        assert link.accepted > 2  # a new connection
        assert recovered < 15  # within the first send's own timeout: no error surfaced


async def test_a_simple_consumer_leaves_a_stalled_connection(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    topic, group = unique_name("gstallc"), unique_name("g")
    await rocketmq.create_topic(topic, queues=1)
    await rocketmq.create_group(group)
    async with (
        Producer(unique_name("pg"), proxy=rocketmq.proxy_grpc) as producer,
        FaultProxy(rocketmq.proxy_grpc) as link,
        SimpleConsumer(group, link.address, {topic: "*"}, await_duration=2) as consumer,
    ):
        await producer.send(Message(topic, b"first"))
        got = []
        with anyio.fail_after(30):
            while not got:
                got = await consumer.receive(16, invisible_duration=20)
        await consumer.ack(got)
        before = link.accepted
        link.stall()
        stalled = time.monotonic()
        await producer.send(Message(topic, b"after the stall"))
        got = []
        with anyio.fail_after(30):
            while not got:
                try:
                    got = await consumer.receive(16, invisible_duration=20)
                except Exception as exc:  # calls on the frozen connection fail: typed
                    assert type(exc).__module__ == "aiorocket.errors", exc
        print(f"received again {time.monotonic() - stalled:.2f}s after the stall")
        assert [m.body for m in got] == [b"after the stall"] and link.accepted > before
        await consumer.ack(got)
