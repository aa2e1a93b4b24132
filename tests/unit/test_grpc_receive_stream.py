"""The receive stream on the client's own HTTP/2 connection (``aiorocket.grpc._h2stream``,
issue 43 goal 5b, round 8), against the scripted HTTP/2 server of ``test_grpc_unary``
(what a real Proxy cannot be made to do on demand) and the fake Proxy (grpclib's server:
its flow control). Each test says what ``GrpcTransport.server_stream`` promises."""

from __future__ import annotations

import asyncio
from typing import Any

import anyio
import pytest

pytest.importorskip("grpclib")

from h2.errors import ErrorCodes

from aiorocket.errors import (
    GrpcStatusError,
    ProxyResponseError,
    ProxyUnavailableError,
    RequestTimeoutError,
)
from aiorocket.grpc import SimpleConsumer, _unary
from aiorocket.grpc import _pb as pb
from aiorocket.grpc._h2wire import GOAWAY, WireConnection, frame
from aiorocket.grpc._transport import GrpcTransport
from aiorocket.testing.fake_grpc import FakeProxy
from aiorocket.testing.logs import capture_logs
from tests.unit.test_grpc_faults import message
from tests.unit.test_grpc_unary import _Conn, _wire, framed, heartbeat, serve

__all__ = ["serve"]  # the fixture, shared with test_grpc_unary

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _heartbeat(n: int) -> bytes:
    """A reply whose status message tells the replies apart."""
    return bytes(pb.HeartbeatResponse(status=pb.Status(code=pb.Code.OK, message=f"r{n}")))


def _head(c: _Conn, sid: int, **extra: str) -> None:
    c.h2.send_headers(sid, [(":status", "200"), ("content-type", "application/grpc"),
                            *extra.items()])  # fmt: skip


def _stream(c: _Conn, sid: int, replies: list[bytes], status: int = 0) -> None:
    _head(c, sid)
    for reply in replies:
        c.h2.send_data(sid, framed(reply))
    c.h2.send_headers(sid, [("grpc-status", str(status))], end_stream=True)


async def _read(
    transport: GrpcTransport, timeout: float = 2.0, out: list[str] | None = None
) -> list[str]:
    got = [] if out is None else out
    async with transport.server_stream(
        "ReceiveMessage", pb.HeartbeatRequest(), pb.HeartbeatResponse, timeout=timeout
    ) as stream:
        async for reply in stream:
            got.append(reply.status.message)
    return got


async def _reset_by_the_client(server: Any) -> None:
    """The stream was reset, once, by the client (CANCEL: it left it)."""
    with anyio.fail_after(5):
        await server.reset.wait()
    assert server.resets == [ErrorCodes.CANCEL]


async def test_a_stream_is_read_to_its_end_and_leaves_no_stream_or_call(serve: Any) -> None:
    server, transport = await serve(
        lambda c, sid: _stream(c, sid, [_heartbeat(i) for i in range(5)])
    )
    for _ in range(2):
        assert await _read(transport) == [f"r{i}" for i in range(5)]
    assert len(_wire(transport)) == 0 and transport._calls == 0
    assert len(server.connections) == 1
    got = server.headers[0]
    assert got[":path"] == "/apache.rocketmq.v2.MessagingService/ReceiveMessage"
    assert got["te"] == "trailers" and got["x-mq-client-id"] == "c"
    assert 2000 < int(got["grpc-timeout"][:-1]) <= 3000  # the deadline and the grace


async def test_messages_cut_across_frames_and_packed_in_one_are_all_read(serve: Any) -> None:
    """The Proxy's writes do not follow message bounds: one DATA frame may hold several
    messages and a message may span frames (its 5-byte prefix too)."""
    data = b"".join(framed(_heartbeat(i)) for i in range(6))

    def answer(c: _Conn, sid: int) -> None:
        _head(c, sid)
        for cut in ((0, 3), (3, 40), (40, 41), (41, len(data))):
            c.h2.send_data(sid, data[cut[0] : cut[1]])
        c.h2.send_headers(sid, [("grpc-status", "0")], end_stream=True)

    _, transport = await serve(answer)
    assert await _read(transport) == [f"r{i}" for i in range(6)]


async def test_messages_before_a_reset_are_handed_out_then_the_error(serve: Any) -> None:
    """At-least-once: what arrived before the Proxy reset the stream reaches the caller;
    then the reset is a retriable ProxyUnavailableError."""

    def answer(c: _Conn, sid: int) -> None:
        _head(c, sid)
        c.h2.send_data(sid, framed(_heartbeat(0)) + framed(_heartbeat(1)))
        c.h2.reset_stream(sid, ErrorCodes.INTERNAL_ERROR)

    _, transport = await serve(answer)
    got: list[str] = []
    with pytest.raises(ProxyUnavailableError, match="reset") as info:
        await _read(transport, out=got)
    assert got == ["r0", "r1"] and info.value.retriable
    assert len(_wire(transport)) == 0 and transport._calls == 0


async def test_messages_before_a_lost_connection_are_handed_out_then_the_error(
    serve: Any,
) -> None:
    def answer(c: _Conn, sid: int) -> None:
        _head(c, sid)
        c.h2.send_data(sid, framed(_heartbeat(0)))
        c.flush()
        c.transport.close()

    _, transport = await serve(answer)
    got: list[str] = []
    with pytest.raises(ProxyUnavailableError) as info:
        await _read(transport, out=got)
    assert got == ["r0"] and info.value.retriable and transport._calls == 0


@pytest.mark.parametrize(
    ("status", "error"),
    [
        (14, ProxyUnavailableError),
        (4, RequestTimeoutError),
        (8, ProxyResponseError),
        (12, GrpcStatusError),
    ],
)
async def test_a_trailers_only_answer_raises_its_grpc_status(
    serve: Any, status: int, error: type[Exception]
) -> None:
    _, transport = await serve(lambda c, sid: c.h2.send_headers(sid, [
        (":status", "200"), ("content-type", "application/grpc"),
        ("grpc-status", str(status)), ("grpc-message", "no%20thanks"),
    ], end_stream=True))  # fmt: skip
    with pytest.raises(error):
        await _read(transport)
    assert transport._calls == 0


async def test_an_error_status_in_the_trailers_follows_the_messages(serve: Any) -> None:
    _, transport = await serve(lambda c, sid: _stream(c, sid, [_heartbeat(0)], status=14))
    got: list[str] = []
    with pytest.raises(ProxyUnavailableError):
        await _read(transport, out=got)
    assert got == ["r0"]


async def test_an_ok_stream_without_trailers_is_not_taken_as_complete(serve: Any) -> None:
    def answer(c: _Conn, sid: int) -> None:
        _head(c, sid)
        c.h2.send_data(sid, framed(_heartbeat(0)), end_stream=True)

    _, transport = await serve(answer)
    with pytest.raises(GrpcStatusError, match="Missing grpc-status"):
        await _read(transport)


async def test_a_message_cut_short_by_the_streams_end_is_a_typed_error(serve: Any) -> None:
    """grpclib raised a bare AssertionError here (not a client error type)."""

    def answer(c: _Conn, sid: int) -> None:
        _head(c, sid)
        c.h2.send_data(sid, framed(_heartbeat(0)) + framed(_heartbeat(1))[:9])
        c.h2.send_headers(sid, [("grpc-status", "0")], end_stream=True)

    _, transport = await serve(answer)
    got: list[str] = []
    with pytest.raises(GrpcStatusError, match="cut short"):
        await _read(transport, out=got)
    assert got == ["r0"]


async def test_a_compressed_message_is_a_typed_error(serve: Any) -> None:
    """No compression is offered; grpclib raised a bare NotImplementedError here."""

    def answer(c: _Conn, sid: int) -> None:
        _head(c, sid)
        c.h2.send_data(sid, b"\x01" + framed(_heartbeat(0))[1:])
        c.h2.send_headers(sid, [("grpc-status", "0")], end_stream=True)

    _, transport = await serve(answer)
    with pytest.raises(GrpcStatusError, match="compressed"):
        await _read(transport)


async def test_a_cancelled_receive_stays_a_cancellation_and_resets_its_stream(
    serve: Any,
) -> None:
    server, transport = await serve(lambda c, sid: _head(c, sid))  # headers, then nothing
    with anyio.move_on_after(0.3) as scope:
        await _read(transport, timeout=10)
    assert scope.cancelled_caught
    assert len(_wire(transport)) == 0 and transport._calls == 0
    await _reset_by_the_client(server)


async def test_a_receive_past_its_deadline_is_a_timeout_and_resets_its_stream(
    serve: Any,
) -> None:
    server, transport = await serve(lambda c, sid: _head(c, sid))
    with pytest.raises(RequestTimeoutError, match="ReceiveMessage"):
        await _read(transport, timeout=0.3)
    assert len(_wire(transport)) == 0 and transport._calls == 0
    with anyio.fail_after(5):
        await server.reset.wait()


async def test_goaway_fails_a_stream_it_did_not_take_retriably(serve: Any) -> None:
    def answer(c: _Conn, sid: int) -> None:
        c.transport.write(frame(GOAWAY, 0, 0, (sid - 1).to_bytes(4, "big") + bytes(4)))

    _, transport = await serve(answer)
    with pytest.raises(ProxyUnavailableError, match="GOAWAY") as info:
        await _read(transport)
    assert info.value.retriable and transport._calls == 0


async def test_receives_under_way_together_share_the_connection(serve: Any) -> None:
    """Four streams open at once, answered in the reverse order, each with its own
    messages; one connection."""
    sids: list[int] = []

    def answer(c: _Conn, sid: int) -> None:
        sids.append(sid)
        if len(sids) == 4:
            for n, s in enumerate(reversed(sids)):
                _stream(c, s, [_heartbeat(10 * n + i) for i in range(3)])

    server, transport = await serve(answer)
    results: list[list[str]] = []

    async def one() -> None:
        results.append(await _read(transport, timeout=5))

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            for _ in range(4):
                tg.start_soon(one)
    assert sorted(results) == [[f"r{10 * n + i}" for i in range(3)] for n in range(4)]
    assert len(server.connections) == 1 and server.most_open == 4


async def test_a_receive_of_32_messages_of_4_mib_passes_the_flow_control_windows() -> None:
    """128 MiB on one stream, 32 times the receive window: the client gives the windows
    back as it reads (grpclib's server holds to them), so the stream never stalls."""
    body = b"x" * (4 * 1024 * 1024)
    async with (
        FakeProxy() as proxy,
        # The receive's own deadline (await_duration + request_timeout) is not what is
        # tested, and 128 MiB through two Python HTTP/2 stacks took more than the 50 s it
        # had on a loaded machine (~4 s quiet): a stall is caught message by message below.
        SimpleConsumer("g", proxy.endpoint, {"t": "*"}, request_timeout=3600) as c,
    ):
        proxy.messages = []
        for i in range(32):
            msg = message(f"m{i}".encode())
            msg.body = body
            proxy.messages.append(msg)
        stalled = 30.0  # no message for this long: the windows were not given back
        arrivals: list[object] = []
        # The session's heartbeats (every 10 s) are calls too: on a loaded machine this
        # receive takes longer than that, and one may be under way at the check below.
        beating = 0
        heartbeat = c.session.heartbeat

        async def counted_heartbeat() -> None:
            nonlocal beating
            beating += 1
            try:
                await heartbeat()
            finally:
                beating -= 1

        c.session.heartbeat = counted_heartbeat  # type: ignore[method-assign]

        def arrived(msg: object) -> None:
            arrivals.append(msg)
            scope.deadline = anyio.current_time() + stalled

        with (
            capture_logs() as logs,
            anyio.CancelScope(deadline=anyio.current_time() + stalled) as scope,
        ):
            got = await c.receive(32, invisible_duration=20, each=arrived)
        assert not scope.cancelled_caught, f"stalled after {len(arrivals)} messages"
        # (a stream cut short returns what came: the warning says why)
        broken = [e for e in logs if e["event"] == "receive_stream_broken"]
        assert len(got) == 32 and not broken, broken
        assert all(m.body == body for m in got)
        assert c.transport._calls == 1 + beating  # the telemetry stream's (the receive's is over)


@pytest.mark.parametrize(
    ("http", "error", "code"),
    [("503", ProxyUnavailableError, None), ("401", GrpcStatusError, "UNAUTHENTICATED")],
)
async def test_a_reset_after_a_non_200_status_raises_what_the_status_says(
    serve: Any, http: str, error: type[Exception], code: str | None
) -> None:
    """grpc's HTTP-to-gRPC status mapping (doc/http-grpc-status-mapping.md: 503 is
    UNAVAILABLE, 401 UNAUTHENTICATED), not the reset that followed (main: every one a
    retriable ProxyUnavailableError), as grpclib read the headers first."""

    def answer(c: _Conn, sid: int) -> None:
        c.h2.send_headers(sid, [(":status", http), ("content-type", "text/html")])
        c.h2.reset_stream(sid, ErrorCodes.INTERNAL_ERROR)

    _, transport = await serve(answer)
    with pytest.raises(error, match=f"Received :status = '{http}'") as info:
        await _read(transport)
    if code is not None:
        assert getattr(info.value, "name", None) == code
    assert transport._calls == 0 and len(_wire(transport)) == 0


async def test_a_stream_over_max_reply_unread_is_a_typed_error_and_spares_the_other_calls(
    serve: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a stream's reader has not taken is bounded (``MAX_REPLY``): past it the
    stream is reset and fails with a typed error after the messages before it; a call
    under way on the same connection is answered."""
    monkeypatch.setattr(_unary, "MAX_REPLY", 200)
    sids: list[int] = []

    def answer(c: _Conn, sid: int) -> None:
        sids.append(sid)
        if len(sids) == 1:  # the receive: one message, then the start of one too big
            _head(c, sid)
            c.h2.send_data(sid, framed(_heartbeat(0)) + framed(b"x" * 1000)[:250])
        else:
            c.reply(sid)

    server, transport = await serve(answer)
    got: list[str] = []
    with pytest.raises(GrpcStatusError, match="reply over 200 bytes"):
        await _read(transport, out=got)
    assert got == ["r0"]
    assert (await heartbeat(transport)).status.code == pb.Code.OK
    assert len(server.connections) == 1 and transport._calls == 0
    await _reset_by_the_client(server)


async def test_a_receive_cancelled_mid_message_leaves_the_others_their_messages(
    serve: Any,
) -> None:
    """Three receives on one connection; one is cancelled with half a message in, the
    others' streams then run to their end: every message of theirs is read."""
    sids: list[int] = []
    halfway = anyio.Event()

    def answer(c: _Conn, sid: int) -> None:
        sids.append(sid)
        if len(sids) == 3:
            for s in sids:
                _head(c, s)
            c.h2.send_data(sids[0], framed(_heartbeat(99))[:12])
            c.flush()
            halfway.set()
        elif len(sids) == 4:  # after the cancel: the others' messages
            for n, s in enumerate(sids[1:3]):
                c.h2.send_data(s, framed(_heartbeat(10 * n)) + framed(_heartbeat(10 * n + 1)))
                c.h2.send_headers(s, [("grpc-status", "0")], end_stream=True)
            c.reply(sid)

    server, transport = await serve(answer)
    results: list[list[str]] = [[], []]
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            cut = anyio.CancelScope()

            async def cancelled() -> None:
                with cut:
                    await _read(transport, timeout=5)

            tg.start_soon(cancelled)
            await anyio.wait_all_tasks_blocked()
            for out in results:
                tg.start_soon(_read, transport, 5, out)
            await halfway.wait()
            cut.cancel()
            await server.reset.wait()
            await heartbeat(transport)  # the fourth stream: the others' answers go out
    assert sorted(results) == [["r0", "r1"], ["r10", "r11"]]
    assert server.resets == [ErrorCodes.CANCEL] and transport._calls == 0


async def test_goaway_lets_the_receives_it_took_end_with_their_messages(serve: Any) -> None:
    """GOAWAY naming the first of two receives under way: the first still gets every
    message and its end; the second, which the server never took, fails retriably with
    nothing read (the Proxy popped nothing for it); the connection then closes and
    the next call opens a new one."""
    sids: list[int] = []

    def answer(c: _Conn, sid: int) -> None:
        sids.append(sid)
        if len(sids) == 2:
            c.transport.write(frame(GOAWAY, 0, 0, sids[0].to_bytes(4, "big") + bytes(4)))
            _stream(c, sids[0], [_heartbeat(0), _heartbeat(1)])
        elif len(sids) > 2:
            c.reply(sid)

    server, transport = await serve(answer)
    first: list[str] = []
    failed: list[ProxyUnavailableError] = []

    async def second() -> None:
        try:
            await _read(transport, timeout=5)
        except ProxyUnavailableError as exc:
            failed.append(exc)

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(_read, transport, 5, first)
            await anyio.wait_all_tasks_blocked()
            tg.start_soon(second)
    assert first == ["r0", "r1"]
    assert len(failed) == 1 and "GOAWAY" in str(failed[0]) and failed[0].retriable
    assert (await heartbeat(transport)).status.code == pb.Code.OK
    assert len(server.connections) == 2 and transport._calls == 0


async def test_a_receive_cancelled_as_its_message_arrives_releases_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """At-least-once: a message whose bytes came in the instant the receive's task was
    cancelled (asyncio's ``task.cancel()``, ``wait_for``: unlike anyio's scopes they
    cancel a task already woken) is released like those read before it. Main: the
    reset left it unread, invisible to the group until its invisible time."""
    async with FakeProxy() as proxy, SimpleConsumer("g", proxy.endpoint, {"t": "*"}) as c:
        proxy.messages = [message(b"arrives-as-cut")]
        receive = asyncio.ensure_future(c.receive(4, invisible_duration=20))
        original = WireConnection._data

        def data(self: WireConnection, stream_id: int, flags: int, payload: bytes) -> None:
            original(self, stream_id, flags, payload)
            if b"arrives-as-cut" in payload:  # before the woken reader has run
                receive.cancel()

        monkeypatch.setattr(WireConnection, "_data", data)
        with anyio.fail_after(10), pytest.raises(asyncio.CancelledError):
            await receive
        assert proxy.invisible_changes == [("rh-arrives-as-cut", 0.0)]


async def test_a_receive_the_client_breaks_off_ends_the_proxys_renewal_of_the_rest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An auto-renewed receive whose stream the client resets itself (an answer over
    ``MAX_REPLY``: a typed GrpcStatusError, not a connection error) may leave messages
    the Proxy wrote after the reset, renewed for this client until its session ends:
    the session ends that renewal (``release_held``), as after a reset by the Proxy.
    Main: only a reset by the Proxy, a lost connection or the deadline did."""
    monkeypatch.setattr(_unary, "MAX_REPLY", 4096)
    async with FakeProxy() as proxy, SimpleConsumer("g", proxy.endpoint, {"t": "*"}) as c:
        c.auto_renew = True
        released: list[bool] = []
        monkeypatch.setattr(c.session, "release_held_soon", lambda: released.append(True))
        proxy.messages = [message(b"m0"), message(b"big" + b"x" * 50_000), message(b"m2")]
        with anyio.fail_after(10):
            got = await c.receive(4, invisible_duration=20)
        assert [m.body for m in got] == [b"m0"]
        assert released == [True]
