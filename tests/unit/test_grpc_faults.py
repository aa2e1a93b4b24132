"""Faults a real Proxy cannot produce on demand, against the fake Proxy: a receive stream
that breaks or hangs midway, a Proxy that goes away and comes back, a send that never
gets an answer, a session stream the Proxy ends or refuses."""

from __future__ import annotations

import time
from datetime import datetime, timezone

import anyio
import pytest

pytest.importorskip("grpclib")

from grpclib.const import Status as GrpcStatus
from grpclib.exceptions import GRPCError

from aiorocket.errors import (
    GrpcStatusError,
    ProxyResponseError,
    ProxyUnavailableError,
    RequestTimeoutError,
)
from aiorocket.grpc import SimpleConsumer
from aiorocket.grpc import _pb as pb
from aiorocket.grpc._session import Session
from aiorocket.grpc._transport import GrpcTransport
from aiorocket.message import Message
from aiorocket.producer import Producer
from aiorocket.testing.fake_grpc import FakeProxy

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
async def test_stream_closing_mid_receive_is_a_typed_error(mode: str) -> None:
    async with FakeProxy() as proxy, SimpleConsumer("g", proxy.endpoint, {"t": "*"}) as c:
        proxy.messages = [message(b"m1"), message(b"m2")]
        proxy.receive_mode = mode  # type: ignore[assignment]
        start = time.monotonic()
        with pytest.raises(ProxyUnavailableError):
            await c.receive(16, invisible_duration=20)
        # No hang: the error comes with the break, not at the deadline.
        assert time.monotonic() - start < 2.0


async def test_receive_that_hangs_ends_at_its_deadline() -> None:
    async with (
        FakeProxy() as proxy,
        SimpleConsumer(
            "g", proxy.endpoint, {"t": "*"}, await_duration=0.5, request_timeout=0.5
        ) as c,  # fmt: skip
    ):
        proxy.receive_mode = "hang"
        start = time.monotonic()
        with pytest.raises(RequestTimeoutError):
            await c.receive(4, invisible_duration=20)
        assert time.monotonic() - start < 3.0


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
            "pg", proxy=proxy.endpoint, send_timeout=10, request_timeout=10, shutdown_timeout=0.5
        ) as producer,
    ):
        assert producer.batcher is not None
        first = await producer.send(Message("t", b"first"))
        assert [m.body for m in proxy.sent] == [b"first"] and first.queue_offset == 0
        proxy.send_hangs = True
        start = time.monotonic()
        with pytest.raises(RequestTimeoutError):
            await producer.send(Message("t", b"late"), timeout=0.5)
        assert time.monotonic() - start < 3.0


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
