"""Faults a real Proxy cannot produce on demand, against the fake Proxy: a receive stream
that breaks or hangs midway, a Proxy that goes away and comes back, a send that never
gets an answer, a session stream the Proxy ends or refuses."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime, timezone

import anyio
import pytest

pytest.importorskip("grpclib")

from grpclib.const import Status as GrpcStatus
from grpclib.exceptions import GRPCError

from aiorocket.consumer import Consumer, ConsumerMessage
from aiorocket.errors import (
    GrpcStatusError,
    ProxyResponseError,
    ProxyUnavailableError,
    RequestTimeoutError,
)
from aiorocket.grpc import SimpleConsumer, _session
from aiorocket.grpc import _pb as pb
from aiorocket.grpc._session import Session
from aiorocket.grpc._transport import GrpcTransport
from aiorocket.message import Message
from aiorocket.producer import Producer
from aiorocket.protocol.message_codec import CompressionType, compress_body
from aiorocket.testing.fake_grpc import FakeProxy
from aiorocket.testing.logs import capture_logs
from aiorocket.testing.sim.vloop import VirtualTimeLoop

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def message(body: bytes) -> pb.Message:
    return pb.Message(
        topic=pb.Resource(name="t"),
        system_properties=pb.SystemProperties(
            message_id=body.decode(),
            receipt_handle=f"rh-{body.decode()}",
            born_timestamp=datetime.now(timezone.utc),
            delivery_attempt=1,
        ),
        body=body,
    )


@asynccontextmanager
async def quick_consumer(proxy: FakeProxy, timeout: float = 0.5) -> AsyncIterator[SimpleConsumer]:
    """A consumer whose receives end within about a second: the request ``timeout`` from
    its open on. The open itself (the settings, a heartbeat: answered) gets 30 s, as a
    loaded machine took more than 0.5 s for them (964adac: "no settings within 0.5s")."""
    async with SimpleConsumer(
        "g", proxy.endpoint, {"t": "*"}, await_duration=0.5, request_timeout=30
    ) as c:
        c.transport.request_timeout = timeout
        yield c


async def test_receive_gets_every_message_of_the_stream() -> None:
    async with FakeProxy() as proxy, SimpleConsumer("g", proxy.endpoint, {"t": "*"}) as c:
        proxy.messages = [message(b"m1"), message(b"m2")]
        got = await c.receive(16, invisible_duration=20)
        assert [m.body for m in got] == [b"m1", b"m2"]
        assert got[0].receipt_handle == "rh-m1" and got[0].broker_name == "fake-broker"
        await c.ack(got)
        assert "AckMessage" in proxy.calls
        assert await c.receive(16, invisible_duration=20) == []  # MESSAGE_NOT_FOUND
    # Closing told the Proxy.
    assert proxy.calls[-1] == "NotifyClientTermination"


@pytest.mark.parametrize("mode", ["unavailable", "reset"])
async def test_a_stream_that_breaks_mid_receive_hands_on_what_arrived(mode: str) -> None:
    """The messages decoded before the break are ours (an auto-renewing Proxy holds them
    for this client for hours): the receive returns them instead of raising."""
    async with (
        FakeProxy() as proxy,
        # the receive's deadline (20 + 60 s) well past the guard below
        SimpleConsumer("g", proxy.endpoint, {"t": "*"}, request_timeout=60) as c,
    ):
        proxy.messages = [message(b"m1"), message(b"m2")]  # m1 written, then the break
        proxy.receive_mode = mode  # type: ignore[assignment]
        # No hang: the answer comes with the break, not at the deadline (a guard, not a
        # bound: 2 s left a loaded machine little, and the deadline was 23 s).
        with capture_logs() as logs, anyio.fail_after(30):
            got = await c.receive(16, invisible_duration=20)
        assert [m.body for m in got] == [b"m1"]
        assert any(e["event"] == "receive_stream_broken" for e in logs)
        await c.ack(got)
        assert proxy.acked == ["rh-m1"]


async def test_a_receive_that_reaches_its_deadline_midway_hands_on_what_arrived() -> None:
    async with FakeProxy() as proxy, quick_consumer(proxy) as c:
        proxy.messages = [message(b"m1"), message(b"m2")]
        proxy.receive_mode = "stall"  # m1 written, then nothing until the deadline
        got = await c.receive(16, invisible_duration=20)
        assert [m.body for m in got] == [b"m1"]
        assert proxy.invisible_changes == []  # handed on, not released


async def test_a_receive_without_a_session_fails_at_its_deadline_saying_why() -> None:
    async with FakeProxy() as proxy, quick_consumer(proxy) as c:
        await proxy.stop()  # gone: the session cannot be reopened
        # No hang: its deadline (about 1 s) ends it; 30 s is a hang's guard, not a bound
        # (`< 3.0` s of wall clock failed on a starved machine).
        with anyio.fail_after(30), pytest.raises(ProxyUnavailableError, match="stream is down"):
            await c.receive(4, invisible_duration=20)


async def cancelled_once_m1_is_in(c: SimpleConsumer) -> None:
    """A receive cancelled once it holds m1 and waits for more (its ``idle``), not after
    a second of wall clock: on a starved machine m1 could still be on its way then."""
    arrived = anyio.Event()
    with anyio.fail_after(30):  # a hang's guard
        async with anyio.create_task_group() as tg:

            async def receive() -> None:
                await c.receive(16, invisible_duration=20, idle=arrived.set)

            tg.start_soon(receive)
            await arrived.wait()
            tg.cancel_scope.cancel()


async def test_a_cancelled_receive_releases_what_it_had_received() -> None:
    async with FakeProxy() as proxy, SimpleConsumer("g", proxy.endpoint, {"t": "*"}) as c:
        proxy.messages = [message(b"m1"), message(b"m2")]
        proxy.receive_mode = "stall"  # m1 written, then nothing
        await cancelled_once_m1_is_in(c)
        # Nobody will handle m1: visible to the group again at once.
        assert proxy.invisible_changes == [("rh-m1", 0.0)]


async def test_a_cancelled_receive_sends_a_release_whose_connection_was_lost_again() -> None:
    """grpc_lite seed 50: the close cut a receive whose connection had gone silent; the
    keepalive abandoned it under the release, which failed, and the lite message (not
    auto-renewed: no termination notice frees it) stayed invisible for its invisible
    time. A release that fails retriably goes again (on a new connection)."""
    async with FakeProxy() as proxy, SimpleConsumer("g", proxy.endpoint, {"t": "*"}) as c:
        proxy.messages = [message(b"m1"), message(b"m2")]
        proxy.receive_mode = "stall"  # m1 written, then nothing
        proxy.fail_next("ChangeInvisibleDuration", GRPCError(GrpcStatus.UNAVAILABLE, "lost"))
        await cancelled_once_m1_is_in(c)
        assert proxy.invisible_changes == [("rh-m1", 0.0)]


def undecodable(body: bytes) -> pb.Message:
    """A message whose body is labelled compressed but is no codec's output."""
    msg = message(body)
    msg.system_properties.body_encoding = pb.Encoding.GZIP
    return msg


async def test_an_undecodable_message_is_dead_lettered_and_the_others_handed_on() -> None:
    async with FakeProxy() as proxy, SimpleConsumer("g", proxy.endpoint, {"t": "*"}) as c:
        proxy.messages = [message(b"m5"), undecodable(b"m6"), message(b"m7")]
        with capture_logs() as logs:
            got = await c.receive(16, invisible_duration=20)
        assert [m.body for m in got] == [b"m5", b"m7"]
        assert proxy.dead_lettered == ["rh-m6"]
        assert c.undecodable_total == 1
        bad = [e for e in logs if e["event"] == "undecodable_message"]
        assert [(e["msg_id"], e["action"]) for e in bad] == [("m6", "dead_lettered")]


async def test_an_undecodable_message_the_dlq_refuses_is_released_with_a_backoff() -> None:
    async with FakeProxy() as proxy, SimpleConsumer("g", proxy.endpoint, {"t": "*"}) as c:
        proxy.dead_letter_refusal = GRPCError(GrpcStatus.UNAVAILABLE, "no DLQ today")
        proxy.messages = [undecodable(b"m6"), message(b"m7")]
        got = await c.receive(16, invisible_duration=20)
        assert [m.body for m in got] == [b"m7"]
        # Not held (an auto-renewed receive would be, for hours): back after a backoff.
        [(handle, seconds)] = proxy.invisible_changes
        assert handle == "rh-m6" and 0 < seconds <= 60


@pytest.mark.parametrize("codec", list(CompressionType))
async def test_a_compressed_body_of_any_remoting_codec_is_read(codec: CompressionType) -> None:
    """The Proxy labels every compressed stored body GZIP, LZ4 and zstd ones too."""
    body = b"payload " * 1000
    async with FakeProxy() as proxy, SimpleConsumer("g", proxy.endpoint, {"t": "*"}) as c:
        msg = undecodable(b"m1")
        msg.body = compress_body(body, codec)
        proxy.messages = [msg]
        got = await c.receive(16, invisible_duration=20)
        assert [m.body for m in got] == [body]


async def test_receive_that_hangs_ends_at_its_deadline() -> None:
    async with FakeProxy() as proxy, quick_consumer(proxy) as c:
        proxy.receive_mode = "hang"
        # Its deadline (about 1 s) ends it; 30 s is a hang's guard (see above).
        with anyio.fail_after(30), pytest.raises(RequestTimeoutError):
            await c.receive(4, invisible_duration=20)


async def test_a_receive_stream_is_mapped_timed_and_counted_as_before() -> None:
    """The receive stream's deadline, error mapping and open-call count, done inline
    since round 7 of issue 43 (goal 5b) instead of by three context managers: its own
    deadline is a RequestTimeoutError, a gRPC UNAVAILABLE a ProxyUnavailableError, a
    caller's cancellation stays a cancellation (not a timeout), and the transport counts
    no call open after any of them (its keepalive watches while one is)."""
    async with FakeProxy() as proxy, quick_consumer(proxy) as c:
        transport = c.transport
        session_calls = transport._calls  # the telemetry stream's
        proxy.receive_mode = "hang"
        with pytest.raises(RequestTimeoutError, match=r"ReceiveMessage to .*within"):
            await c.receive(4, invisible_duration=20)
        assert transport._calls == session_calls
        with anyio.move_on_after(0.2) as scope:
            await c.receive(4, invisible_duration=20)
        assert scope.cancelled_caught and transport._calls == session_calls
        proxy.receive_mode = "ok"
        proxy.fail_next("ReceiveMessage", GRPCError(GrpcStatus.UNAVAILABLE, "going away"))
        with pytest.raises(ProxyUnavailableError, match="going away"):
            await c.receive(4, invisible_duration=20)
        assert transport._calls == session_calls
        proxy.messages = [message(b"m1")]
        assert [m.body for m in await c.receive(4, invisible_duration=20)] == [b"m1"]
        assert transport._calls == session_calls


async def test_telemetry_reconnects_and_resends_the_settings() -> None:
    async with FakeProxy() as proxy, SimpleConsumer("g", proxy.endpoint, {"t": "tagA"}) as c:
        assert proxy.telemetry_streams == 1 and len(proxy.settings_received) == 1
        sub = proxy.settings_received[0].subscription
        assert sub is not None and sub.subscriptions[0].expression.expression == "tagA"
        await proxy.restart()
        with anyio.fail_after(10):  # the first retry comes after 1 s
            while len(proxy.settings_received) < 2:  # noqa: ASYNC110 - no event to await
                await anyio.sleep(0.05)
        assert proxy.telemetry_streams == 2
        # Calls reconnect too: the consumer works again.
        proxy.messages = [message(b"after")]
        got = await c.receive(4, invisible_duration=20)
        assert [m.body for m in got] == [b"after"]


async def test_a_batched_send_ends_at_its_own_timeout() -> None:
    """Auto-batching is the default over gRPC; a send's own ``timeout`` still bounds it
    (the batch's request runs under the producer's longer send_timeout)."""
    async with (
        FakeProxy() as proxy,
        Producer(
            "pg", proxy=proxy.endpoint, send_timeout=600, request_timeout=600, shutdown_timeout=0.5
        ) as producer,
    ):
        assert producer.batcher is not None
        first = await producer.send(Message("t", b"first"))
        assert [m.body for m in proxy.sent] == [b"first"] and first.queue_offset == 0
        proxy.send_hangs = True
        # The batch's request would end after 600 s: the send's own 0.5 s ends it, well
        # within the 60 s guard (`< 3.0` s of wall clock against 10 s failed when starved).
        with anyio.fail_after(60), pytest.raises(RequestTimeoutError):
            await producer.send(Message("t", b"late"), timeout=0.5)


async def test_a_telemetry_stream_ended_with_a_grpc_status_fails_the_start_with_it() -> None:
    """The Proxy ends the session stream with an error status: the client's start raises
    that status, typed."""
    async with FakeProxy() as proxy:
        proxy.telemetry_refusal = GRPCError(GrpcStatus.UNAUTHENTICATED, "who are you")
        with anyio.fail_after(5), pytest.raises(GrpcStatusError) as refused:
            async with SimpleConsumer("g", proxy.endpoint, {"t": "*"}):
                pass
    assert refused.value.status == GrpcStatus.UNAUTHENTICATED.value
    assert "who are you" in str(refused.value)


async def test_a_telemetry_stream_ended_without_settings_says_so() -> None:
    """The Proxy ends the session stream with status OK but no settings: the start fails
    saying that, not with grpclib's complaint about our still-open side."""
    async with FakeProxy() as proxy:
        proxy.telemetry_refusal = "end"
        with (
            anyio.fail_after(5),
            pytest.raises(ProxyUnavailableError, match="closed the telemetry stream"),
        ):
            async with SimpleConsumer("g", proxy.endpoint, {"t": "*"}):
                pass


async def test_a_telemetry_command_is_a_refusal_only_with_a_status_that_says_so() -> None:
    transport = GrpcTransport("127.0.0.1:1", client_id="c")  # never connected here
    session = Session(transport, pb.ClientType.PRODUCER, pb.Publishing())
    sent: list[pb.TelemetryCommand] = []

    class Replies:
        async def send_message(self, cmd: pb.TelemetryCommand) -> None:
            sent.append(cmd)

    unset = pb.TelemetryCommand(
        status=pb.Status(code=pb.Code.CODE_UNSPECIFIED),
        print_thread_stack_trace_command=pb.PrintThreadStackTraceCommand(nonce="n1"),
    )
    await session._on_command(Replies(), unset)  # type: ignore[arg-type]
    assert [c.thread_stack_trace.nonce for c in sent] == ["n1"]
    refusal = pb.TelemetryCommand(status=pb.Status(code=pb.Code.UNAUTHORIZED, message="no"))
    with pytest.raises(ProxyResponseError) as refused:
        await session._on_command(Replies(), refusal)  # type: ignore[arg-type]
    assert refused.value.code == 40100 and not refused.value.retriable


@pytest.mark.parametrize("anyio_backend", [
    pytest.param(("asyncio", {"loop_factory": VirtualTimeLoop}), id="asyncio-virtual"),
])  # fmt: skip
async def test_a_consumer_receives_within_a_second_of_a_restarted_proxy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """After a Proxy restart the first receive waits for the settings on the new
    telemetry stream (the Proxy refuses it before: '"settings" is null'), which a
    waiting receive makes the session send at once, not after its reconnect backoff.
    The backoff is made 30 s, past the guard: only the waiting receive can bring the
    session back in time (a 1.5 s bound against a ~3 s backoff left a loaded machine
    little). On a virtual clock (the fake Proxy and the consumer in one loop,
    time.monotonic the loop's): the Proxy's 4 s down cost 4 s of wall clock before."""
    monkeypatch.setattr(time, "monotonic", asyncio.get_running_loop().time)
    monkeypatch.setattr(_session, "_STREAM_BACKOFF", 30.0)
    handled = anyio.Event()

    async def handle(msg: ConsumerMessage) -> None:
        handled.set()

    async with FakeProxy() as proxy:
        proxy.receive_delay = 5  # a long poll, as the Proxy's: no receive loop spins
        consumer = Consumer("g", proxy=proxy.endpoint, handler=handle, long_poll_timeout=5)
        consumer.subscribe("t")
        async with consumer:
            with anyio.fail_after(5):
                await proxy.receive_started.wait()
            await proxy.restart(down=4.0)  # the reconnect backoff: 30 s from the break
            proxy.messages = [message(b"after")]
            with anyio.fail_after(15):  # a hang's guard, half the backoff
                await handled.wait()
    assert proxy.receives_without_settings == 0


async def test_a_broken_auto_renewed_receive_ends_the_proxys_hold_and_goes_on() -> None:
    """The Proxy renews what it wrote to a receive stream that broke for this client
    (3 h): the push consumer tells it the client is gone for the group (its only release
    of those handles), sends its settings and heartbeat again, and receives on, with no
    receive sent while the Proxy lacked the settings. A receive that ends normally
    releases nothing."""
    handled: list[bytes] = []

    async def handle(msg: ConsumerMessage) -> None:
        handled.append(msg.body)

    async with FakeProxy() as proxy:
        consumer = Consumer("g", proxy=proxy.endpoint, handler=handle, long_poll_timeout=5)
        consumer.subscribe("t")
        async with consumer:
            proxy.messages = [message(b"m0")]
            with anyio.fail_after(10):
                while b"m0" not in handled:  # noqa: ASYNC110 - no event to await
                    await anyio.sleep(0.02)
            assert "NotifyClientTermination" not in proxy.calls  # a normal receive
            settings = len(proxy.settings_received)
            proxy.receive_mode = "reset"
            proxy.messages = [message(b"m1"), message(b"m2")]  # m2 written, never arrives
            with anyio.fail_after(10):
                while "NotifyClientTermination" not in proxy.calls:  # noqa: ASYNC110
                    await anyio.sleep(0.02)
            proxy.receive_mode = "ok"
            proxy.messages = [message(b"m3")]
            with anyio.fail_after(10):
                while b"m3" not in handled:  # noqa: ASYNC110 - no event to await
                    await anyio.sleep(0.02)
            notified = proxy.calls.index("NotifyClientTermination")
            assert proxy.calls.count("NotifyClientTermination") == 1
            assert "Heartbeat" in proxy.calls[notified:]
            # the reconnect's settings, then the ones sent again after the notice
            assert len(proxy.settings_received) >= settings + 2
        assert proxy.receives_without_settings == 0
        assert sorted(handled) == [b"m0", b"m1", b"m3"]


async def test_the_consumer_handles_what_a_broken_or_poisoned_receive_brought() -> None:
    """The push consumer (the issue's repro): a receive that breaks after m1, and one
    with an undecodable m6 between m5 and m7. Every decoded message is handled and
    acked, m6 is dead-lettered and counted; nothing is left to the Proxy's renewal."""
    handled: list[bytes] = []
    first, seen = anyio.Event(), anyio.Event()

    async def handle(msg: ConsumerMessage) -> None:
        handled.append(msg.body)
        if msg.body == b"m1":
            first.set()
        if msg.body == b"m9":
            seen.set()

    async with FakeProxy() as proxy:
        consumer = Consumer("g", proxy=proxy.endpoint, handler=handle, long_poll_timeout=5)
        consumer.subscribe("t")
        async with consumer:
            proxy.receive_mode = "reset"
            proxy.messages = [message(b"m1"), message(b"m2")]  # m1 written, then the reset
            with anyio.fail_after(10):
                await first.wait()
            proxy.receive_mode = "ok"
            proxy.messages = [message(b"m5"), undecodable(b"m6"), message(b"m7"), message(b"m9")]
            with anyio.fail_after(10):
                await seen.wait()
            assert consumer.undecodable_messages == 1
        assert sorted(handled) == [b"m1", b"m5", b"m7", b"m9"]
        assert sorted(proxy.acked) == ["rh-m1", "rh-m5", "rh-m7", "rh-m9"]
        assert proxy.dead_lettered == ["rh-m6"]


async def test_a_receive_uses_the_last_assignments_while_they_are_asked_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Assignments older than their TTL are asked for again in the background: the
    receive goes out with the last ones at once (after a Proxy restart it waited for the
    query, a round trip to a cold Proxy), and a query that fails does not fail it."""
    from aiorocket.grpc import _simple

    # generous: every call is answered (a failure is the Proxy's, not a timeout)
    async with FakeProxy() as proxy, quick_consumer(proxy, timeout=30) as c:
        proxy.messages = [message(b"m1")]
        assert [m.body for m in await c.receive(4, invisible_duration=20)] == [b"m1"]
        monkeypatch.setattr(_simple, "_ASSIGNMENT_TTL", 0.0)  # every one is old now
        proxy.fail_next("QueryAssignment", GRPCError(GrpcStatus.UNAVAILABLE, "cold"))
        proxy.messages = [message(b"m2")]
        assert [m.body for m in await c.receive(4, invisible_duration=20)] == [b"m2"]
        with anyio.fail_after(5):
            while c._refreshing:  # noqa: ASYNC110 - the background query has no event
                await anyio.sleep(0.01)
        assert not proxy._failures["QueryAssignment"]  # asked, and refused
