"""A grpclib ``Channel`` whose connection writes the frames of one loop iteration at once,
encodes its request headers with ``StableHeaderEncoder``,
and is abandoned when it stops answering (``aiorocket.grpc._keepalive``).

grpclib hands every HTTP/2 frame to ``transport.write`` as soon as h2 produces it: a
unary call is a HEADERS and a DATA frame, each its own ``send`` system call (and the
answers' WINDOW_UPDATEs more). On a loaded machine those calls were the producer's
largest cost. ``CoalescingTransport`` buffers the writes of one event-loop
iteration and sends them with one ``write``, as aiorocket's remoting connections do.

This reaches into private names of grpclib (``Channel._protocol_factory``, the
``_config``/``_h2_config`` it uses and ``Connection._connection``, the h2 connection),
stable across 0.4.x; the extra pins grpclib below 0.5.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, cast

from grpclib.client import Channel, Handler
from grpclib.protocol import H2Protocol
from h2.events import DataReceived, Event, ResponseReceived, TrailersReceived

from aiorocket.grpc._hpack import RepeatingBlockDecoder, StableHeaderEncoder
from aiorocket.grpc._keepalive import Keepalive, KeepaliveSettings

__all__ = ["CoalescingChannel", "CoalescingTransport"]

#: Frames from the server that end a silence for the keepalive: response headers and data
#: (after these a gRPC server accepts a PING without counting a strike).
_ANSWERS = (ResponseReceived, DataReceived, TrailersReceived)


class CoalescingTransport:
    """Wraps a transport: ``write`` calls of one loop iteration leave in one write."""

    def __init__(self, transport: asyncio.Transport) -> None:
        self._transport = transport
        self._buffer: list[bytes] = []
        self._loop = asyncio.get_running_loop()

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not self._buffer:
            self._loop.call_soon(self._flush)
        self._buffer.append(bytes(data))

    def _flush(self) -> None:
        if not self._buffer:
            return
        data = b"".join(self._buffer) if len(self._buffer) > 1 else self._buffer[0]
        self._buffer.clear()
        if not self._transport.is_closing():
            self._transport.write(data)

    def close(self) -> None:
        self._flush()
        self._transport.close()

    def is_closing(self) -> bool:
        # grpclib asks on every stream's release and finish: without ``__getattr__``
        return self._transport.is_closing()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class _CoalescingProtocol(H2Protocol):
    keepalive: Keepalive | None = None
    #: the connection's socket transport (``GrpcTransport.abandon`` aborts it)
    raw: asyncio.Transport | None = None

    def __init__(
        self,
        *args: Any,
        keepalive: KeepaliveSettings | None,
        busy: Callable[[], bool],
        waiting_since: Callable[[], float | None],
        abandoned: Callable[[], None],
    ) -> None:
        super().__init__(*args)
        self._abandoned = abandoned
        self._keepalive_settings = keepalive
        self._busy = busy
        self._waiting_since = waiting_since

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport: uvloop's (uvicorn's loop when installed) is not registered
        # as asyncio.Transport, so an isinstance check would refuse every connection.
        transport = self.raw = cast(asyncio.Transport, transport)
        super().connection_made(CoalescingTransport(transport))  # type: ignore[arg-type]
        # Before the first request: h2 has encoded no header block yet.
        h2_conn = self.connection._connection
        h2_conn.encoder = StableHeaderEncoder()  # type: ignore[assignment]  # duck-typed
        decoder = RepeatingBlockDecoder()
        decoder.max_header_list_size = h2_conn.decoder.max_header_list_size
        decoder.max_allowed_table_size = h2_conn.decoder.max_allowed_table_size
        h2_conn.decoder = decoder
        if self._keepalive_settings is not None:
            self._watch(transport, self._keepalive_settings)

    def _watch(self, transport: asyncio.Transport, settings: KeepaliveSettings) -> None:
        conn = self.connection

        def ping(data: bytes) -> None:
            conn._connection.ping(data)
            conn.flush()

        peer = transport.get_extra_info("peername")
        keepalive = self.keepalive = Keepalive(
            settings, self._busy, ping, transport.abort, peer=str(peer),
            waiting_since=self._waiting_since, abandoned=self._abandoned,
        )  # fmt: skip
        feed = conn.feed

        def watched_feed(data: bytes) -> list[Event]:
            events: list[Event] = feed(data)
            if events:
                keepalive.heard(answer=any(type(e) in _ANSWERS for e in events))
            return events

        conn.feed = watched_feed  # type: ignore[method-assign]

    def connection_lost(self, exc: BaseException | None) -> None:
        if self.keepalive is not None:
            self.keepalive.stop()
        super().connection_lost(exc)


class CoalescingChannel(Channel):
    """A grpclib ``Channel`` on ``CoalescingTransport`` connections, each watched by
    a ``Keepalive`` (unless ``keepalive`` is None) while ``busy()``."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        ssl: Any = None,
        keepalive: KeepaliveSettings | None = None,
        busy: Callable[[], bool] = lambda: False,
        waiting_since: Callable[[], float | None] = lambda: None,
        abandoned: Callable[[], None] = lambda: None,
    ) -> None:
        super().__init__(host, port, ssl=ssl)
        self._abandoned = abandoned
        self._keepalive = keepalive
        self._busy = busy
        self._waiting_since = waiting_since

    @property
    def protocol(self) -> _CoalescingProtocol | None:
        """The current connection's protocol (None before the first call)."""
        protocol: Any = self._protocol
        return protocol if isinstance(protocol, _CoalescingProtocol) else None

    def idle(self) -> bool:
        """No call is open on the connection (or there is none)."""
        protocol = self.protocol
        if protocol is None or protocol.raw is None or protocol.raw.is_closing():
            return True
        return protocol.connection._connection.open_outbound_streams == 0

    def abort(self) -> bool:
        """Drop the connection at once: its calls fail, the next call opens a new one.
        False when there was none to drop."""
        protocol = self.protocol
        if protocol is None or protocol.raw is None or protocol.raw.is_closing():
            return False
        protocol.raw.abort()
        return True

    def _protocol_factory(self) -> H2Protocol:
        return _CoalescingProtocol(
            Handler(), self._config, self._h2_config, keepalive=self._keepalive, busy=self._busy,
            waiting_since=self._waiting_since, abandoned=self._abandoned,
        )  # fmt: skip
