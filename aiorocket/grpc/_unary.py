"""Unary calls driven on the connection's h2 state machine directly, beside grpclib.

A single-message send is one unary call, and under grpclib half of its CPU went to
per-call machinery a unary call does not need (benchmarks/README.md, goal 5a): a
``client.Stream`` (deadline wrapper, metadata MultiDicts, event dispatch coroutines), a
``protocol.Stream`` (a read buffer and four asyncio Events), a second timer for
grpclib's own deadline, and a task wake-up for each of the answer's headers, data and
trailers. ``UnaryCalls`` keeps one plain record and one future per call: it opens the
stream with one HEADERS (``h2.send_headers`` given the block ``StableHeaderEncoder``
encodes: ``_hpack.LazyBlock``), puts
the whole request in the DATA that ends the stream, and routes the stream's events from
the connection's event dispatch (``_CoalescingProtocol.data_received``) into the record;
the future is settled once, when the stream ends or breaks, and the caller reads the
answer from the record. grpclib keeps every other stream on the same connection
(ReceiveMessage, Telemetry) and the connection itself (connecting, reconnecting, GOAWAY).

What grpclib's path did and this one keeps: it waits while the transport is paused
(``write_ready``), while the Proxy's ``max_concurrent_streams`` are all open (the same
``stream_close_waiter`` grpclib's streams wait on, set whenever a call ends), and while a
request bigger than the peer's flow-control window waits for WINDOW_UPDATE; a call
that is left (cancelled, timed out, failed) resets its stream if it is still open; every
received DATA byte is handed back to the connection's window. Errors are grpclib's
(``GRPCError``, ``StreamTerminatedError``), so ``GrpcTransport._mapped`` maps them as it
always has.
"""

from __future__ import annotations

import asyncio
from typing import Any, TypeVar

from grpclib.client import _H2_TO_GRPC_STATUS_MAP
from grpclib.const import Status
from grpclib.exceptions import GRPCError, StreamTerminatedError
from grpclib.metadata import decode_grpc_message
from grpclib.protocol import Connection
from h2.errors import ErrorCodes
from h2.events import (
    ConnectionTerminated,
    DataReceived,
    Event,
    RemoteSettingsChanged,
    ResponseReceived,
    StreamEnded,
    StreamReset,
    TrailersReceived,
    WindowUpdated,
)
from h2.exceptions import TooManyStreamsError

from aiorocket.grpc._hpack import BLOCK, LazyBlock

__all__ = ["MAX_REPLY", "UnaryCall", "UnaryCalls", "reply_of"]

#: The largest reply accepted (bytes of the gRPC message): a bigger one fails the call
#: instead of growing the buffer without bound. The Proxy's unary answers are a few KiB.
MAX_REPLY = 64 * 1024 * 1024

Rep = TypeVar("Rep")


class UnaryCall:
    """One unary call's answer, filled by ``UnaryCalls.route``."""

    __slots__ = ("data", "done", "headers", "size", "trailers", "window")

    def __init__(self, done: asyncio.Future[None]) -> None:
        #: settled once: when the stream ended (result) or broke (exception)
        self.done = done
        self.headers: list[tuple[str, str]] | None = None
        self.trailers: list[tuple[str, str]] | None = None
        self.data: list[bytes] = []
        self.size = 0
        #: set while the request waits for the peer's flow-control window
        self.window: asyncio.Future[None] | None = None


def _fail(call: UnaryCall, exc: BaseException) -> None:
    if not call.done.done():
        call.done.set_exception(exc)
    _wake(call)


def _wake(call: UnaryCall) -> None:
    window = call.window
    if window is not None and not window.done():
        window.set_result(None)


class UnaryCalls:
    """The unary calls of one grpclib ``Connection`` (see the module docstring)."""

    def __init__(self, connection: Connection) -> None:
        self._connection = connection
        self._h2 = connection._connection
        self._transport: Any = connection._transport
        self._loop = asyncio.get_running_loop()
        self._calls: dict[int, UnaryCall] = {}
        #: why the connection can carry no more calls (lost, GOAWAY), once it cannot
        self._lost: str | None = None

    def __len__(self) -> int:
        return len(self._calls)

    def route(self, events: list[Event]) -> list[Event]:
        """Take the events of this connection's unary calls; return the rest (grpclib's)."""
        calls = self._calls
        if not calls:
            return events
        rest: list[Event] = []
        for event in events:
            kind = type(event)
            call = calls.get(getattr(event, "stream_id", 0) or 0)
            if call is None:
                if kind is WindowUpdated or kind is RemoteSettingsChanged:
                    for waiting in calls.values():
                        _wake(waiting)
                elif kind is ConnectionTerminated:
                    code = getattr(event, "error_code", None)
                    self.close(f"Received GOAWAY frame, closing connection; error_code: {code}")
                rest.append(event)
            elif kind is DataReceived:
                self._data(call, event)  # type: ignore[arg-type]
            elif kind is ResponseReceived:
                call.headers = event.headers  # type: ignore[attr-defined]
            elif kind is TrailersReceived:
                call.trailers = event.headers  # type: ignore[attr-defined]
            elif kind is StreamEnded:
                if not call.done.done():
                    call.done.set_result(None)
                _wake(call)
            elif kind is StreamReset:
                _fail(call, StreamTerminatedError(_reset_reason(event)))
            elif kind is WindowUpdated:
                _wake(call)
        return rest

    def _data(self, call: UnaryCall, event: DataReceived) -> None:
        data = event.data or b""
        call.size += len(data)
        if call.size > MAX_REPLY + 5:
            _fail(call, GRPCError(Status.INTERNAL, f"reply over {MAX_REPLY} bytes"))
        else:
            call.data.append(data)
        # Handed back at once: h2 sends WINDOW_UPDATE once enough has been handed back.
        if event.flow_controlled_length:
            self._h2.acknowledge_received_data(event.flow_controlled_length, event.stream_id)

    def close(self, reason: str) -> None:
        """The connection is gone (or going): every call fails with ``reason``."""
        if self._lost is None:
            self._lost = reason
        for call in self._calls.values():
            _fail(call, StreamTerminatedError(reason))

    async def call(self, headers: list[tuple[bytes, bytes]], request: bytes) -> UnaryCall:
        """Send ``request`` (one gRPC message) on a new stream; the answer when it ended."""
        conn = self._connection
        h2 = self._h2
        call = UnaryCall(self._loop.create_future())
        # h2's encoder is a StableHeaderEncoder (_CoalescingProtocol.connection_made)
        block: Any = [(BLOCK, LazyBlock(h2.encoder, headers))]  # type: ignore[arg-type]
        while True:
            if not conn.write_ready.is_set():
                await conn.write_ready.wait()
            if self._lost is not None:
                raise StreamTerminatedError(self._lost)
            # No await between picking the id and sending the headers (h2's rule).
            stream_id = h2.get_next_available_stream_id()
            try:
                h2.send_headers(stream_id, block)
            except TooManyStreamsError:
                # The Proxy's max_concurrent_streams are all open: wait for one to end
                # (any call's, ours or grpclib's, sets it), as grpclib's streams do.
                conn.stream_close_waiter.clear()
                await conn.stream_close_waiter.wait()
                continue
            break
        self._calls[stream_id] = call
        try:
            message = b"\x00" + len(request).to_bytes(4, "big") + request
            size = len(message)
            if size <= h2.max_outbound_frame_size and size <= h2.local_flow_control_window(
                stream_id
            ):
                h2.send_data(stream_id, message, end_stream=True)
                self._transport.write(h2.data_to_send())
            else:
                self._transport.write(h2.data_to_send())
                await self._send_flow_controlled(stream_id, call, message)
            await call.done
            return call
        finally:
            del self._calls[stream_id]
            self._release(stream_id)

    async def _send_flow_controlled(self, stream_id: int, call: UnaryCall, message: bytes) -> None:
        """Send ``message`` in frames as the peer's window allows, waiting for it."""
        conn = self._connection
        h2 = self._h2
        sent, total = 0, len(message)
        while sent < total and not call.done.done():
            window = h2.local_flow_control_window(stream_id)
            if window <= 0:
                call.window = self._loop.create_future()
                await call.window
                call.window = None
                continue
            if not conn.write_ready.is_set():
                await conn.write_ready.wait()
                continue
            end = sent + min(window, h2.max_outbound_frame_size, total - sent)
            h2.send_data(stream_id, message[sent:end], end_stream=end == total)
            sent = end
            self._transport.write(h2.data_to_send())
        if self._lost is not None and not call.done.done():
            raise StreamTerminatedError(self._lost)

    def _release(self, stream_id: int) -> None:
        """The call is over: reset its stream if still open (left midway, or the Proxy
        answered before the request was sent in full), and let a waiting call open one."""
        self._connection.stream_close_waiter.set()
        if self._lost is not None or self._transport.is_closing():
            return
        stream = self._h2.streams.get(stream_id)
        if stream is None or stream.closed:
            return
        try:
            self._h2.reset_stream(stream_id, ErrorCodes.CANCEL)
        except Exception:  # the connection broke meanwhile: nothing to reset
            return
        self._transport.write(self._h2.data_to_send())


def _reset_reason(event: Any) -> str:
    """grpclib's words for a reset stream."""
    if event.remote_reset:
        return f"Stream reset by remote party, error_code: {event.error_code}"
    return "Protocol error"


def reply_of(call: UnaryCall, reply_type: type[Rep]) -> Rep | None:
    """The reply of an ended call (None when it carried none), or the ``GRPCError`` its
    HTTP status, content type or gRPC status says (trailers, or a trailers-only answer),
    as grpclib's ``client.Stream`` reads them."""
    headers = dict(call.headers or ())
    http = headers.get(":status")
    if http != "200":
        status = _H2_TO_GRPC_STATUS_MAP.get(http or "", Status.UNKNOWN)
        raise GRPCError(status, f"Received :status = {http!r}")
    content_type = headers.get("content-type")
    if content_type is None:
        raise GRPCError(Status.UNKNOWN, "Missing content-type header")
    base, _, subtype = content_type.partition("+")
    if base != "application/grpc" or subtype not in ("", "proto"):
        raise GRPCError(Status.UNKNOWN, f"Invalid content-type: {content_type!r}")
    meta = headers if "grpc-status" in headers else dict(call.trailers or ())
    raw = meta.get("grpc-status")
    if raw is None:
        raise GRPCError(Status.UNKNOWN, "Missing grpc-status header")
    try:
        status = Status(int(raw))
    except ValueError:
        raise GRPCError(Status.UNKNOWN, f"Invalid grpc-status: {raw!r}") from None
    if status is not Status.OK:
        message = meta.get("grpc-message")
        raise GRPCError(status, None if message is None else decode_grpc_message(message))
    data = call.data[0] if len(call.data) == 1 else b"".join(call.data)
    if not data:
        return None
    if data[0]:
        raise GRPCError(Status.INTERNAL, "a compressed reply (no compression was offered)")
    length = int.from_bytes(data[1:5], "big")
    if len(data) < 5 + length:
        raise GRPCError(Status.INTERNAL, f"a reply cut short: {len(data) - 5} of {length} bytes")
    reply: Rep = reply_type.FromString(data[5 : 5 + length])  # type: ignore[attr-defined]
    return reply
