"""An in-memory network for the remoting runs: the client's connections to the simulated
servers are memory stream pairs, not loopback sockets.

Why: the remoting runs use trio's ``MockClock(autojump_threshold=0)``, which moves the
clock to the next deadline as soon as every task is blocked. Over real sockets a task
waiting for bytes the kernel has not yet handed over counts as blocked, so under load
the clock could jump to a pull's 10 s timeout while its answer was on the socket, and a
seed did not replay. Over memory streams a frame is in the peer's buffer the moment it
is sent: "every task blocked" means nothing is in flight. The frames are the real ones
(the project's codecs on both sides); only the bytes' path changes.

The client's one way to a server is ``Connection.connect``'s ``open_wire``, replaced for
the run (as the runner replaces ``time.monotonic``): production code has no branch for
it. An address no simulated server has is refused, as a closed port is. The servers
open no socket and take their ports in the order they start, so a seed's addresses (in
message ids, in the order brokers are sorted) are the same in every process.
"""

from __future__ import annotations

import itertools
import math
import ssl
from collections.abc import Iterator
from contextlib import contextmanager

import anyio
import anyio.abc
import anyio.lowlevel
import anyio.to_thread
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from aiorocket.remoting import connection
from aiorocket.remoting.wire import StreamWire, Wire
from aiorocket.testing.fake_remoting import FakeRemotingServer

__all__ = ["MemoryByteStream", "in_memory_network", "memory_stream_pair"]

#: the simulated servers' ports, in the order they start (none is listened on)
_FIRST_PORT = 30001


class MemoryByteStream(anyio.abc.ByteStream):
    """One end of an in-memory, unbounded, ordered byte stream pair."""

    def __init__(self, send: MemoryObjectSendStream[bytes],
                 receive: MemoryObjectReceiveStream[bytes]) -> None:  # fmt: skip
        self._send = send
        self._receive = receive
        self._rest = b""

    async def receive(self, max_bytes: int = 65536) -> bytes:
        if not self._rest:
            self._rest = await self._receive.receive()  # EndOfStream once the peer closed
        data, self._rest = self._rest[:max_bytes], self._rest[max_bytes:]
        return data

    async def send(self, item: bytes) -> None:
        await anyio.lowlevel.checkpoint()  # as a socket's send is
        self._send.send_nowait(bytes(item))  # BrokenResourceError once the peer closed

    async def send_eof(self) -> None:
        self._send.close()

    async def aclose(self) -> None:
        self._send.close()
        self._receive.close()
        await anyio.lowlevel.checkpoint()


def memory_stream_pair() -> tuple[MemoryByteStream, MemoryByteStream]:
    """Two connected ends: what one sends, the other receives."""
    a_send, b_receive = anyio.create_memory_object_stream[bytes](math.inf)
    b_send, a_receive = anyio.create_memory_object_stream[bytes](math.inf)
    return MemoryByteStream(a_send, a_receive), MemoryByteStream(b_send, b_receive)


async def _open_wire(host: str, port: int, ssl_context: ssl.SSLContext | None = None) -> Wire:
    await anyio.lowlevel.checkpoint()
    server = FakeRemotingServer.live.get(f"{host}:{port}")
    if server is None:
        raise ConnectionRefusedError(f"no simulated server at {host}:{port}")
    client, served = memory_stream_pair()
    server.serve_stream(served)
    return StreamWire(client)


async def _inline(func: object, *args: object, **_: object) -> object:
    """``anyio.to_thread.run_sync`` run in the calling task: a thread's answer is real
    time the virtual clock could jump over (the broadcasting consumer's offset file)."""
    await anyio.lowlevel.checkpoint()
    return func(*args)  # type: ignore[operator]


@contextmanager
def in_memory_network() -> Iterator[None]:
    """For the ``with`` block, clients reach the simulated remoting servers in memory."""
    where = vars(connection)  # the name Connection.connect calls
    real_open, real_thread = where["open_wire"], anyio.to_thread.run_sync
    where["open_wire"] = _open_wire
    anyio.to_thread.run_sync = _inline  # type: ignore[assignment]
    FakeRemotingServer.memory_ports = itertools.count(_FIRST_PORT)
    try:
        yield
    finally:
        where["open_wire"] = real_open
        anyio.to_thread.run_sync = real_thread
        FakeRemotingServer.memory_ports = None
