"""A consumer whose broker connection goes half-open resumes after one request timeout."""

from __future__ import annotations

import anyio
import pytest

from .consumer_fakes import FAST, Collector, FakeBroker, FakeCluster, consumer_of, running

pytestmark = pytest.mark.anyio


async def test_a_consumer_behind_a_stalled_connection_reconnects_and_consumes() -> None:
    broker = FakeBroker("broker-a", 0)
    cluster = FakeCluster({"broker-a": [broker]})
    handler = Collector(2)
    async with running(cluster), consumer_of(cluster, handler):
        # The connection goes half-open (a NAT entry expired): the broker neither
        # reads nor answers on it any more, and the kernel reports nothing.
        broker.stall_next_pull = True
        with anyio.fail_after(5):
            await broker.stalled.wait()
        broker.add(0, b"m0")
        broker.add(1, b"m1")
        # One request timeout (pull 6 s, others 2 s) closes it; the next request
        # opens a new connection. Without that, every pull would time out for good.
        with anyio.fail_after(FAST["pull_request_timeout"] + 5):
            await handler.done.wait()
    assert sorted(handler.got) == [b"m0", b"m1"]
    assert len(broker.server.sessions) >= 2
