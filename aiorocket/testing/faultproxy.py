"""A fault-injecting TCP proxy on loopback, for network-fault tests.

Put it between a client and a server (a broker, a NameServer) and change the network
under the running client, on command:

```python
async with FaultProxy("127.0.0.1:10911") as proxy:
    consumer = Consumer(..., address_map={"127.0.0.1:10911": proxy.address})
    ...
    proxy.stall()            # half-open: no data, no FIN, both ways
    proxy.drop()             # reset every open connection
    proxy.drop(server_after=2)  # the client's side now, the server's 2 s later
    proxy.latency = 0.2      # seconds added to each chunk, each way
    proxy.bandwidth = 2**20  # bytes/s per connection and direction
    proxy.refuse = True      # new connections are reset at once
    proxy.heal()             # all faults off (stalled connections stay stalled)
```

``stall()`` freezes the connections open at that moment (a NAT entry evicted, a peer
frozen): new connections work, so a client that notices and reconnects recovers.
``stall(new=True)`` stalls new connections as well (a path that is down). The proxy runs
in the caller's event loop (asyncio or trio) and listens on 127.0.0.1 only.
"""

from __future__ import annotations

import contextlib
import math
import socket
import struct
from types import TracebackType

import anyio
import anyio.abc
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from anyio.streams.stapled import MultiListener

from aiorocket.remoting.connection import parse_address

__all__ = ["FaultProxy"]

_CHUNK = 64 * 1024


class _Link:
    """One proxied connection: the client's socket and ours to the target."""

    def __init__(self, client: anyio.abc.SocketStream, stalled: bool) -> None:
        self.client = client
        self.upstream: anyio.abc.SocketStream | None = None
        self.scope = anyio.CancelScope()
        self.stalled = stalled
        self.resumed = anyio.Event()
        #: seconds the upstream side stays open after the client's side was reset
        self.server_after = 0.0


class FaultProxy:
    """Forwards every connection made to ``address`` to ``target``, with faults.

    Parameters
    ----------
    target:
        ``host:port`` to forward to (loopback).
    port:
        Port to listen on (127.0.0.1); 0 picks a free one.
    """

    def __init__(self, target: str, port: int = 0) -> None:
        self.target = target
        self._host, self._port = parse_address(target)
        self._listen_port = port
        #: seconds added to every chunk in each direction (order is kept).
        self.latency = 0.0
        #: bytes per second per connection and direction; None: unlimited.
        self.bandwidth: float | None = None
        #: reset new connections at once (a server that is down).
        self.refuse = False
        self._stall_new = False
        self._links: set[_Link] = set()
        self._tg: anyio.abc.TaskGroup | None = None
        self._listener: MultiListener[anyio.abc.SocketStream] | None = None
        #: connections accepted so far (a reconnect shows as an increment).
        self.accepted = 0
        self._accepted_event = anyio.Event()

    @property
    def address(self) -> str:
        """``127.0.0.1:port`` to give the client instead of ``target``."""
        if self._listener is None:
            raise RuntimeError("the proxy is not started")
        port = self._listener.extra(anyio.abc.SocketAttribute.local_port)
        return f"127.0.0.1:{port}"

    @property
    def open_connections(self) -> int:
        return len(self._links)

    async def __aenter__(self) -> FaultProxy:
        listener = await anyio.create_tcp_listener(
            local_host="127.0.0.1", local_port=self._listen_port
        )
        self._listener = listener
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        self._tg.start_soon(listener.serve, self._serve)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._tg is not None and self._listener is not None
        self._tg.cancel_scope.cancel()
        await self._tg.__aexit__(None, None, None)
        await self._listener.aclose()

    # -- faults ------------------------------------------------------------------------
    def stall(self, *, new: bool = False) -> None:
        """Stop forwarding on every open connection, without closing it (half-open);
        with ``new``, connections made from now on are stalled too."""
        self._stall_new = new
        for link in self._links:
            link.stalled = True
            link.resumed = anyio.Event()

    def drop(self, *, server_after: float = 0.0) -> None:
        """Reset (RST) every open connection, both sides; with ``server_after``, the
        server's side only that many seconds later, silent meanwhile (a server that
        learns of the break late, after the client's new connection)."""
        for link in list(self._links):
            link.server_after = server_after
            self._abort(link)

    def heal(self) -> None:
        """No latency, no throttling, no refusal; new connections are not stalled.
        Connections stalled by ``stall`` stay stalled, as on a real network."""
        self.latency = 0.0
        self.bandwidth = None
        self.refuse = False
        self._stall_new = False

    def resume_stalled(self) -> None:
        """Let the stalled connections flow again (a frozen peer thawed)."""
        for link in self._links:
            link.stalled = False
            link.resumed.set()

    async def wait_accepted(self, count: int) -> None:
        """Wait until ``accepted`` reaches ``count``."""
        while self.accepted < count:
            await self._accepted_event.wait()

    # -- forwarding --------------------------------------------------------------------
    def _abort(self, link: _Link) -> None:
        for stream in (link.client, link.upstream):
            if stream is not None:
                _linger_zero(stream)
        link.scope.cancel()

    async def _serve(self, client: anyio.abc.SocketStream) -> None:
        self.accepted += 1
        self._accepted_event.set()
        self._accepted_event = anyio.Event()
        link = _Link(client, self._stall_new)
        if self.refuse:
            _linger_zero(client)
            await client.aclose()
            return
        self._links.add(link)
        try:
            with link.scope:
                link.upstream = await anyio.connect_tcp(self._host, self._port)
                async with anyio.create_task_group() as tg:
                    tg.start_soon(self._pump, link, client, link.upstream, tg.cancel_scope)
                    tg.start_soon(self._pump, link, link.upstream, client, tg.cancel_scope)
        except OSError:
            _linger_zero(client)
        finally:
            self._links.discard(link)
            with anyio.CancelScope(shield=True):
                await client.aclose()
            try:
                if link.upstream is not None and link.server_after > 0:
                    await anyio.sleep(link.server_after)  # (the proxy's close ends it)
            finally:
                with anyio.CancelScope(shield=True):
                    if link.upstream is not None:
                        await link.upstream.aclose()

    async def _pump(
        self,
        link: _Link,
        src: anyio.abc.SocketStream,
        dst: anyio.abc.SocketStream,
        both: anyio.CancelScope,
    ) -> None:
        """src -> dst, chunk by chunk; a chunk waits ``latency`` in a queue that keeps
        order, then leaves at no more than ``bandwidth``."""
        send, receive = anyio.create_memory_object_stream[tuple[float, bytes]](math.inf)
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._deliver, link, receive, dst, both)
            await self._read(link, src, send)
            # EOF from src: let the queue drain, then half-close like TCP would.

    async def _read(
        self,
        link: _Link,
        src: anyio.abc.SocketStream,
        send: MemoryObjectSendStream[tuple[float, bytes]],
    ) -> None:
        async with send:
            while True:
                while link.stalled:  # half-open: stop reading, so nothing is acked on
                    await link.resumed.wait()
                try:
                    data = await src.receive(_CHUNK)
                except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
                    return
                await send.send((anyio.current_time() + self.latency, data))

    async def _deliver(
        self,
        link: _Link,
        receive: MemoryObjectReceiveStream[tuple[float, bytes]],
        dst: anyio.abc.SocketStream,
        both: anyio.CancelScope,
    ) -> None:
        async with receive:
            async for due, data in receive:
                while data:
                    while link.stalled:
                        await link.resumed.wait()
                    delay = due - anyio.current_time()
                    if delay > 0:
                        await anyio.sleep(delay)
                    rate = self.bandwidth
                    piece = data if rate is None else data[: max(1024, int(rate / 20))]
                    data = data[len(piece) :]
                    try:
                        await dst.send(piece)
                    except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                        both.cancel()
                        return
                    if rate is not None:
                        await anyio.sleep(len(piece) / rate)
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            await dst.send_eof()


def _linger_zero(stream: anyio.abc.SocketStream) -> None:
    """Make the next close send RST instead of FIN."""
    with contextlib.suppress(OSError, anyio.ClosedResourceError):
        sock = stream.extra(anyio.abc.SocketAttribute.raw_socket)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
