"""A consumer whose broker connection goes half-open resumes after one request timeout."""

from __future__ import annotations

import anyio
import pytest

from .consumer_fakes import FAST, Collector, FakeBroker, FakeCluster, consumer_of, running
from .virtual_clock import ON_VIRTUAL_CLOCKS

pytestmark = pytest.mark.anyio


@ON_VIRTUAL_CLOCKS
async def test_a_consumer_behind_a_stalled_connection_reconnects_and_consumes() -> None:
    """On a virtual clock (the fake broker and the consumer in this loop): the request
    timeouts and the guards are exact whatever the load (on the wall clock a starved
    run's reconnect and pulls outlasted the guard of one pull timeout plus 5 s)."""
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
