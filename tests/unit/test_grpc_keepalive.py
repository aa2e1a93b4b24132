"""The gRPC keepalive (issue 30, item 6) against the fake Proxy behind a FaultProxy: a
connection that stops answering while a call waits is abandoned after an unanswered
PING and the call is retried on a new connection; a slow Proxy that still answers PINGs
keeps its connection."""

from __future__ import annotations

import time

import pytest

pytest.importorskip("grpclib")

from aiorocket.message import Message
from aiorocket.producer import Producer
from aiorocket.testing.fake_grpc import FakeProxy
from aiorocket.testing.faultproxy import FaultProxy

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def keepalive_of(producer: Producer):  # type: ignore[no-untyped-def]
    protocol = producer._engine._grpc.transport.channel.protocol  # type: ignore[union-attr]
    assert protocol is not None and protocol.keepalive is not None
    return protocol.keepalive


async def test_a_stalled_connection_is_abandoned_and_the_send_goes_on_a_new_one() -> None:
    async with (
        FakeProxy() as fake,
        FaultProxy(fake.endpoint) as link,
        Producer("pg", proxy=link.address, auto_batch=False, request_timeout=3,
                 send_timeout=8) as producer,
    ):  # fmt: skip
        await producer.send(Message("t", b"before"))
        keepalive = keepalive_of(producer)
        link.stall()
        started = time.monotonic()
        await producer.send(Message("t", b"during"))  # before: RequestTimeoutError at 8 s
        took = time.monotonic() - started
        assert keepalive.abandoned and keepalive.pings == 1
        assert link.accepted == 2
        assert took < 3  # the PING's bound (interval + timeout, ~2-2.25 s), not a timeout
        assert [m.body for m in fake.sent] == [b"before", b"during"]


async def test_a_slow_proxy_that_answers_pings_keeps_its_connection() -> None:
    async with (
        FakeProxy() as fake,
        FaultProxy(fake.endpoint) as link,
        Producer("pg", proxy=link.address, auto_batch=False, request_timeout=10,
                 send_timeout=10) as producer,
    ):
        await producer.send(Message("t", b"first"))
        keepalive = keepalive_of(producer)
        fake.send_delay = 3.0  # longer than interval + timeout
        await producer.send(Message("t", b"slow"))
        assert keepalive.pings == 1 and not keepalive.abandoned  # one PING per silence
        assert link.accepted == 1
