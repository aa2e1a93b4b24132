"""Parity with the Java 5.x client after 5.2.1 (issue 42; rocketmq-clients #1321/#1322,
#1309/#1310), against the fake Proxy: a receive's attempt id kept across failed and empty
receives, the Proxy's reconnect command, RESOURCE_EXHAUSTED as throttling, and a
half-open connection recovered from failed heartbeats. (The 5.5.0 Proxy never sends
ReconnectEndpointsCommand, nor RESOURCE_EXHAUSTED for throttling, and a real half-open
connection needs a frozen Proxy whose PINGs still get answers: the fake stands in.)"""

from __future__ import annotations

import asyncio

import anyio
import pytest

pytest.importorskip("grpclib")

from grpclib.const import Status as GrpcStatus
from grpclib.exceptions import GRPCError

from aiorocket.errors import ProxyResponseError, ProxyUnavailableError, RequestTimeoutError
from aiorocket.grpc import SimpleConsumer, _session
from aiorocket.grpc import _pb as pb
from aiorocket.message import Message
from aiorocket.producer import Producer
from aiorocket.testing.fake_grpc import FakeProxy
from aiorocket.testing.logs import capture_logs
from tests.unit.test_grpc_faults import message

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_a_receive_keeps_its_attempt_id_until_a_message_arrives() -> None:
    """A receive that failed (its answer may be lost) or came back empty is repeated
    under the same attempt id, so the broker can answer it with what it popped for it;
    only a receive that got a message ends the attempt (Java #1321/#1322)."""
    async with (
        FakeProxy() as proxy,
        # generous: every call but the hung receive is answered (a loaded CI machine
        # took more than the 0.5 s this had to set up or answer an empty receive)
        SimpleConsumer(
            "g", proxy.endpoint, {"t": "*"}, await_duration=0.5, request_timeout=30
        ) as c,
    ):
        proxy.fail_next("ReceiveMessage", GRPCError(GrpcStatus.UNAVAILABLE, "reset"))
        with pytest.raises(ProxyUnavailableError):
            await c.receive(4, invisible_duration=20)
        proxy.receive_mode = "hang"
        # The Proxy never answers this one: a short deadline only makes "no answer"
        # show sooner, however loaded the machine.
        c.transport.request_timeout = 0.2
        with pytest.raises(RequestTimeoutError):  # the deadline: the answer never came
            await c.receive(4, invisible_duration=20)
        c.transport.request_timeout = 30
        proxy.receive_mode = "ok"
        assert await c.receive(4, invisible_duration=20) == []  # empty
        proxy.messages = [message(b"m1")]
        assert [m.body for m in await c.receive(4, invisible_duration=20)] == [b"m1"]
        assert await c.receive(4, invisible_duration=20) == []
    first, *same, got, after = proxy.receive_attempts
    assert first and same == [first] * 2 and got == first
    assert after and after != first


async def test_concurrent_receives_never_share_an_attempt_id() -> None:
    """Two receives under way at once from one queue each have their own attempt id
    (the broker would answer the second with the first one's messages)."""
    async with (
        FakeProxy() as proxy,
        # generous: every call is answered, none is meant to time out
        SimpleConsumer(
            "g", proxy.endpoint, {"t": "*"}, await_duration=0.5, request_timeout=30
        ) as c,
    ):
        for _ in range(2):
            async with anyio.create_task_group() as tg:
                for _ in range(2):
                    tg.start_soon(c.receive, 4, 20.0)
        first, second, third, fourth = proxy.receive_attempts
        assert first != second and {third, fourth} == {first, second}


async def test_resource_exhausted_is_throttling_a_send_backs_off_and_succeeds() -> None:
    """gRPC RESOURCE_EXHAUSTED (a Proxy or an intermediary throttling) is the retriable
    TOO_MANY_REQUESTS: the send is tried again after the policy's backoff, not failed
    at once as an unknown gRPC status (Java #1309/#1310)."""
    async with FakeProxy() as proxy:
        async with Producer("pg", proxy=proxy.endpoint, auto_batch=False) as producer:
            proxy.fail_next("SendMessage", GRPCError(GrpcStatus.RESOURCE_EXHAUSTED, "slow down"))
            result = await producer.send(Message("t", b"x"))
        assert result.msg_id
        assert len(proxy.send_requests) == 2  # refused, then sent after a pause
        refused_at, sent_at = proxy.send_requests[0][0], proxy.send_requests[1][0]
        assert sent_at > refused_at


async def test_resource_exhausted_maps_to_retriable_too_many_requests() -> None:
    async with (
        FakeProxy() as proxy,
        SimpleConsumer("g", proxy.endpoint, {"t": "*"}, await_duration=0.5) as c,
    ):
        proxy.fail_next("ReceiveMessage", GRPCError(GrpcStatus.RESOURCE_EXHAUSTED, "busy"))
        with pytest.raises(ProxyResponseError) as throttled:
            await c.receive(4, invisible_duration=20)
    assert throttled.value.code == pb.Code.TOO_MANY_REQUESTS and throttled.value.retriable
    assert "RESOURCE_EXHAUSTED" in str(throttled.value)


async def test_the_proxys_reconnect_command_moves_the_client_to_a_new_connection() -> None:
    """ReconnectEndpointsCommand (the Proxy rebalancing its connections): the telemetry
    stream and the calls to come move to a new connection at once, the settings go
    again on it; a receive under way finishes on the old connection, which is closed
    after it."""
    async with (
        FakeProxy() as proxy,
        # Every call is answered, none is meant to time out: the receive under way ends
        # when the Proxy writes the rest of its batch (the gate), not at a deadline (a
        # 1 s one could pass, on a loaded machine, before the reconnect was checked).
        SimpleConsumer("g", proxy.endpoint, {"t": "*"}, await_duration=1, request_timeout=30) as c,
    ):
        assert proxy.connections == 2  # the streams' connection and the unary calls'
        proxy.stream_gate = rest = asyncio.Event()  # one message; the rest at the gate
        proxy.messages = [message(b"m1"), message(b"m2")]
        under_way: list[bytes] = []
        first = anyio.Event()

        async def receive_under_way() -> None:  # ends when the Proxy ends its stream
            under_way.extend(m.body for m in await c.receive(
                4, invisible_duration=20, each=lambda _: first.set()
            ))  # fmt: skip

        async with anyio.create_task_group() as tg:
            tg.start_soon(receive_under_way)
            with anyio.fail_after(30):  # a hang's guard: each step is answered
                await first.wait()
            settings = len(proxy.settings_received)
            with capture_logs() as logs:
                assert await proxy.ask_reconnect() == 1
                with anyio.fail_after(30):
                    while len(proxy.settings_received) == settings:  # noqa: ASYNC110
                        await anyio.sleep(0.01)
            moved = proxy.connections
            assert moved >= 3 and proxy.telemetry_streams == 2
            assert c.transport._wire is None or c.transport._wire.usable()
            assert [e for e in logs if e["event"] == "proxy_asked_reconnect"]
            # the receive still runs on the old unary connection (the receives' since
            # issue 43, goal 5b, round 8), which takes no new call
            old = c.transport._old_wires
            assert len(old) == 1 and len(old[0]) == 1 and not old[0].usable()
            assert under_way == []  # (not ended yet)
            rest.set()  # the Proxy writes the rest of the batch: on the old connection
        assert under_way == [b"m1", b"m2"]
        assert len(old[0]) == 0 and old[0].raw is not None and old[0].raw.is_closing()
        assert c.transport._retired == []  # the streams' old one: closed, idle
        proxy.messages = [message(b"m3")]
        assert [m.body for m in await c.receive(4, invisible_duration=20)] == [b"m3"]
        assert proxy.connections <= 4  # one new connection of each kind, no more


async def test_heartbeats_that_time_out_abandon_a_half_open_connection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A connection whose calls go unanswered while its HTTP/2 PINGs are answered (the
    keepalive sees it alive): two heartbeats in a row time out, the client drops it
    and goes on over a new one (Java #1309/#1310), and not again within the cooldown."""
    monkeypatch.setattr(_session, "RECOVERY_COOLDOWN", 60.0)
    async with (
        FakeProxy() as proxy,
        # generous: every call but the heartbeats to the stalled connection is answered
        SimpleConsumer(
            "g", proxy.endpoint, {"t": "*"}, await_duration=0.5, request_timeout=30
        ) as c,
    ):
        with capture_logs() as logs:
            before = proxy.connections
            # All at once, before the heartbeat loop's first turn (no heartbeat is under
            # way with the long timeout): only the calls that never get an answer have
            # the short one, where firing early changes nothing.
            proxy.stall_connections()
            c.transport.request_timeout = 0.3
            c.session.heartbeat_interval = 0.1
            with anyio.fail_after(30):  # a hang's guard: the count is asserted below
                while proxy.connections <= before:  # noqa: ASYNC110 - no event to await
                    await anyio.sleep(0.02)
            c.transport.request_timeout = 30
            with anyio.fail_after(30):
                await c.session.wait_ready()
            proxy.messages = [message(b"m1")]
            assert [m.body for m in await c.receive(4, invisible_duration=20)] == [b"m1"]
        abandoned = [e for e in logs if e["event"] == "connection_abandoned"]
        assert len(abandoned) == 1 and abandoned[0]["abandoned"]
        # Abandoned on the second heartbeat in a row that timed out, not later (each one
        # is a request timeout: its count, not the wall clock, says how soon)
        events = [e for e in logs if e["event"] in ("heartbeat_failed", "connection_abandoned")]
        upto = events[: events.index(abandoned[0]) + 1]
        assert [(e["event"], e.get("timeouts")) for e in upto] == [
            ("heartbeat_failed", 1),
            ("heartbeat_failed", 2),
            ("connection_abandoned", None),
        ], upto
