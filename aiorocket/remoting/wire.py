"""Whole frames in and out of one TCP connection: an asyncio protocol, or an anyio stream.

Why two ways. A request and its response are a few hundred bytes each way, so the cost
of a request is mostly event loop wake-ups and system calls, not bytes. On asyncio,
anyio's socket stream pays for its generality per frame: every ``receive()`` re-arms
the socket's reader (two ``epoll_ctl`` calls per read), every ``send()`` first yields
to the loop once, and the reader and writer tasks each add a task switch. At 5,000
messages/s on two shared cores those hops are most of the client's CPU and show up as
latency. ``ProtocolWire`` gets its bytes in the transport's callback and hands the
frames written during one loop iteration to the transport in one call at its end: no
tasks, no re-arming, one ``send()`` for the pulls of every queue answered by one read.

Trio, and any other anyio backend, use ``StreamWire``: a reader loop and one
writer task over the backend's byte stream. The tests run both.

Either way a frame is queued whole and synchronously by ``Wire.write``, so a
cancelled requester can never leave half a frame on the wire.
"""

from __future__ import annotations

import asyncio
import math
import ssl
from collections.abc import Callable
from typing import cast

import anyio
import anyio.abc
import sniffio

from aiorocket.errors import ProtocolError
from aiorocket.protocol.command import RemotingCommand
from aiorocket.protocol.frame import FrameDecoder

__all__ = [
    "HIGH_WATER",
    "LOW_WATER",
    "OnCommand",
    "ProtocolWire",
    "Sent",
    "StreamWire",
    "Wire",
    "open_wire",
]

#: Receives every decoded command, in order, inside the event loop.
OnCommand = Callable[[RemotingCommand], None]

_READ_SIZE = 256 * 1024
#: Buffered outgoing bytes above which writers wait (backpressure), and below which
#: they resume.
HIGH_WATER = 4 * 1024 * 1024
LOW_WATER = HIGH_WATER // 4


class Sent:
    """When the frames queued together (one ``Wire.write`` batch) were handed to the
    transport, on the wire's clock (``read_at``'s); NaN until then. One clock read a
    batch: the broker's time for a request starts here, not when it was queued."""

    __slots__ = ("at",)

    def __init__(self) -> None:
        self.at = math.nan


class Wire:
    """The frame transport under a [`Connection`][aiorocket.remoting.connection.Connection]."""

    #: True while more than ``HIGH_WATER`` bytes wait to be sent: writers should
    #: ``await drain()``.
    paused: bool = False
    #: The event loop's clock when the latest read that completed a frame came off the
    #: socket, taken once a read before its commands are delivered: an answer's arrival
    #: as the client can see it, whatever the loop does before its requester resumes.
    read_at: float = math.nan

    def write(self, frame: bytes) -> Sent:
        """Queue a whole frame to be sent (never blocks); the stamp of its batch."""
        raise NotImplementedError

    async def drain(self) -> None:
        """Wait until the write buffer has gone below its low-water mark, or closed."""
        raise NotImplementedError

    async def run(self, on_command: OnCommand) -> None:
        """Deliver incoming commands until the connection ends.

        Returns or raises ``anyio.EndOfStream`` when the peer closes; raises
        [`ProtocolError`][aiorocket.errors.ProtocolError] for garbage, ``OSError`` or
        ``anyio.BrokenResourceError`` when the connection breaks.
        """
        raise NotImplementedError

    async def aclose(self) -> None:
        raise NotImplementedError

    def abort(self) -> None:
        """Drop the connection at once, discarding unsent bytes: ``run`` then ends.

        For a connection the peer no longer reads: a graceful close would wait for a
        full send buffer to drain, which on a half-open socket never happens.
        """
        raise NotImplementedError


async def open_wire(host: str, port: int, ssl_context: ssl.SSLContext | None = None) -> Wire:
    """Connect to ``host:port`` in the fastest way the running backend offers, over TLS
    (handshake done, certificate checked) when ``ssl_context`` is given."""
    if sniffio.current_async_library() == "asyncio":
        loop = asyncio.get_running_loop()
        if ssl_context is None:
            _, protocol = await loop.create_connection(ProtocolWire, host, port)
        else:
            _, protocol = await loop.create_connection(
                ProtocolWire, host, port, ssl=ssl_context, server_hostname=host
            )
        return protocol
    if ssl_context is None:
        return StreamWire(await anyio.connect_tcp(host, port))
    # Not "standard compatible": closing then skips the close_notify exchange, which
    # would read from the stream while the reader task is in receive() (trio refuses
    # that); a remoting peer never relies on close_notify, frames delimit everything.
    stream = await anyio.connect_tcp(
        host, port, ssl_context=ssl_context, tls_hostname=host, tls_standard_compatible=False
    )
    return StreamWire(stream)


class ProtocolWire(asyncio.Protocol, Wire):
    """asyncio: decoding in ``data_received``, writing straight into the transport."""

    def __init__(self) -> None:
        self._transport: asyncio.Transport | None = None
        self._loop = asyncio.get_running_loop()
        self._outbox: list[bytes] | None = None  # frames of this loop iteration
        self._sent = Sent()  # the stamp of _outbox
        self._decoder = FrameDecoder()
        self._on_command: OnCommand | None = None
        self._early: list[RemotingCommand] = []  # frames that came before run()
        self._error: BaseException | None = None
        self._lost = asyncio.Event()
        self._resumed = asyncio.Event()
        self._resumed.set()

    # asyncio.Protocol callbacks ---------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport (uvloop's is not registered as asyncio.Transport).
        self._transport = cast(asyncio.Transport, transport)
        self._transport.set_write_buffer_limits(high=HIGH_WATER, low=LOW_WATER)

    def data_received(self, data: bytes) -> None:
        try:
            commands = self._decoder.feed(data)
        except ProtocolError as exc:
            self._fail(exc)
            return
        if commands:
            self.read_at = self._loop.time()
        deliver = self._on_command
        if deliver is None:
            self._early.extend(commands)
            return
        for cmd in commands:
            deliver(cmd)
        if commands:
            # The flush point of the tasks these answers woke (queued just behind
            # them): what they write at once (a pull task's next pull) leaves before
            # the callbacks queued after them run, such as the handler workers its
            # answer woke, each with a burst of up to 32 handler calls (issue 43, goal
            # 4). A flush already pending is ahead of these tasks: it sends what was
            # written before, this one what they write. Nothing written: no write.
            frames: list[bytes] = []
            self._outbox = frames
            self._sent = sent = Sent()
            self._loop.call_soon(self._flush, frames, sent)

    def eof_received(self) -> bool:
        return False  # close the transport: connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        if exc is not None and self._error is None:
            self._error = exc
        self.paused = False
        self._resumed.set()
        self._lost.set()

    def pause_writing(self) -> None:
        self.paused = True
        self._resumed.clear()

    def resume_writing(self) -> None:
        self.paused = False
        self._resumed.set()

    def _fail(self, exc: BaseException) -> None:
        if self._error is None:
            self._error = exc
        if self._transport is not None:
            self._transport.abort()

    # Wire ---------------------------------------------------------------------------

    def write(self, frame: bytes) -> Sent:
        transport = self._transport
        if transport is None or transport.is_closing():
            raise anyio.BrokenResourceError("connection is closed")
        # The frames written in one loop iteration (e.g. the pulls of several queues
        # whose answers came in one read) leave in one system call, sent after the
        # iteration: a send() per frame would cost the broker a read per frame too.
        outbox = self._outbox
        if outbox is None:
            self._outbox = [frame]
            self._sent = sent = Sent()
            self._loop.call_soon(self._flush, self._outbox, sent)
            return sent
        outbox.append(frame)
        return self._sent

    def _flush(self, frames: list[bytes], sent: Sent) -> None:
        if self._outbox is frames:
            self._outbox = None
        transport = self._transport
        if frames and transport is not None and not transport.is_closing():
            sent.at = self._loop.time()
            transport.write(frames[0] if len(frames) == 1 else b"".join(frames))

    async def drain(self) -> None:
        await self._resumed.wait()

    async def run(self, on_command: OnCommand) -> None:
        self._on_command = on_command
        early, self._early = self._early, []
        for cmd in early:
            on_command(cmd)
        try:
            await self._lost.wait()
        finally:
            self._on_command = None
            if self._transport is not None:
                self._transport.abort()  # cancelled: nobody reads it any more
        if self._error is not None:
            raise self._error
        raise anyio.EndOfStream

    async def aclose(self) -> None:
        if self._transport is not None:
            self._transport.close()  # what is buffered still goes out

    def abort(self) -> None:
        if self._transport is not None:
            self._transport.abort()  # connection_lost follows, and run() returns


class StreamWire(Wire):
    """Any anyio backend: a reader loop and a writer task over a byte stream."""

    def __init__(self, stream: anyio.abc.ByteStream) -> None:
        self._stream = stream
        # Frames queue here and the writer task sends them joined: many concurrent
        # requests then cost one system call.
        self._outbox: list[bytes] = []
        self._sent = Sent()  # the stamp of _outbox
        self._outbox_bytes = 0
        self._wake_writer = anyio.Event()
        self._drained = anyio.Event()
        self._closed = False
        self._write_error: Exception | None = None
        self._run_scope: anyio.CancelScope | None = None

    def write(self, frame: bytes) -> Sent:
        if self._closed:
            raise anyio.BrokenResourceError("connection is closed")
        self._outbox.append(frame)
        self._outbox_bytes += len(frame)
        self.paused = self._outbox_bytes > HIGH_WATER
        self._wake_writer.set()
        return self._sent

    async def drain(self) -> None:
        while self.paused and not self._closed:
            await self._drained.wait()

    async def run(self, on_command: OnCommand) -> None:
        decoder = FrameDecoder()
        error: Exception | None = None
        try:
            async with anyio.create_task_group() as tg:
                self._run_scope = tg.cancel_scope
                if self._closed:  # aborted before run() started
                    tg.cancel_scope.cancel()
                tg.start_soon(self._write_loop)
                try:
                    while True:
                        data = await self._stream.receive(_READ_SIZE)
                        commands = decoder.feed(data)
                        if commands:
                            self.read_at = anyio.current_time()
                        for cmd in commands:
                            on_command(cmd)
                except Exception as exc:  # raised below, outside the task group
                    error = exc
                finally:
                    tg.cancel_scope.cancel()
        finally:
            self._mark_closed()
            with anyio.CancelScope(shield=True):
                await self._stream.aclose()
        # A failed send closes the stream under the reader: report the send's error.
        raise self._write_error or error or anyio.EndOfStream

    async def _write_loop(self) -> None:
        try:
            while True:
                await self._wake_writer.wait()
                self._wake_writer = anyio.Event()
                while self._outbox:
                    frames, self._outbox = self._outbox, []
                    sent, self._sent = self._sent, Sent()
                    self._outbox_bytes = 0
                    sent.at = anyio.current_time()
                    await self._stream.send(frames[0] if len(frames) == 1 else b"".join(frames))
                self.paused = False
                drained, self._drained = self._drained, anyio.Event()
                drained.set()
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
            self._write_error = exc
            self._mark_closed()
            with anyio.CancelScope(shield=True):
                await self._stream.aclose()  # the reader's receive fails next

    def _mark_closed(self) -> None:
        self._closed = True
        self.paused = False
        self._drained.set()

    async def aclose(self) -> None:
        self._mark_closed()
        with anyio.CancelScope(shield=True):
            await self._stream.aclose()

    def abort(self) -> None:
        self._mark_closed()
        if self._run_scope is not None:
            self._run_scope.cancel()  # run() closes the stream on its way out
