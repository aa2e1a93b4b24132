"""The unary calls' own connection (``aiorocket.grpc._h2wire``, issue 43 goal 5a)
against a scripted HTTP/2 server (h2, server side), for what a real Proxy cannot be made
to do on demand: reset a stream, answer trailers-only or with HTTP 503, send GOAWAY, hold
a small flow-control window, allow one stream at a time, never answer. Each test says
what ``GrpcTransport.unary`` promises on that path."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import pytest

pytest.importorskip("grpclib")

from h2.config import H2Configuration
from h2.connection import H2Connection
from h2.errors import ErrorCodes
from h2.events import (
    ConnectionTerminated,
    DataReceived,
    PingAckReceived,
    RequestReceived,
    SettingsAcknowledged,
    StreamEnded,
    StreamReset,
)
from h2.settings import SettingCodes

from aiorocket.errors import (
    GrpcStatusError,
    ProxyResponseError,
    ProxyUnavailableError,
    RequestTimeoutError,
)
from aiorocket.grpc import _pb as pb
from aiorocket.grpc import _unary
from aiorocket.grpc._encode import RawRequest
from aiorocket.grpc._h2wire import GOAWAY, frame
from aiorocket.grpc._keepalive import KeepaliveSettings
from aiorocket.grpc._transport import GrpcTransport
from aiorocket.security import Credentials
from aiorocket.testing.pki import make_pki

pytestmark = pytest.mark.anyio

_OK_REPLY = bytes(pb.HeartbeatResponse(status=pb.Status(code=pb.Code.OK, message="OK")))


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def framed(message: bytes) -> bytes:
    return b"\x00" + len(message).to_bytes(4, "big") + message


class _Conn(asyncio.Protocol):
    """One server connection: records requests, answers as ``server.answer`` says."""

    def __init__(self, server: ScriptedServer) -> None:
        self.server = server
        self.h2 = H2Connection(H2Configuration(client_side=False, header_encoding="utf-8"))
        self.bodies: dict[int, bytearray] = {}
        self.transport: Any = None
        self.settings_acked = False
        self.data_frames: list[int] = []
        self.ping_acks: list[bytes] = []
        self.goaway: int | None = None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        self.server.connections.append(self)
        self.h2.initiate_connection()
        if self.server.settings:
            self.h2.update_settings(self.server.settings)
        self.flush()

    def flush(self) -> None:
        if not self.transport.is_closing():
            self.transport.write(self.h2.data_to_send())

    def data_received(self, data: bytes) -> None:
        for event in self.h2.receive_data(data):
            if isinstance(event, RequestReceived):
                self.bodies[event.stream_id] = bytearray()
                self.server.headers.append(dict(event.headers))
                self.server.opened(self)
                if self.server.on_request is not None:
                    self.server.on_request(self, event.stream_id)
            elif isinstance(event, DataReceived):
                self.data_frames.append(len(event.data))
                self.bodies[event.stream_id] += event.data
                self.h2.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            elif isinstance(event, StreamEnded):
                self.server.requests.append(bytes(self.bodies[event.stream_id])[5:])
                self.server.answer(self, event.stream_id)
            elif isinstance(event, StreamReset):
                self.server.resets.append(event.error_code)
                self.server.reset.set()
            elif isinstance(event, SettingsAcknowledged):
                self.settings_acked = True
            elif isinstance(event, PingAckReceived):
                self.ping_acks.append(event.ping_data)
                self.server.ping_acked.set()
            elif isinstance(event, ConnectionTerminated):
                self.goaway = event.error_code
        self.flush()

    def reply(self, sid: int, message: bytes = _OK_REPLY, status: int = 0) -> None:
        self.h2.send_headers(sid, [(":status", "200"), ("content-type", "application/grpc")])
        data = framed(message)
        step = self.h2.max_outbound_frame_size
        for start in range(0, len(data), step):
            self.h2.send_data(sid, data[start : start + step])
        self.h2.send_headers(sid, [("grpc-status", str(status))], end_stream=True)

    def open_streams(self) -> int:
        return self.h2.open_inbound_streams


class ScriptedServer:
    """An HTTP/2 server on 127.0.0.1 whose answer to each unary request is ``answer``."""

    def __init__(
        self, answer: Callable[[_Conn, int], None], settings: dict[int, int] | None = None
    ):
        self.answer = answer
        self.settings = settings or {}
        self.connections: list[_Conn] = []
        self.requests: list[bytes] = []
        self.headers: list[dict[str, str]] = []
        self.resets: list[int] = []
        self.reset = asyncio.Event()
        self.ping_acked = asyncio.Event()
        #: answers at the request's headers, before its data (None: at its end)
        self.on_request: Callable[[_Conn, int], None] | None = None
        self.most_open = 0
        self.endpoint = ""

    def opened(self, conn: _Conn) -> None:
        self.most_open = max(self.most_open, conn.open_streams())


@pytest.fixture
async def serve() -> AsyncIterator[Callable[..., Any]]:
    servers: list[asyncio.Server] = []
    transports: list[GrpcTransport] = []

    async def start(
        answer: Callable[[_Conn, int], None], client: dict[str, Any] | None = None,
        ssl: Any = None, **kw: Any,
    ) -> tuple[ScriptedServer, GrpcTransport]:
        scripted = ScriptedServer(answer, **kw)
        server = await asyncio.get_running_loop().create_server(
            lambda: _Conn(scripted), "127.0.0.1", 0, ssl=ssl
        )
        servers.append(server)
        port = server.sockets[0].getsockname()[1]
        transport = GrpcTransport(
            f"127.0.0.1:{port}", client_id="c", **{"keepalive": None, **(client or {})}
        )
        transports.append(transport)
        return scripted, transport

    yield start
    for t in transports:
        t.close()
    for s in servers:
        s.close()


def _wire(transport: GrpcTransport) -> Any:
    """The unary calls' own connection (``aiorocket.grpc._h2wire``)."""
    assert transport._wire is not None
    return transport._wire


async def heartbeat(transport: GrpcTransport, timeout: float = 2.0) -> Any:
    return await transport.unary(
        "Heartbeat", pb.HeartbeatRequest(), pb.HeartbeatResponse, timeout=timeout
    )


async def test_a_call_gets_its_reply_and_leaves_no_stream_or_call(serve: Any) -> None:
    server, transport = await serve(lambda c, sid: c.reply(sid))
    for _ in range(3):
        resp = await heartbeat(transport)
        assert resp.status.code == pb.Code.OK
    assert len(_wire(transport)) == 0
    assert transport._calls == 0 and not transport._prompt
    assert len(server.connections) == 1


async def test_every_call_carries_the_headers_the_proxy_reads(serve: Any) -> None:
    """Decoded by h2's own HPACK decoder, call after call (the table fills, then holds)."""
    creds = Credentials("ak", "sk", "token")
    server, transport = await serve(
        lambda c, sid: c.reply(sid), client={"namespace": "ns", "credentials": creds}
    )
    for _ in range(4):
        await heartbeat(transport, timeout=5)
    ids = set()
    for got in server.headers:
        assert got[":method"] == "POST" and got[":scheme"] == "http"
        assert got[":path"] == "/apache.rocketmq.v2.MessagingService/Heartbeat"
        assert got["te"] == "trailers" and got["content-type"] == "application/grpc"
        assert got["grpc-timeout"].endswith("m") and 5000 < int(got["grpc-timeout"][:-1]) <= 6000
        assert got["x-mq-client-id"] == "c" and got["x-mq-language"] == "PYTHON"
        assert got["x-mq-protocol"] == "v2" and got["x-mq-namespace"] == "ns"
        assert got["x-mq-session-token"] == "token" and "Credential=ak," in got["authorization"]
        assert got["x-mq-date-time"]
        ids.add(got["x-mq-request-id"])
    assert len(ids) == 4


async def test_a_cancelled_call_resets_its_stream_and_frees_its_slot(serve: Any) -> None:
    server, transport = await serve(lambda c, sid: None)  # never answers
    with anyio.move_on_after(0.3):
        await heartbeat(transport, timeout=10)
    assert len(_wire(transport)) == 0
    assert transport._calls == 0 and not transport._prompt
    with anyio.fail_after(5):
        await server.reset.wait()
    assert server.resets == [ErrorCodes.CANCEL]


async def test_a_call_past_its_deadline_is_a_timeout_and_resets_its_stream(serve: Any) -> None:
    server, transport = await serve(lambda c, sid: None)
    with pytest.raises(RequestTimeoutError):
        await heartbeat(transport, timeout=0.3)
    assert len(_wire(transport)) == 0
    with anyio.fail_after(5):
        await server.reset.wait()


async def test_a_stream_reset_by_the_proxy_is_a_retriable_unavailable(serve: Any) -> None:
    def reset(c: _Conn, sid: int) -> None:
        c.h2.reset_stream(sid, ErrorCodes.REFUSED_STREAM)

    _, transport = await serve(reset)
    with pytest.raises(ProxyUnavailableError) as info:
        await heartbeat(transport)
    assert info.value.retriable
    assert len(_wire(transport)) == 0


async def test_a_trailers_only_error_answer_raises_its_grpc_status(serve: Any) -> None:
    def refuse(c: _Conn, sid: int) -> None:
        c.h2.send_headers(sid, [(":status", "200"), ("content-type", "application/grpc"),
                                ("grpc-status", "7"), ("grpc-message", "no%20way")],
                          end_stream=True)  # fmt: skip

    _, transport = await serve(refuse)
    with pytest.raises(GrpcStatusError) as info:
        await heartbeat(transport)
    assert (info.value.status, info.value.message) == (7, "no way")


async def test_resource_exhausted_in_the_trailers_is_retriable_throttling(serve: Any) -> None:
    _, transport = await serve(lambda c, sid: c.reply(sid, b"", status=8))
    with pytest.raises(ProxyResponseError) as info:
        await heartbeat(transport)
    assert info.value.retriable and info.value.name == "TOO_MANY_REQUESTS"


async def test_an_http_status_other_than_200_is_unavailable(serve: Any) -> None:
    def busy(c: _Conn, sid: int) -> None:
        c.h2.send_headers(sid, [(":status", "503")], end_stream=True)

    _, transport = await serve(busy)
    with pytest.raises(ProxyUnavailableError):
        await heartbeat(transport)


async def test_an_ok_answer_without_a_reply_says_so(serve: Any) -> None:
    def empty(c: _Conn, sid: int) -> None:
        c.h2.send_headers(sid, [(":status", "200"), ("content-type", "application/grpc")])
        c.h2.send_headers(sid, [("grpc-status", "0")], end_stream=True)

    _, transport = await serve(empty)
    with pytest.raises(ProxyUnavailableError, match="without reply"):
        await heartbeat(transport)


async def test_a_reply_over_the_limit_fails_the_call(serve: Any, monkeypatch: Any) -> None:
    monkeypatch.setattr(_unary, "MAX_REPLY", 100)
    _, transport = await serve(lambda c, sid: c.reply(sid, b"\x0a" + b"x" * 1000))
    with pytest.raises(GrpcStatusError, match="reply over 100 bytes"):
        await heartbeat(transport)
    assert len(_wire(transport)) == 0


async def test_a_request_bigger_than_the_window_waits_for_window_updates(serve: Any) -> None:
    """4 MiB against the default 64 KiB windows: sent in frames as WINDOW_UPDATEs come."""
    server, transport = await serve(lambda c, sid: c.reply(sid))
    body = bytes(range(256)) * (4 * 1024 * 4)
    resp = await transport.unary("Heartbeat", RawRequest(body), pb.HeartbeatResponse, timeout=10)
    assert resp.status.code == pb.Code.OK
    assert server.requests == [body]
    assert len(_wire(transport)) == 0


async def test_goaway_fails_the_calls_it_did_not_take_and_the_next_call_reconnects(
    serve: Any,
) -> None:
    """The calls above GOAWAY's last stream id were never seen by the Proxy: they fail
    at once, retriably; the next call opens a new connection."""

    def goaway(c: _Conn, sid: int) -> None:
        if len(c.server.connections) == 1:
            c.h2.close_connection(ErrorCodes.NO_ERROR, last_stream_id=0)
        else:
            c.reply(sid)

    server, transport = await serve(goaway)
    with pytest.raises(ProxyUnavailableError, match="GOAWAY") as info:
        await heartbeat(transport)
    assert info.value.retriable
    assert (await heartbeat(transport)).status.code == pb.Code.OK
    assert len(server.connections) == 2


async def test_a_call_goaway_covers_gets_its_answer_and_the_next_goes_on_a_new_connection(
    serve: Any,
) -> None:
    """A graceful GOAWAY (the Proxy shuts down, or rebalances): the calls up to its last
    stream id are answered on the old connection, no new call starts there, and the old
    connection is closed once they ended."""

    def goaway(c: _Conn, sid: int) -> None:
        if len(c.server.connections) == 1:
            c.transport.write(frame(GOAWAY, 0, 0, sid.to_bytes(4, "big") + bytes(4)))
        c.reply(sid)

    server, transport = await serve(goaway)
    assert (await heartbeat(transport)).status.code == pb.Code.OK
    first = server.connections[0]
    assert (await heartbeat(transport)).status.code == pb.Code.OK
    assert len(server.connections) == 2
    with anyio.fail_after(5):
        while not first.transport.is_closing():  # noqa: ASYNC110  (closed by the client)
            await anyio.sleep(0.01)


async def test_a_lost_connection_fails_the_call_and_the_next_call_reconnects(serve: Any) -> None:
    def drop(c: _Conn, sid: int) -> None:
        if len(c.server.connections) == 1:
            c.transport.abort()
        else:
            c.reply(sid)

    server, transport = await serve(drop)
    with pytest.raises(ProxyUnavailableError):
        await heartbeat(transport)
    assert (await heartbeat(transport)).status.code == pb.Code.OK
    assert len(server.connections) == 2


async def test_calls_wait_for_the_proxys_max_concurrent_streams(serve: Any) -> None:
    held: list[tuple[_Conn, int]] = []

    def one_at_a_time(c: _Conn, sid: int) -> None:
        held.append((c, sid))
        asyncio.get_running_loop().call_later(0.02, answer_held)

    def answer_held() -> None:
        c, sid = held.pop(0)
        c.reply(sid)
        c.flush()

    server, transport = await serve(
        one_at_a_time, settings={SettingCodes.MAX_CONCURRENT_STREAMS: 1}
    )
    await heartbeat(transport)  # the server's settings are known from here on
    async with anyio.create_task_group() as tg:
        for _ in range(5):
            tg.start_soon(heartbeat, transport)
    assert server.most_open == 1
    assert len(server.requests) == 6


async def test_the_replies_bytes_are_handed_back_to_the_connections_window(serve: Any) -> None:
    """Six replies of 1 MiB are past the client's 4 MiB connection window (grpclib's
    default): the server can send them only if each reply's bytes were handed back."""
    big = bytes(pb.HeartbeatResponse(status=pb.Status(code=pb.Code.OK, message="x" * 2**20)))
    server, transport = await serve(lambda c, sid: c.reply(sid, big))
    for _ in range(6):
        resp = await heartbeat(transport)
        assert len(resp.status.message) == 2**20
    assert len(server.connections) == 1


# -- the frames one by one (``aiorocket.grpc._h2wire``) ----------------------------------


async def test_the_servers_settings_are_acknowledged_and_honoured(serve: Any) -> None:
    """HEADER_TABLE_SIZE 0 (the encoder may index nothing: h2's decoder refuses a block
    that does), MAX_FRAME_SIZE 64 KiB (a 40 KiB request in one DATA frame), and the
    client's SETTINGS ACK reaches the server."""
    server, transport = await serve(
        lambda c, sid: c.reply(sid),
        settings={SettingCodes.HEADER_TABLE_SIZE: 0, SettingCodes.MAX_FRAME_SIZE: 65536},
    )
    await heartbeat(transport)  # the server's settings are known from here on
    body = b"x" * 40_000
    for _ in range(3):
        resp = await transport.unary("Heartbeat", RawRequest(body), pb.HeartbeatResponse)
        assert resp.status.code == pb.Code.OK
    assert server.requests[1:] == [body] * 3
    conn = server.connections[0]
    assert conn.settings_acked
    assert max(conn.data_frames) == 40_005  # one frame: 5 bytes of gRPC framing + body
    assert conn.h2.decoder.header_table.maxsize == 0


async def test_a_small_initial_window_holds_a_request_to_it(serve: Any) -> None:
    """INITIAL_WINDOW_SIZE 1,000: a 5,000-byte request goes out in frames of at most the
    window, each after the server's WINDOW_UPDATE (h2 would refuse more)."""
    server, transport = await serve(
        lambda c, sid: c.reply(sid), settings={SettingCodes.INITIAL_WINDOW_SIZE: 1000}
    )
    await heartbeat(transport)
    body = bytes(range(250)) * 20
    resp = await transport.unary("Heartbeat", RawRequest(body), pb.HeartbeatResponse)
    assert resp.status.code == pb.Code.OK
    assert server.requests[-1] == body
    assert max(server.connections[0].data_frames) <= 1000


async def test_an_answer_in_headers_and_continuation_frames_is_read(serve: Any) -> None:
    """Trailers over the 16 KiB frame size come as HEADERS and CONTINUATION frames."""
    message = "m" * 40_000

    def refuse(c: _Conn, sid: int) -> None:
        c.h2.send_headers(sid, [(":status", "200"), ("content-type", "application/grpc")])
        c.h2.send_headers(sid, [("grpc-status", "7"), ("grpc-message", message)],
                          end_stream=True)  # fmt: skip

    _, transport = await serve(refuse)
    with pytest.raises(GrpcStatusError) as info:
        await heartbeat(transport)
    assert info.value.message == message
    assert (await _ok_after(transport)) is None


async def _ok_after(transport: GrpcTransport) -> None:
    """The connection is still in step (its HPACK table included): no error."""
    assert len(_wire(transport)) == 0 and _wire(transport).usable()


async def test_request_headers_past_the_frame_size_go_in_continuation_frames(
    serve: Any,
) -> None:
    token = "t" * 40_000
    server, transport = await serve(
        lambda c, sid: c.reply(sid), client={"credentials": Credentials("ak", "sk", token)}
    )
    for _ in range(2):
        await heartbeat(transport)
    assert [h["x-mq-session-token"] for h in server.headers] == [token, token]


async def test_the_servers_ping_is_answered(serve: Any) -> None:
    def ping_then_reply(c: _Conn, sid: int) -> None:
        c.h2.ping(b"12345678")
        c.reply(sid)

    server, transport = await serve(ping_then_reply)
    await heartbeat(transport)
    with anyio.fail_after(5):
        await server.ping_acked.wait()
    assert server.connections[0].ping_acks == [b"12345678"]


async def test_a_silent_connection_is_abandoned_by_its_keepalive_and_replaced(
    serve: Any,
) -> None:
    """The server stops reading and writing (half-open): the call's PING goes
    unanswered, the connection is dropped, the call fails retriably long before its
    deadline, and the next call opens a new connection."""

    def stall(c: _Conn, sid: int) -> None:
        if len(c.server.connections) == 1:
            c.transport.pause_reading()
            c.transport.write = lambda data: None
        else:
            c.reply(sid)

    server, transport = await serve(
        stall, client={"keepalive": KeepaliveSettings(interval=0.2, timeout=0.2)}
    )
    # The keepalive ends it (ProxyUnavailableError), not its deadline (a
    # RequestTimeoutError, 120 s away; 60 s is a hang's guard). Before: `< 3` s of wall
    # clock against a 10 s deadline.
    with anyio.fail_after(60), pytest.raises(ProxyUnavailableError) as info:
        await heartbeat(transport, timeout=120)
    assert info.value.retriable
    keepalive = _wire(transport).keepalive
    assert keepalive is not None and keepalive.abandoned and keepalive.pings == 1
    assert (await heartbeat(transport)).status.code == pb.Code.OK
    assert len(server.connections) == 2


async def test_a_server_that_breaks_the_protocol_loses_the_connection(serve: Any) -> None:
    """DATA on stream 0: the client answers GOAWAY PROTOCOL_ERROR, the call fails
    retriably, the next call opens a new connection."""

    def broken(c: _Conn, sid: int) -> None:
        if len(c.server.connections) == 1:
            c.transport.write(frame(0, 0, 0, b"xx"))
        else:
            c.reply(sid)

    server, transport = await serve(broken)
    with pytest.raises(ProxyUnavailableError, match="Protocol error"):
        await heartbeat(transport)
    assert (await heartbeat(transport)).status.code == pb.Code.OK
    assert len(server.connections) == 2
    assert server.connections[0].goaway == ErrorCodes.PROTOCOL_ERROR


async def test_closing_the_transport_fails_the_open_call_and_closes_the_connection(
    serve: Any,
) -> None:
    server, transport = await serve(lambda c, sid: None)
    async with anyio.create_task_group() as tg:

        async def call() -> None:
            with pytest.raises(ProxyUnavailableError, match="closed"):
                await heartbeat(transport, timeout=10)

        tg.start_soon(call)
        with anyio.fail_after(5):
            while not server.requests:  # noqa: ASYNC110
                await anyio.sleep(0.01)
        wire = _wire(transport)
        transport.close()
    assert wire.raw.is_closing() and len(wire) == 0


@pytest.mark.parametrize("alpn", [["h2"], None], ids=["h2", "no-alpn"])
async def test_unary_calls_over_tls(serve: Any, tmp_path: Any, alpn: Any) -> None:
    """The unary calls' connection is TLS when the transport is (verified against the
    CA given), and refuses a server that does not agree to HTTP/2 over ALPN, as grpclib
    does: ``ProxyUnavailableError``."""
    pki = make_pki(tmp_path)
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(pki.server_cert, pki.server_key)
    if alpn:
        ctx.set_alpn_protocols(alpn)
    server, transport = await serve(
        lambda c, sid: c.reply(sid), ssl=ctx, client={"tls": str(pki.ca_cert)}
    )
    if alpn:
        assert (await heartbeat(transport)).status.code == pb.Code.OK
        assert server.headers[0][":scheme"] == "https"
        assert _wire(transport).raw.get_extra_info("ssl_object") is not None
    else:
        with pytest.raises(ProxyUnavailableError, match="ALPN"):
            await heartbeat(transport)


async def test_an_answer_before_the_whole_request_resets_the_rest(serve: Any) -> None:
    """The server answers (and ends its side) while the request still waits for its
    window: the call has its answer, and the stream is reset (the rest is not sent)."""

    def early(c: _Conn, sid: int) -> None:  # answered at the request's headers
        c.reply(sid)

    server, transport = await serve(
        lambda c, sid: c.reply(sid), settings={SettingCodes.INITIAL_WINDOW_SIZE: 1000}
    )
    await heartbeat(transport)  # the server's settings are known from here on
    server.requests.clear()
    server.on_request = early
    server.answer = lambda c, sid: None
    body = b"y" * 50_000
    resp = await transport.unary("Heartbeat", RawRequest(body), pb.HeartbeatResponse)
    assert resp.status.code == pb.Code.OK
    with anyio.fail_after(5):
        await server.reset.wait()
    assert server.resets == [ErrorCodes.CANCEL] and not server.requests
    assert len(_wire(transport)) == 0 and _wire(transport).usable()
