"""Starting a client whose NameServer does not answer: a clear typed error, in bounded time.

A NameServer that refuses the connection, stays silent, or is not RocketMQ at all (an
HTTP server) must make ``async with Consumer(...)`` / ``PullConsumer(...)`` raise
:class:`NameServerUnavailableError` instead of starting a consumer that only logs
warnings forever. A producer starts without the NameServer (as the Java producer does:
it has no topic yet) and its first send raises the same error. The real NameServer
still works: see the integration tests.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.abc
import pytest

from aiorocket.consumer import Consumer, PullConsumer
from aiorocket.errors import ConnectionClosedError, NameServerUnavailableError, RocketMQError
from aiorocket.message import Message
from aiorocket.producer import Producer
from aiorocket.protocol.command import RemotingCommand
from aiorocket.testing.fake_remoting import FakeRemotingServer, ServerSession

from .consumer_fakes import Collector, FakeBroker, FakeCluster, consumer_of, running

pytestmark = pytest.mark.anyio

#: far below what "forever" or a kernel TCP timeout would take; above the request timeout.
BOUND = 8.0
REQUEST_TIMEOUT = 1.0


@asynccontextmanager
async def refused() -> AsyncIterator[str]:
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    await listener.aclose()
    yield f"127.0.0.1:{port}"


@asynccontextmanager
async def http_server() -> AsyncIterator[str]:
    async def answer_http(session: ServerSession, cmd: RemotingCommand) -> None:
        await session.send_raw(
            b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/html\r\n"
            b"Content-Length: 11\r\n\r\nBad Request"
        )

    async with FakeRemotingServer(answer_http) as server:
        yield server.address


@asynccontextmanager
async def silent_server() -> AsyncIterator[str]:
    async def silent(session: ServerSession, cmd: RemotingCommand) -> None:
        return

    async with FakeRemotingServer(silent) as server:
        yield server.address


NAMESERVERS = [
    pytest.param(refused, id="refused"),
    pytest.param(http_server, id="http"),
    pytest.param(silent_server, id="silent"),
]


@pytest.mark.parametrize("client_class", [Consumer, PullConsumer])
@pytest.mark.parametrize("namesrv", NAMESERVERS)
async def test_consumer_start_raises_when_no_namesrv_answers(
    namesrv: Callable[[], Any], client_class: type[Consumer | PullConsumer]
) -> None:
    async with namesrv() as addr:
        consumer = client_class("g", addr, request_timeout=REQUEST_TIMEOUT)
        consumer.subscribe("orders")
        with anyio.fail_after(BOUND), pytest.raises(NameServerUnavailableError) as info:
            async with consumer:
                pytest.fail("the consumer started without a NameServer")
    assert addr in str(info.value)
    assert isinstance(info.value, RocketMQError)
    assert isinstance(info.value, ConnectionClosedError)  # retriable, like other connection loss


async def test_every_namesrv_is_tried_before_giving_up() -> None:
    async with refused() as first, silent_server() as second:
        consumer = Consumer("g", [first, second], request_timeout=REQUEST_TIMEOUT)
        consumer.subscribe("orders")
        with anyio.fail_after(BOUND), pytest.raises(NameServerUnavailableError) as info:
            async with consumer:
                pytest.fail("the consumer started without a NameServer")
    assert first in str(info.value) and second in str(info.value)


@pytest.mark.parametrize("namesrv", NAMESERVERS)
async def test_producer_starts_but_send_raises_when_no_namesrv_answers(
    namesrv: Callable[[], Any],
) -> None:
    async with namesrv() as addr:
        with anyio.fail_after(BOUND):
            async with Producer("pg", addr, request_timeout=REQUEST_TIMEOUT) as producer:
                with pytest.raises(NameServerUnavailableError):
                    await producer.send(Message("orders", b"x"))


async def test_a_namesrv_lost_after_start_leaves_the_consumer_running_on_cached_routes() -> None:
    broker = FakeBroker("broker-a", 0)
    cluster = FakeCluster({"broker-a": [broker]})
    handler = Collector(2)
    settings = {"route_refresh_interval": 0.2, "request_timeout": 0.5}
    async with running(cluster), consumer_of(cluster, handler, **settings) as consumer:
        cluster.namesrv_silent = True
        queries = cluster.route_queries
        with anyio.fail_after(BOUND):
            while cluster.route_queries < queries + 2:  # refreshes go unanswered...
                await cluster.route_asked.wait()
            broker.add(0, b"m0")
            broker.add(1, b"m1")
            await handler.done.wait()  # ...and consuming goes on
        assert len(consumer.assignment()) == 2
    assert sorted(handler.got) == [b"m0", b"m1"]


@pytest.mark.parametrize("cls", [Consumer, PullConsumer])
async def test_a_start_that_found_no_namesrv_may_be_tried_again(
    cls: type[Consumer | PullConsumer],
) -> None:
    # Nothing was started, so the same object may try again (a service retrying its
    # start-up until the NameServer is up): the second attempt fails the same way, not
    # with "a consumer can be started once".
    async with refused() as addr:
        consumer = cls("g", addr, request_timeout=REQUEST_TIMEOUT)
        consumer.subscribe("t")
        for _ in range(2):
            with anyio.fail_after(BOUND), pytest.raises(NameServerUnavailableError):
                async with consumer:
                    pass
