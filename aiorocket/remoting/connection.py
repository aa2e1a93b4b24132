"""One remoting TCP connection: requests multiplexed by ``opaque``.

A connection is *run* by an owner (a task group, usually the pool's):
``Connection.run`` takes frames from its [`wire`][aiorocket.remoting.wire] until the
peer goes away, routes responses to the requests waiting for them and dispatches
server-initiated requests to a handler. When the connection ends for any reason every
pending request fails at once with
[`ConnectionClosedError`][aiorocket.errors.ConnectionClosedError]; nothing waits for its timeout.

A request that gets no answer within its timeout closes the connection (as the Java
client does by default, ``clientCloseSocketIfTimeout``): on a half-open socket (NAT
eviction, a partition without RST) nothing would otherwise notice before the kernel gives
up, minutes later, and every request in between would time out too. The other requests
pending on it fail at once with [`ConnectionClosedError`][aiorocket.errors.ConnectionClosedError]
(retriable) and the pool opens a new connection for the next request.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import ssl
from collections.abc import Awaitable, Callable
from typing import Protocol

import anyio
import anyio.abc
from anyio.streams.memory import MemoryObjectSendStream

from aiorocket._log import get_logger
from aiorocket._loop import LoopShortcuts, OneShotEvent, capture
from aiorocket._signal import Signal
from aiorocket.errors import (
    BrokerStalledError,
    ClientClosedError,
    ConnectionClosedError,
    ProtocolError,
    RequestTimeoutError,
    ResponseTooLargeError,
    TlsError,
)
from aiorocket.protocol.codes import RemotingFlag, ResponseCode
from aiorocket.protocol.command import RemotingCommand
from aiorocket.protocol.frame import MAX_FRAME_LENGTH, encode_command
from aiorocket.remoting.wire import Sent, StreamWire, Wire, open_wire
from aiorocket.security import Credentials

__all__ = [
    "MIN_CLOSE_TIMEOUT",
    "Connection",
    "EncodedRequest",
    "RequestHandler",
    "StallCheck",
    "WireTiming",
    "next_opaque",
    "parse_address",
]

#: Handles a request the server sent us. Return the response, or None for oneway requests.
RequestHandler = Callable[["Connection", RemotingCommand], Awaitable["RemotingCommand | None"]]

_opaque_counter = itertools.count(1)

#: A timeout at or below this is the caller's budget running out, not evidence that the
#: connection is stuck: the connection stays open (Java: MIN_CLOSE_TIMEOUT_MILLIS).
MIN_CLOSE_TIMEOUT = 0.1


# Plain ints: IntFlag arithmetic costs a microsecond per operation, on every request.
_ONEWAY = int(RemotingFlag.ONEWAY)
_NOT_ONEWAY = ~_ONEWAY
_RESPONSE = int(RemotingFlag.RESPONSE)


def next_opaque() -> int:
    # Opaque is an int32 on the Java side; wrap before overflowing it.
    return next(_opaque_counter) & 0x7FFFFFFF


class EncodedRequest(Protocol):
    """A request whose frame its maker encodes (``request`` sets no fields of it): the
    pulls, whose header is encoded once per queue (aiorocket.client.pull_request)."""

    @property
    def code(self) -> int: ...

    def frame(self, opaque: int) -> bytes:
        """The whole frame, length prefix included, with ``opaque`` and flag 0."""

    def command(self) -> RemotingCommand:
        """The same request as a command: a connection that signs its requests sends
        that, signed."""


#: ``(seconds, give_up)``: a request unanswered after ``seconds`` is abandoned if
#: ``give_up()`` says so then and again ``STALL_GRACE`` later; while it says no, it is
#: asked again every ``seconds`` until the request's timeout.
StallCheck = tuple[float, Callable[[], bool]]
#: A request found stalled is abandoned only if still unanswered this much later: after
#: the event loop was starved, the sweeper may run before the reader that has its answer.
STALL_GRACE = 0.05


class WireTiming:
    """A request's time on the wire, filled by ``Connection.request`` when it is answered:
    from the write of its frame (handed to the transport, not queued) to the read of its
    answer off the socket, both on the wire's clock. The broker's latency as the client
    can see it, without the time the answer then waits for its requester to resume (the
    producer's fault table: a busy event loop must not make a healthy broker slow)."""

    __slots__ = ("read_at", "sent")

    def __init__(self) -> None:
        self.sent: Sent | None = None
        self.read_at = math.nan

    def ms(self) -> float | None:
        """Milliseconds from write to read; None unless both happened."""
        sent = self.sent
        if sent is None:
            return None
        took = (self.read_at - sent.at) * 1000
        return took if took >= 0 else None  # NaN (not written, not read) is not >= 0


class _Pending:
    """A request waiting for its answer. The stall fields are the class's for a request
    without a stall check (nearly all: every pull), which never writes them; a
    ``_StallPending`` has its own (once a request: benchmarks/README.md, "Round 18")."""

    __slots__ = ("deadline", "error", "event", "read_at", "response")

    stall_at: float = math.inf
    stall_after: float = math.inf
    give_up: Callable[[], bool] | None = None
    stalled: bool = False
    suspect: bool = False

    def __init__(self, deadline: float, event: OneShotEvent) -> None:
        self.event = event
        self.deadline = deadline
        self.response: RemotingCommand | None = None
        self.read_at = math.nan
        self.error: BaseException | None = None


class _StallPending(_Pending):
    """A request with a stall check (``Connection.request``'s ``stall``)."""

    __slots__ = ("give_up", "stall_after", "stall_at", "stalled", "suspect")

    def __init__(
        self, deadline: float, event: OneShotEvent, stall_at: float, stall: StallCheck
    ) -> None:
        super().__init__(deadline, event)
        self.stall_after = stall[0]
        self.stall_at = stall_at
        self.give_up = stall[1]
        self.stalled = False
        self.suspect = False


def parse_address(address: str) -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"address {address!r} is not host:port")
    return host.strip("[]"), int(port)


def _tls_error(address: str, exc: BaseException) -> TlsError:
    if isinstance(exc, ssl.SSLCertVerificationError):
        why = f"its certificate is not trusted: {exc.verify_message or exc}"
    elif isinstance(exc, ssl.SSLEOFError | anyio.BrokenResourceError):
        why = "the server closed the connection during the handshake (does it speak TLS?)"
    else:
        why = str(exc) or repr(exc)
    return TlsError(f"TLS handshake with {address} failed: {why}")


class Connection:
    """A multiplexed remoting connection over a [`Wire`][aiorocket.remoting.wire.Wire]
    (or any anyio byte stream, which gets wrapped in one)."""

    def __init__(
        self,
        wire: Wire | anyio.abc.ByteStream,
        address: str,
        handler: RequestHandler | None = None,
        *,
        close_on_timeout: bool = True,
        credentials: Credentials | None = None,
    ) -> None:
        self.address = address
        self._close_on_timeout = close_on_timeout
        self._credentials = credentials
        self._wire = wire if isinstance(wire, Wire) else StreamWire(wire)
        self._handler = handler
        self._pending: dict[int, _Pending] = {}
        self._handlers: anyio.abc.TaskGroup | None = None
        self._requests: MemoryObjectSendStream[RemotingCommand] | None = None
        # Request timeouts are enforced by one sweeper task per connection (like the Java
        # client's response-table scan) rather than a timer-backed cancel scope per
        # request, which would cost more than the rest of a request's client work.
        self._sweep = Signal()
        self._next_sweep = math.inf
        self._closed = False
        self._close_reason: BaseException | None = None
        self._done = anyio.Event()
        self._log = get_logger("remoting.connection", address=address)
        self._loop: LoopShortcuts | None = None  # captured by run(), inside the event loop
        #: the server's release (MQVersion code) from its last answer; None before one.
        self.peer_version: int | None = None
        #: called as ``abort`` closes the connection (the pool's loss report): before the
        #: failure reaches the request that timed out, not when the reader ends later
        self.on_abort: Callable[[], None] | None = None

    @classmethod
    async def connect(
        cls,
        address: str,
        handler: RequestHandler | None = None,
        timeout: float = 3.0,
        *,
        close_on_timeout: bool = True,
        credentials: Credentials | None = None,
        ssl_context: ssl.SSLContext | None = None,
        via: str | None = None,
    ) -> Connection:
        """Connect (and, with ``ssl_context``, complete the TLS handshake) within ``timeout``;
        to ``via`` instead of ``address`` when given (a tunnel or proxy to it)."""
        host, port = parse_address(via or address)
        try:
            with anyio.fail_after(timeout):
                wire = await open_wire(host, port, ssl_context)
        except TimeoutError:
            raise ConnectionClosedError(
                f"connect to {address} timed out after {timeout}s"
            ) from None
        except ssl.SSLError as exc:
            raise _tls_error(address, exc) from exc
        except anyio.BrokenResourceError as exc:  # anyio: the peer hung up mid-handshake
            if ssl_context is not None:
                raise _tls_error(address, exc.__cause__ or exc) from exc
            raise ConnectionClosedError(f"cannot connect to {address}: {exc!r}") from exc
        except OSError as exc:
            raise ConnectionClosedError(f"cannot connect to {address}: {exc}") from exc
        return cls(
            wire, address, handler, close_on_timeout=close_on_timeout, credentials=credentials
        )

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def pending_count(self) -> int:
        return len(self._pending)

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Dispatch incoming frames until the connection ends. Owned by a task group."""
        self._loop = capture()
        task_status.started()
        try:
            async with anyio.create_task_group() as handlers:
                # Requests from the broker go through a stream to a task that starts
                # their handlers: frames arrive in an asyncio protocol callback, where
                # anyio cannot start a task unless the loop was started by anyio.run
                # (under uvicorn or aiohttp its backend lookup finds no running task).
                requests, incoming = anyio.create_memory_object_stream[RemotingCommand](math.inf)
                self._requests = requests
                handlers.start_soon(self._serve_requests, handlers, incoming)
                self._handlers = handlers
                handlers.start_soon(self._expire_loop)
                try:
                    await self._wire.run(self._on_command)
                    raise anyio.EndOfStream
                except (anyio.EndOfStream, anyio.ClosedResourceError):
                    self._close_reason = self._close_reason or ConnectionClosedError(
                        f"connection to {self.address} closed by peer"
                    )
                except anyio.BrokenResourceError as exc:
                    self._close_reason = ConnectionClosedError(
                        f"connection to {self.address} broke: {exc}"
                    )
                except ProtocolError as exc:
                    self._log.warning("protocol_error", error=str(exc))
                    self._close_reason = exc
                except OSError as exc:
                    self._close_reason = ConnectionClosedError(
                        f"connection to {self.address} failed: {exc}"
                    )
                finally:
                    self._handlers = None
                    self._requests = None
                    requests.close()
                    handlers.cancel_scope.cancel()
        finally:
            await self._shutdown()

    async def _shutdown(self) -> None:
        self._closed = True
        reason = self._close_reason or ConnectionClosedError(f"connection to {self.address} closed")
        pending, self._pending = self._pending, {}
        for p in pending.values():
            p.error = reason
            p.event.set()
        with anyio.CancelScope(shield=True):
            await self._wire.aclose()
        self._done.set()

    def _on_command(self, cmd: RemotingCommand) -> None:
        if cmd.flag & _RESPONSE:  # cmd.is_response without its call (once a frame)
            self._on_response(cmd)
        elif self._handlers is not None and self._requests is not None:
            self._requests.send_nowait(cmd)

    async def _serve_requests(
        self,
        handlers: anyio.abc.TaskGroup,
        incoming: anyio.abc.ObjectReceiveStream[RemotingCommand],
    ) -> None:
        async with incoming:
            async for request in incoming:
                handlers.start_soon(self._serve, request)

    def _on_response(self, cmd: RemotingCommand) -> None:
        self.peer_version = cmd.version
        pending = self._pending.pop(cmd.opaque, None)
        if pending is None:
            # The request timed out before the answer came; nothing waits for it.
            self._log.debug("late_response", opaque=cmd.opaque, code=cmd.code)
            return
        pending.response = cmd
        pending.read_at = self._wire.read_at
        pending.event.set()

    async def _serve(self, request: RemotingCommand) -> None:
        response: RemotingCommand | None
        if self._handler is None:
            response = RemotingCommand.not_supported(request)
        else:
            try:
                response = await self._handler(self, request)
            except Exception as exc:
                self._log.exception("request_handler_failed", code=request.code)
                response = RemotingCommand.response_to(
                    request, ResponseCode.SYSTEM_ERROR, f"handler failed: {exc!r}"
                )
        if response is not None and not request.is_oneway:
            response.opaque = request.opaque
            response.flag |= _RESPONSE
            with contextlib.suppress(ConnectionClosedError):
                await self._send(encode_command(response))

    async def _send(self, frame: bytes) -> Sent:
        sent = self._write(frame)
        if self._wire.paused:
            await self._drain()
        return sent

    def _write(self, frame: bytes) -> Sent:
        """Queue ``frame`` whole (never blocks); then ``_drain`` if the wire is paused."""
        if self._closed:
            raise self._closed_error()
        try:
            return self._wire.write(frame)
        except anyio.BrokenResourceError:
            raise self._closed_error() from None

    async def _drain(self) -> None:
        """Backpressure: past the wire's high-water mark, wait for the socket."""
        await self._wire.drain()
        if self._closed:
            raise self._closed_error()

    async def _expire_loop(self) -> None:
        """Wake every pending request whose deadline passed; it then raises a timeout.
        A request past its stall check is abandoned if its ``give_up`` says so."""
        while True:
            now = anyio.current_time()
            earliest = math.inf
            expired = []
            for opaque, pending in self._pending.items():
                # (a plain _Pending's stall_at is inf: only a _StallPending gets here)
                if pending.stall_at <= now and isinstance(pending, _StallPending):
                    if pending.give_up is not None and pending.give_up():
                        if pending.suspect:
                            pending.stalled = True
                            expired.append(opaque)
                            continue
                        pending.suspect = True  # abandoned if still unanswered after this
                        pending.stall_at = now + STALL_GRACE
                    else:
                        pending.suspect = False
                        pending.stall_at = now + pending.stall_after
                if pending.deadline <= now:
                    expired.append(opaque)
                else:
                    earliest = min(earliest, pending.deadline, pending.stall_at)
            for opaque in expired:
                self._pending.pop(opaque).event.set()  # no response, no error: timed out
            self._next_sweep = earliest
            with anyio.move_on_after(earliest - now):
                await self._sweep.wait()

    def _closed_error(self) -> ConnectionClosedError:
        reason = self._close_reason
        if isinstance(reason, ConnectionClosedError):
            return ConnectionClosedError(str(reason))
        if reason is None:  # the peer is going away; run() has not noticed yet
            return ConnectionClosedError(f"connection to {self.address} is closing")
        return ConnectionClosedError(f"connection to {self.address} is closed: {reason}")

    async def request(
        self,
        cmd: RemotingCommand | EncodedRequest,
        timeout: float,
        stall: StallCheck | None = None,
        timing: WireTiming | None = None,
    ) -> RemotingCommand:
        """Send ``cmd`` and wait for its response (any code; callers interpret it);
        ``timing``, if given, gets its write and its answer's read.

        With ``stall``, a request that has no answer after its first element (seconds)
        raises ``BrokerStalledError`` if ``give_up()`` is true then (and still
        ``STALL_GRACE`` later; while it is false, it is asked again every such period
        until the timeout); the connection stays open (the peer is slow or frozen, not
        the socket half-open, or nothing else would answer either).
        """
        opaque = next_opaque()
        if not isinstance(cmd, RemotingCommand):
            if self._credentials is None:
                frame = cmd.frame(opaque)
            else:
                cmd = cmd.command()  # signed: as a command, every field in the signature
        if isinstance(cmd, RemotingCommand):
            cmd.opaque = opaque
            cmd.flag &= _NOT_ONEWAY
            if self._credentials is not None:
                self._credentials.sign(cmd)
            frame = encode_command(cmd)
        loop = self._loop or capture()
        now = loop.now()
        deadline = now + timeout
        pending: _Pending
        if stall is not None and stall[0] < timeout:
            wake = now + stall[0]
            pending = _StallPending(deadline, loop.new_event(), wake, stall)
        else:
            wake = deadline
            pending = _Pending(deadline, loop.new_event())
        self._pending[opaque] = pending
        if wake < self._next_sweep:
            self._sweep.notify()  # the sweeper must wake earlier for this one
        try:
            # _send's steps without its coroutine, _write's without its call (once a
            # request: benchmarks/README.md, "Round 11" and "Round 18")
            if self._closed:
                raise self._closed_error()
            try:
                sent = self._wire.write(frame)
            except anyio.BrokenResourceError:
                raise self._closed_error() from None
            if self._wire.paused:
                await self._drain()
            await pending.event.wait()
        finally:
            self._pending.pop(opaque, None)
        response = pending.response
        if response is not None:
            if timing is not None:
                timing.sent = sent
                timing.read_at = pending.read_at
            if response.skipped_body:
                size = response.skipped_body
                raise ResponseTooLargeError(
                    f"the answer to request code {cmd.code} from {self.address} is larger "
                    f"than the {MAX_FRAME_LENGTH} byte frame limit (body of {size} bytes, "
                    "skipped; the connection stays open)",
                    size=size,
                )
            return response
        if pending.error is not None:
            err = pending.error
            if isinstance(err, ConnectionClosedError):
                raise ConnectionClosedError(str(err)) from err
            raise ConnectionClosedError(f"connection to {self.address} failed: {err}") from err
        if pending.stalled:
            assert stall is not None
            raise BrokerStalledError(
                f"request code {cmd.code} to {self.address} got no answer within "
                f"{stall[0]:.3f}s while other brokers answered"
            )
        message = f"request code {cmd.code} to {self.address} got no answer within {timeout}s"
        if self._close_on_timeout and timeout > MIN_CLOSE_TIMEOUT:
            self.abort(ConnectionClosedError(f"connection closed after a timeout: {message}"))
        raise RequestTimeoutError(message)

    async def oneway(self, cmd: RemotingCommand) -> None:
        cmd.opaque = next_opaque()
        cmd.flag |= _ONEWAY
        if self._credentials is not None:
            self._credentials.sign(cmd)
        await self._send(encode_command(cmd))

    async def aclose(self) -> None:
        """Close the stream; ``run`` then fails whatever is pending and returns."""
        if not self._closed:
            self._closed = True
            self._close_reason = self._close_reason or ClientClosedError(
                f"connection to {self.address} closed locally"
            )
            with anyio.CancelScope(shield=True):
                await self._wire.aclose()

    def abort(self, reason: ConnectionClosedError) -> None:
        """Drop the connection now, unsent bytes too; pending requests fail with ``reason``."""
        if self._closed:
            return
        self._closed = True
        self._close_reason = reason
        self._log.warning("connection_aborted", reason=str(reason))
        self._wire.abort()
        if self.on_abort is not None:
            self.on_abort()

    async def wait_closed(self) -> None:
        await self._done.wait()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<Connection {self.address} {state} pending={len(self._pending)}>"
