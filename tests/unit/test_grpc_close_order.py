"""The gRPC close's order against the fake Proxy: the termination is the last word the
Proxy hears from a client (``aiorocket.grpc._session``'s module docstring).

The real Proxy runs Telemetry's messages, Heartbeat and NotifyClientTermination on one
pool of several threads (``GrpcMessagingApplication.clientManagerThreadPoolExecutor``),
so a settings message or heartbeat sent before the termination can be applied after it,
and lists the closed client again (``ClientActivity.processAndWriteClientSettings``
registers the producer or consumer; ``ClientActivity.heartbeat`` does when it read the
settings before the termination removed them). The fake Proxy's ``lag`` holds such a
call until the termination comes (or the lag ends), as that pool can.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import pytest

pytest.importorskip("grpclib")

from aiorocket.consumer import Consumer, ConsumerMessage
from aiorocket.grpc import SimpleConsumer
from aiorocket.producer import Producer
from aiorocket.testing.fake_grpc import FakeProxy

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def _handle(msg: ConsumerMessage) -> None:
    pass


@asynccontextmanager
async def client(kind: str, proxy: FakeProxy, request_timeout: float = 3.0) -> AsyncIterator[None]:
    """A started gRPC client of ``kind``, its session registered with ``proxy``."""
    if kind == "producer":
        async with Producer(
            "pg", proxy=proxy.endpoint, auto_batch=False, heartbeat_interval=0.2,
            request_timeout=request_timeout,
        ):  # fmt: skip
            yield
    elif kind == "simple":
        async with SimpleConsumer("g", proxy.endpoint, {"t": "*"}, request_timeout=request_timeout):
            yield
    else:
        consumer = Consumer("g", proxy=proxy.endpoint, handler=_handle, long_poll_timeout=5,
                            request_timeout=request_timeout)  # fmt: skip
        consumer.subscribe("t")
        async with consumer:
            yield
    assert proxy.calls[-1] == "NotifyClientTermination"


async def held(proxy: FakeProxy) -> None:
    """Until the call ``lag`` holds arrived: it is under way."""
    with anyio.fail_after(10):
        await proxy.held.wait()


async def last_applied(proxy: FakeProxy) -> list[str]:
    """The last two calls the Proxy applied, once what it held was."""
    with anyio.fail_after(10):
        await proxy.lag_ended()
    return proxy.applied[-2:]


@pytest.mark.parametrize("kind", ["producer", "simple", "push"])
async def test_settings_under_way_as_the_close_begins_are_applied_before_the_termination(
    kind: str,
) -> None:
    """The telemetry stream moved to a new connection (the Proxy's reconnect command) and
    sent the settings again as the close began. On the old code the close cut the
    telemetry loop and sent the termination at once; the Proxy applied it first, then
    the settings, and listed the closed client again. Now the close waits for the
    Proxy's answer to the settings (they are applied then), then terminates."""
    async with FakeProxy() as proxy:
        async with client(kind, proxy):
            assert proxy.registered
            proxy.lag["settings"] = 1.0  # well inside the request timeout (3 s)
            assert await proxy.ask_reconnect() == 1
            await held(proxy)
        assert await last_applied(proxy) == ["settings", "NotifyClientTermination"]
        assert proxy.registered == set()


async def test_a_heartbeat_under_way_as_the_close_begins_is_applied_before_the_termination() -> (
    None
):
    """A heartbeat went out as the close began. On the old code the close cancelled it
    (the wait: the Proxy runs what it took) and terminated; the Proxy, which had read
    the client's settings for the heartbeat, registered it after the termination."""
    async with FakeProxy() as proxy:
        async with client("producer", proxy):
            proxy.lag["Heartbeat"] = 1.0  # well inside the request timeout (3 s)
            await held(proxy)
        assert await last_applied(proxy) == ["Heartbeat", "NotifyClientTermination"]
        assert proxy.registered == set()


async def test_the_close_ends_in_its_bound_and_terminates_when_the_heartbeat_under_way_hangs() -> (
    None
):
    """A heartbeat under way as the connection goes silent: the close waits for it until
    its request timeout (1 s), then terminates on a new connection (the termination names
    the client, not the connection), within the close's bound, two request timeouts
    (the guard, 60 s, is far from it). On the old code the termination went on the
    silent connection and never reached the Proxy."""
    async with FakeProxy() as proxy:
        with anyio.fail_after(60):
            async with client("producer", proxy, request_timeout=1.0):
                proxy.lag["Heartbeat"] = 600.0
                await held(proxy)
                proxy.stall_connections()
                connections = proxy.connections
        assert proxy.connections == connections + 1
        assert proxy.calls[-1] == "NotifyClientTermination"


async def test_a_termination_lost_with_its_silent_connection_is_sent_again_on_a_new_one() -> None:
    """The connections go silent before the close (nothing under way): the termination
    times out there (1 s) and goes once more on a new connection, within the close's
    bound (``close_bound``: 5 s; the guard, 60 s, is far from it), as a remoting
    unregister does. On the old code it was sent once, lost: the client stayed listed
    (simulator grpc_receive seed 31: a half-open connection as the close began)."""
    async with FakeProxy() as proxy:
        with anyio.fail_after(60):
            async with client("simple", proxy, request_timeout=1.0):
                proxy.stall_connections()
                connections = proxy.connections
        assert proxy.connections == connections + 1
        assert proxy.registered == set()
