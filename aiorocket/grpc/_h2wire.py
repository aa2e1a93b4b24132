"""The unary calls' own HTTP/2 connection: the client side of RFC 9113 as they need it.

A single-message send is one unary call, and through h2 and hyperframe its framing cost
~40% of the call's CPU (benchmarks/README.md, goal 5a): a stream state machine per call,
a ``Frame`` and a ``Flags`` object per frame both ways, a scan of every open stream on
each new one. ``WireConnection`` frames the calls itself: a call is one HEADERS (plus
CONTINUATIONs if the block outgrows a frame) and the DATA that ends the stream, packed
with ``struct``; the answer's frames are walked by offset and go straight into the call's
record (``_unary.UnaryCall``).

It is a connection of its own per Proxy endpoint, beside grpclib's (which keeps the
session stream, Telemetry): the HPACK tables and the flow-control windows are per
connection state, and on a shared connection h2 would have to see, and decode, every
frame anyway. The server-streaming ReceiveMessage runs here too (``open``/``leave``, read
by ``aiorocket.grpc._h2stream``): its DATA is given back to the windows as it arrives,
and what its reader has not taken yet is bounded as a unary reply is (``MAX_REPLY``).

What it does (the frames a unary client meets): the preface and the SETTINGS exchange
(theirs acknowledged; MAX_CONCURRENT_STREAMS, INITIAL_WINDOW_SIZE, MAX_FRAME_SIZE and
HEADER_TABLE_SIZE honoured); DATA split by the peer's frame size and held to both of its
flow-control windows (a request past them waits for WINDOW_UPDATE); received DATA given
back to our windows; RST_STREAM both ways (a call left midway resets its stream); PING
(theirs answered, ours sent by the ``Keepalive``); GOAWAY (the calls above its last
stream id fail at once, retriably; the rest may finish; no new call starts on it);
a peer that breaks the protocol gets GOAWAY and loses the connection. Errors are the ones
grpclib's path raised (``StreamTerminatedError``, ``GRPCError``), so
``GrpcTransport._mapped`` maps them unchanged.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Callable
from typing import Any

from grpclib.const import Status
from grpclib.exceptions import GRPCError, StreamTerminatedError
from h2.errors import ErrorCodes
from hpack import HPACKError

from aiorocket.grpc import _unary
from aiorocket.grpc._channel import CoalescingTransport
from aiorocket.grpc._hpack import RepeatingBlockDecoder, StableHeaderEncoder
from aiorocket.grpc._keepalive import Keepalive, KeepaliveSettings
from aiorocket.grpc._unary import UnaryCall

__all__ = ["WireCall", "WireConnection"]

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
# frame types (RFC 9113 section 6)
DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE = 0, 1, 2, 3, 4, 5
PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = 6, 7, 8, 9
# flags
END_STREAM, ACK, END_HEADERS, PADDED, PRIORITY_FLAG = 0x1, 0x1, 0x4, 0x8, 0x20
# settings
S_HEADER_TABLE_SIZE, S_ENABLE_PUSH, S_MAX_CONCURRENT_STREAMS = 1, 2, 3
S_INITIAL_WINDOW_SIZE, S_MAX_FRAME_SIZE = 4, 5

_HEAD = struct.Struct(">HBBBI")  # length as 16 + 8 bits, type, flags, stream id
_U32 = struct.Struct(">I")
_U32x2 = struct.Struct(">II")
_SETTING = struct.Struct(">HI")
_MAX_WINDOW = 2**31 - 1
_MAX_STREAM_ID = 2**31 - 1
#: our receive windows (stream and connection), as grpclib's default configuration
RECEIVE_WINDOW = 4 * 1024 * 1024
#: the largest frame we take (our SETTINGS_MAX_FRAME_SIZE: the RFC's default)
MAX_FRAME_IN = 16384
#: the largest header list we decode (as h2's default)
MAX_HEADER_LIST = 65536


def frame(kind: int, flags: int, stream_id: int, payload: bytes = b"") -> bytes:
    """One frame: its 9-byte head and ``payload``."""
    n = len(payload)
    return _HEAD.pack(n >> 8, n & 0xFF, kind, flags, stream_id) + payload


class ConnectionError_(Exception):
    """The peer broke the protocol: the connection ends with GOAWAY ``code``."""

    def __init__(self, code: ErrorCodes, why: str) -> None:
        super().__init__(why)
        self.code = code


class WireCall:
    """A call's stream as the connection keeps it."""

    __slots__ = ("answer", "answered", "ended", "id", "received", "sent_all", "window")

    def __init__(self, stream_id: int, answer: UnaryCall, window: int) -> None:
        self.id = stream_id
        self.answer = answer
        #: the peer's flow-control window of this stream (what we may still send)
        self.window = window
        self.sent_all = False
        #: no frame of ours may follow: the peer reset it, or we did, or the connection broke
        self.ended = False
        #: the peer ended its side (END_STREAM)
        self.answered = False
        #: DATA bytes received on the stream and not yet given back
        self.received = 0


class WireConnection(asyncio.Protocol):
    """One HTTP/2 connection that carries unary calls (see the module docstring).

    ``keepalive``: watch the connection while ``busy()`` (None: never); ``busy`` and
    ``waiting_since`` as ``Keepalive`` takes them. ``busy`` is the transport's (any call
    open, its streams' included), not this connection's own: a half-open path is then
    noticed while the client's session stream is open, before the next unary call
    waits on it (the simulator's grpc_lite seed 50: the calls of a close waited out
    the PING's bound instead, and what the client held was not released in time).
    """

    def __init__(
        self,
        *,
        keepalive: KeepaliveSettings | None = None,
        busy: Callable[[], bool] | None = None,
        waiting_since: Callable[[], float | None] = lambda: None,
        abandoned: Callable[[], None] = lambda: None,
    ) -> None:
        self._loop = asyncio.get_running_loop()
        self._abandoned = abandoned
        self._keepalive_settings = keepalive
        self._busy = busy if busy is not None else lambda: bool(self._calls)
        self._waiting_since = waiting_since
        self.keepalive: Keepalive | None = None
        self.raw: asyncio.Transport | None = None
        self._out: Any = None  # CoalescingTransport once connected
        self._encoder = StableHeaderEncoder()
        self._decoder = RepeatingBlockDecoder()
        self._decoder.max_header_list_size = MAX_HEADER_LIST
        self._buffer = b""
        self._calls: dict[int, WireCall] = {}
        self._next_id = 1
        # the peer's settings (RFC defaults until its SETTINGS come)
        self._max_streams = 2**31
        self._initial_window = 65535
        self._max_frame = 16384
        self._send_window = 65535  # the peer's connection window
        self._received = 0  # connection-level DATA bytes not yet given back
        #: a header block whose CONTINUATION frames are still to come: (stream, flags, parts)
        self._pending: tuple[int, int, list[bytes]] | None = None
        #: calls waiting for a stream slot, a window, or the transport to drain
        self._waiters: list[asyncio.Future[None]] = []
        self._paused = False
        #: the peer broke the protocol: nothing more is read
        self._failed = False
        #: closed once its calls ended (GOAWAY, ``retire``)
        self._draining = False
        #: why no new call may start here (lost, GOAWAY, closed), once none may
        self.lost: str | None = None
        #: the highest stream id the peer said it processes (GOAWAY), once it said so
        self.goaway: int | None = None

    def __len__(self) -> int:
        return len(self._calls)

    # -- asyncio.Protocol ----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        raw = self.raw = transport  # type: ignore[assignment]
        self._out = CoalescingTransport(raw)  # type: ignore[arg-type]
        settings = b"".join(
            _SETTING.pack(k, v)
            for k, v in (
                (S_ENABLE_PUSH, 0),
                (S_INITIAL_WINDOW_SIZE, RECEIVE_WINDOW),
                (S_MAX_FRAME_SIZE, MAX_FRAME_IN),
            )
        )
        self._out.write(
            PREFACE + frame(SETTINGS, 0, 0, settings)
            + frame(WINDOW_UPDATE, 0, 0, _U32.pack(RECEIVE_WINDOW - 65535))
        )  # fmt: skip
        if self._keepalive_settings is not None:
            self.keepalive = Keepalive(
                self._keepalive_settings, self._busy, self.ping,
                raw.abort, peer=str(raw.get_extra_info("peername")),  # type: ignore[attr-defined]
                waiting_since=self._waiting_since, abandoned=self._abandoned,
            )  # fmt: skip

    def connection_lost(self, exc: BaseException | None) -> None:
        if self.keepalive is not None:
            self.keepalive.stop()
        self._lose("Connection lost")

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        self._wake()

    def data_received(self, data: bytes) -> None:
        if self._failed:
            return
        buffer = self._buffer + data if self._buffer else data
        end = len(buffer)
        pos = 0
        answer = False
        try:
            while end - pos >= 9:
                hi, lo, kind, flags, stream_id = _HEAD.unpack_from(buffer, pos)
                length = (hi << 8) | lo
                if length > MAX_FRAME_IN:
                    raise ConnectionError_(ErrorCodes.FRAME_SIZE_ERROR, "frame too large")
                if end - pos - 9 < length:
                    break
                payload = buffer[pos + 9 : pos + 9 + length]
                pos += 9 + length
                stream_id &= 0x7FFFFFFF
                if self._pending is not None and kind != CONTINUATION:
                    raise ConnectionError_(ErrorCodes.PROTOCOL_ERROR, "CONTINUATION expected")
                if kind == DATA:
                    answer = True
                    self._data(stream_id, flags, payload)
                elif kind == HEADERS:
                    answer = True
                    self._headers(stream_id, flags, payload)
                else:
                    self._control(kind, flags, stream_id, payload)
        except ConnectionError_ as exc:
            self._fail_connection(exc.code, str(exc))
            return
        self._buffer = buffer[pos:]
        if self.keepalive is not None:
            self.keepalive.heard(answer=answer)

    # -- frames in -----------------------------------------------------------------------

    def _data(self, stream_id: int, flags: int, payload: bytes) -> None:
        if not stream_id:
            raise ConnectionError_(ErrorCodes.PROTOCOL_ERROR, "DATA on stream 0")
        size = len(payload)  # padding included: it counts against the windows
        if flags & PADDED:
            pad = payload[0] if payload else 256
            if pad >= size:
                raise ConnectionError_(ErrorCodes.PROTOCOL_ERROR, "padding too long")
            payload = payload[1 : size - pad]
        self._received += size
        if self._received >= RECEIVE_WINDOW // 2:
            self._out.write(frame(WINDOW_UPDATE, 0, 0, _U32.pack(self._received)))
            self._received = 0
        call = self._calls.get(stream_id)
        if call is None or call.ended:
            return  # a stream we left (reset): its bytes went back to the connection
        answer = call.answer
        if answer.headers is None:
            self._reset(call, ErrorCodes.PROTOCOL_ERROR, "Protocol error")
            return
        answer.size += len(payload)
        answer.data.append(payload)  # ``size`` says what ``data`` holds (the reader's)
        if answer.size > _unary.MAX_REPLY + 5:
            # Kept (a frame over the bound at most): a streaming reader takes the whole
            # messages in it and before it, then this error.
            self._reset(call, ErrorCodes.CANCEL, None)
            _unary.fail(answer, GRPCError(Status.INTERNAL, f"reply over {_unary.MAX_REPLY} bytes"))
            return
        if flags & END_STREAM:
            self._ended(call)
            return
        if answer.waiter is not None:  # a streaming call's reader waits for it
            _unary.notify(answer)
        if size:
            call.received += size
            if call.received >= RECEIVE_WINDOW // 2:
                self._out.write(frame(WINDOW_UPDATE, 0, stream_id, _U32.pack(call.received)))
                call.received = 0

    def _headers(self, stream_id: int, flags: int, payload: bytes) -> None:
        if not stream_id:
            raise ConnectionError_(ErrorCodes.PROTOCOL_ERROR, "HEADERS on stream 0")
        start, end = 0, len(payload)
        if flags & PADDED:
            if not payload:
                raise ConnectionError_(ErrorCodes.PROTOCOL_ERROR, "padding too long")
            start, end = 1, end - payload[0]
        if flags & PRIORITY_FLAG:
            start += 5
        if start > end:
            raise ConnectionError_(ErrorCodes.PROTOCOL_ERROR, "padding too long")
        block = payload[start:end]
        if flags & END_HEADERS:
            self._block(stream_id, flags, block)
        else:
            self._pending = (stream_id, flags, [block])

    def _continuation(self, stream_id: int, flags: int, payload: bytes) -> None:
        pending = self._pending
        if pending is None or pending[0] != stream_id:
            raise ConnectionError_(ErrorCodes.PROTOCOL_ERROR, "unexpected CONTINUATION")
        pending[2].append(payload)
        if sum(map(len, pending[2])) > MAX_HEADER_LIST * 2:
            raise ConnectionError_(ErrorCodes.ENHANCE_YOUR_CALM, "header block too large")
        if flags & END_HEADERS:
            self._pending = None
            self._block(stream_id, pending[1], b"".join(pending[2]))

    def _block(self, stream_id: int, flags: int, block: bytes) -> None:
        """A whole header block: decoded whatever its stream (the HPACK table is the
        connection's), then given to its call."""
        try:
            headers = self._decoder.decode(block)
        except HPACKError as exc:
            raise ConnectionError_(ErrorCodes.COMPRESSION_ERROR, f"HPACK: {exc}") from None
        call = self._calls.get(stream_id)
        if call is None or call.ended:
            return
        answer = call.answer
        if answer.headers is None:
            status = next((v for k, v in headers if k == ":status"), "")
            if status.startswith("1") and not flags & END_STREAM:
                return  # an informational answer: the real one follows
            answer.headers = headers
            if answer.waiter is not None:
                _unary.notify(answer)
        elif flags & END_STREAM:
            answer.trailers = headers
        else:
            self._reset(call, ErrorCodes.PROTOCOL_ERROR, "Protocol error")
            return
        if flags & END_STREAM:
            self._ended(call)

    def _ended(self, call: WireCall) -> None:
        call.ended = call.answered = True
        answer = call.answer
        if not answer.done.done():
            answer.done.set_result(None)
        if answer.waiter is not None:
            _unary.notify(answer)
        self._wake()

    def _control(self, kind: int, flags: int, stream_id: int, payload: bytes) -> None:
        if kind == SETTINGS:
            if stream_id:
                raise ConnectionError_(ErrorCodes.PROTOCOL_ERROR, "SETTINGS on a stream")
            if flags & ACK:
                return
            if len(payload) % 6:
                raise ConnectionError_(ErrorCodes.FRAME_SIZE_ERROR, "SETTINGS size")
            self._settings(payload)
            self._out.write(frame(SETTINGS, ACK, 0))
        elif kind == WINDOW_UPDATE:
            if len(payload) != 4:
                raise ConnectionError_(ErrorCodes.FRAME_SIZE_ERROR, "WINDOW_UPDATE size")
            increment = _U32.unpack(payload)[0] & 0x7FFFFFFF
            self._window_update(stream_id, increment)
        elif kind == PING:
            if stream_id or len(payload) != 8:
                raise ConnectionError_(ErrorCodes.PROTOCOL_ERROR, "bad PING")
            if not flags & ACK:
                self._out.write(frame(PING, ACK, 0, payload))
        elif kind == RST_STREAM:
            if not stream_id or len(payload) != 4:
                raise ConnectionError_(ErrorCodes.PROTOCOL_ERROR, "bad RST_STREAM")
            call = self._calls.get(stream_id)
            if call is not None and not call.ended:
                call.ended = True
                code = _code(_U32.unpack(payload)[0])
                why = f"Stream reset by remote party, error_code: {code}"
                _unary.fail(call.answer, StreamTerminatedError(why))
                self._wake()
        elif kind == GOAWAY:
            if stream_id or len(payload) < 8:
                raise ConnectionError_(ErrorCodes.PROTOCOL_ERROR, "bad GOAWAY")
            last, code = _U32x2.unpack_from(payload)
            self._goaway(last & 0x7FFFFFFF, _code(code))
        elif kind == CONTINUATION:
            self._continuation(stream_id, flags, payload)
        elif kind == PUSH_PROMISE:
            raise ConnectionError_(ErrorCodes.PROTOCOL_ERROR, "PUSH_PROMISE (push is off)")
        # PRIORITY and unknown frame types are ignored (RFC 9113 sections 5.3.2, 4.1)

    def _settings(self, payload: bytes) -> None:
        for pos in range(0, len(payload), 6):
            key, value = _SETTING.unpack_from(payload, pos)
            if key == S_HEADER_TABLE_SIZE:
                self._encoder.header_table_size = value
            elif key == S_MAX_CONCURRENT_STREAMS:
                self._max_streams = value
            elif key == S_INITIAL_WINDOW_SIZE:
                if value > _MAX_WINDOW:
                    raise ConnectionError_(ErrorCodes.FLOW_CONTROL_ERROR, "window too large")
                delta = value - self._initial_window
                self._initial_window = value
                for call in self._calls.values():
                    call.window += delta
            elif key == S_MAX_FRAME_SIZE:
                if not 16384 <= value <= 16777215:
                    raise ConnectionError_(ErrorCodes.PROTOCOL_ERROR, "bad MAX_FRAME_SIZE")
                self._max_frame = value
            elif key == S_ENABLE_PUSH and value > 1:
                raise ConnectionError_(ErrorCodes.PROTOCOL_ERROR, "bad ENABLE_PUSH")
        self._wake()

    def _window_update(self, stream_id: int, increment: int) -> None:
        if not stream_id:
            if not increment:
                raise ConnectionError_(ErrorCodes.PROTOCOL_ERROR, "WINDOW_UPDATE of 0")
            self._send_window += increment
            if self._send_window > _MAX_WINDOW:
                raise ConnectionError_(ErrorCodes.FLOW_CONTROL_ERROR, "window overflow")
        else:
            call = self._calls.get(stream_id)
            if call is None or call.ended:
                return
            if not increment or call.window + increment > _MAX_WINDOW:
                self._reset(call, ErrorCodes.FLOW_CONTROL_ERROR, "Protocol error")
                return
            call.window += increment
        self._wake()

    def _goaway(self, last: int, code: ErrorCodes | int) -> None:
        why = f"Received GOAWAY frame, closing connection; error_code: {code}"
        self.goaway = last if self.goaway is None else min(last, self.goaway)
        if self.lost is None:
            self.lost = why
        for call in list(self._calls.values()):
            if call.id > last and not call.ended:
                call.ended = True  # the peer never saw it: no reset either
                _unary.fail(call.answer, StreamTerminatedError(why))
        self.retire(why)

    def retire(self, why: str = "retired") -> None:
        """No new call starts here; the connection closes once its calls ended."""
        if self.lost is None:
            self.lost = why
        self._draining = True
        self._wake()
        if not self._calls:
            self.close(why)

    # -- frames out ----------------------------------------------------------------------

    def ping(self, data: bytes) -> None:
        """Send a PING (the keepalive's) with these 8 bytes."""
        if self._out is not None:
            self._out.write(frame(PING, 0, 0, data))

    def _reset(self, call: WireCall, code: ErrorCodes, why: str | None) -> None:
        """Reset ``call``'s stream (we break it off); fail the call with ``why``."""
        if not call.ended:
            call.ended = True
            if self.raw is not None and not self.raw.is_closing():
                self._out.write(frame(RST_STREAM, 0, call.id, _U32.pack(code)))
        if why is not None:
            _unary.fail(call.answer, StreamTerminatedError(why))
        self._wake()

    def _fail_connection(self, code: ErrorCodes, why: str) -> None:
        """The peer broke the protocol: GOAWAY, close, every call fails."""
        last = 0
        self._failed = True
        if self.raw is not None and not self.raw.is_closing():
            self._out.write(frame(GOAWAY, 0, 0, _U32x2.pack(last, code) + why.encode()[:256]))
            self._out.close()
        self._lose("Protocol error")

    def _lose(self, why: str) -> None:
        """No call can go on: every one fails with ``why``."""
        if self.lost is None:
            self.lost = why
        for call in self._calls.values():
            if not call.ended:
                call.ended = True
                _unary.fail(call.answer, StreamTerminatedError(why))
        self._wake()

    def close(self, why: str = "Channel closed") -> None:
        """Close the connection; its calls fail with ``why``."""
        if self.keepalive is not None:
            self.keepalive.stop()
        self._lose(why)
        if self._out is not None and self.raw is not None and not self.raw.is_closing():
            self._out.write(frame(GOAWAY, 0, 0, _U32x2.pack(0, ErrorCodes.NO_ERROR)))
            self._out.close()

    def abort(self) -> bool:
        """Drop the connection at once (False when it was gone already)."""
        if self.raw is None or self.raw.is_closing():
            return False
        self.raw.abort()
        return True

    def _writable(self) -> bool:
        return self.raw is not None and not self.raw.is_closing()

    def usable(self) -> bool:
        """A new call may start here."""
        return self.lost is None and self.raw is not None and not self.raw.is_closing()

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    async def _wait(self) -> None:
        """Until something changed (a window, a slot, the transport drained, a loss)."""
        waiter = self._loop.create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        finally:
            if waiter in self._waiters:
                self._waiters.remove(waiter)

    # -- a call --------------------------------------------------------------------------

    async def call(self, headers: list[tuple[bytes, bytes]], request: bytes) -> UnaryCall:
        """Send ``request`` (one gRPC message) on a new stream; the answer when it ended."""
        call = await self.open(headers, request)
        try:
            await call.answer.done
            return call.answer
        finally:
            self.leave(call)

    async def open(self, headers: list[tuple[bytes, bytes]], request: bytes) -> WireCall:
        """Send ``request`` (one gRPC message) on a new stream: the call, whose answer
        fills in as it comes (a streaming call's reader waits on it: ``_h2stream``).
        The caller must ``leave`` it (a stream left before its end is reset)."""
        while self._paused or len(self._calls) >= self._max_streams:
            if self.lost is not None:
                raise StreamTerminatedError(self.lost)
            await self._wait()
        if self.lost is not None:
            raise StreamTerminatedError(self.lost)
        stream_id = self._next_id
        self._next_id += 2
        if self._next_id > _MAX_STREAM_ID:  # the ids ran out: the next call needs a new one
            self.lost = "stream ids exhausted"
        answer = UnaryCall(self._loop.create_future())
        call = self._calls[stream_id] = WireCall(stream_id, answer, self._initial_window)
        try:
            message = b"\x00" + len(request).to_bytes(4, "big") + request
            size = len(message)
            block = self._encoder.encode(headers)
            max_frame = self._max_frame
            if len(block) <= max_frame:
                head = frame(HEADERS, END_HEADERS, stream_id, block)
            else:
                parts = [block[i : i + max_frame] for i in range(0, len(block), max_frame)]
                head = b"".join(
                    frame(HEADERS if i == 0 else CONTINUATION,
                          END_HEADERS if i == len(parts) - 1 else 0, stream_id, part)
                    for i, part in enumerate(parts)
                )  # fmt: skip
            if size <= max_frame and size <= self._send_window and size <= call.window:
                self._send_window -= size
                call.window -= size
                call.sent_all = True
                self._out.write(head + frame(DATA, END_STREAM, stream_id, message))
            else:
                self._out.write(head)
                await self._send_flow_controlled(call, message)
        except BaseException:
            self.leave(call)
            raise
        return call

    def leave(self, call: WireCall) -> None:
        """The caller is done with ``call``: forgotten, its stream reset if it had not
        ended (left midway: cancelled, timed out, failed)."""
        stream_id = call.id
        del self._calls[stream_id]
        done = call.answer.done
        if done.done() and not done.cancelled():
            done.exception()  # a streaming reader may have left without looking
        if not call.ended:  # left midway (cancelled, timed out)
            self._reset(call, ErrorCodes.CANCEL, None)
        elif call.answered and not call.sent_all and self._writable():
            # answered before the request was all sent: the rest is not wanted
            self._out.write(frame(RST_STREAM, 0, stream_id, _U32.pack(ErrorCodes.CANCEL)))
        self._wake()
        if self._draining and not self._calls:
            self.close(self.lost or "retired")

    async def _send_flow_controlled(self, call: WireCall, message: bytes) -> None:
        """Send ``message`` in frames as the peer's windows allow, waiting for them."""
        sent, total = 0, len(message)
        while sent < total:
            if call.ended or call.answer.done.done():
                return  # answered or broken before the request was all sent
            if self.lost is not None and self.goaway is None:
                raise StreamTerminatedError(self.lost)
            window = min(call.window, self._send_window)
            if window <= 0 or self._paused:
                await self._wait()
                continue
            n = min(window, self._max_frame, total - sent)
            end = sent + n
            last = end == total
            self._out.write(frame(DATA, END_STREAM if last else 0, call.id, message[sent:end]))
            self._send_window -= n
            call.window -= n
            sent = end
        call.sent_all = True


def _code(value: int) -> ErrorCodes | int:
    try:
        return ErrorCodes(value)
    except ValueError:
        return value
