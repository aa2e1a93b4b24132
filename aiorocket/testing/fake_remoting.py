"""A scriptable in-process remoting server for fault-injection tests.

Real behaviour is tested against a real broker; this server exists for what a real
broker will not do on demand: answer out of order, stay silent, send garbage, or
hang up mid-frame, or stall a connection as a half-open socket does (never read, never
answer). Users of aiorocket can use it in their own tests too.
"""

from __future__ import annotations

import struct
import weakref
from collections.abc import Callable, Coroutine, Iterator
from types import TracebackType
from typing import Any, ClassVar

import anyio
import anyio.abc

from aiorocket.protocol.command import RemotingCommand
from aiorocket.protocol.frame import (
    MAX_FRAME_LENGTH,
    FrameDecoder,
    encode_command,
    encode_header,
)

__all__ = [
    "FakeRemotingServer",
    "ServerHandler",
    "ServerSession",
    "echo_handler",
]


#: The release a fake broker's answers name (MQVersion code of 5.5.0, the default cluster's):
#: the client checks features against it (aiorocket.protocol.features).
FAKE_BROKER_VERSION = 513


class ServerSession:
    """One accepted client connection, as seen by the fake server's handler."""

    def __init__(self, stream: anyio.abc.ByteStream, version: int = FAKE_BROKER_VERSION) -> None:
        self.stream = stream
        #: the release every answer says the server runs (a broker's ``version`` field)
        self.version = version
        self._lock = anyio.Lock()
        self.stalled = False
        #: the client hung up (the server read the end of its stream)
        self.closed = False

    def stall(self) -> None:
        """Stop reading from and answering on this connection, keeping it open: what a
        client sees of a peer behind a NAT entry that expired, or across a partition."""
        self.stalled = True

    async def send(self, cmd: RemotingCommand) -> bool:
        """Send ``cmd``; unlike a client, this peer may exceed the frame limit (as a broker
        configured for larger messages does). Whether it was written (``send_raw``)."""
        if cmd.is_response:
            cmd.version = self.version
        if len(cmd.body) < MAX_FRAME_LENGTH // 2:
            return await self.send_raw(encode_command(cmd))
        header = encode_header(cmd)
        prefix = struct.pack(">ii", 4 + len(header) + len(cmd.body), len(header))
        return await self.send_raw(prefix + header + cmd.body)

    async def send_raw(self, data: bytes) -> bool:
        """Send bytes; a session that is already closed (by either side) or stalled drops
        them. False if dropped (over a socket a write to a peer that hung up may still
        look written; over ``aiorocket.testing.sim.memnet`` it is exact)."""
        if self.stalled:
            return False
        async with self._lock:
            try:
                await self.stream.send(data)
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                return False
        return True

    async def close(self) -> None:
        await self.stream.aclose()


#: Called for every command a client sends; may answer, stay silent, or misbehave.
ServerHandler = Callable[[ServerSession, RemotingCommand], Coroutine[Any, Any, None]]


async def echo_handler(session: ServerSession, cmd: RemotingCommand) -> None:
    """Answer every non-oneway request with SUCCESS, echoing ext fields and body."""
    if not cmd.is_oneway and not cmd.is_response:
        await session.send(
            RemotingCommand.response_to(cmd, ext_fields=dict(cmd.ext_fields), body=cmd.body)
        )


class FakeRemotingServer:
    """``async with FakeRemotingServer(handler) as server:`` listens on ``server.address``."""

    #: the servers running, by address: an in-memory network (aiorocket.testing.sim's
    #: ``memnet``) connects a client to one without a socket
    live: ClassVar[weakref.WeakValueDictionary[str, FakeRemotingServer]] = (
        weakref.WeakValueDictionary()
    )
    #: while set, servers open no listener and take their ports from it (in memory only)
    memory_ports: ClassVar[Iterator[int] | None] = None

    def __init__(
        self, handler: ServerHandler = echo_handler, *, version: int = FAKE_BROKER_VERSION
    ) -> None:
        self.handler = handler
        self.version = version
        #: called once the server read the end of a client's stream (a broker's close
        #: event: 5.x ``ClientHousekeepingService.onChannelClose``); not for a stalled
        #: connection, whose close the server never reads
        self.on_close: Callable[[ServerSession], Coroutine[Any, Any, None]] | None = None
        self.sessions: list[ServerSession] = []
        self.received: list[RemotingCommand] = []
        self._tg: anyio.abc.TaskGroup | None = None
        self._listener: anyio.abc.Listener[anyio.abc.SocketStream] | None = None
        self.address = ""

    async def __aenter__(self) -> FakeRemotingServer:
        self._tg = anyio.create_task_group()
        if FakeRemotingServer.memory_ports is not None:
            # no socket: reached through serve_stream only, at an address that is the
            # same in every process (a simulated run's seed replays its addresses too)
            self.address = f"127.0.0.1:{next(FakeRemotingServer.memory_ports)}"
            await self._tg.__aenter__()
            FakeRemotingServer.live[self.address] = self
            return self
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
        port = listener.extra(anyio.abc.SocketAttribute.local_port)
        self._listener = listener
        self.address = f"127.0.0.1:{port}"
        await self._tg.__aenter__()
        self._tg.start_soon(listener.serve, self._serve_client)
        FakeRemotingServer.live[self.address] = self
        return self

    def serve_stream(self, stream: anyio.abc.ByteStream) -> None:
        """Serve a client connected through ``stream`` (one end of an in-memory pair) as
        one accepted on the listener."""
        if self._tg is None:
            raise anyio.ClosedResourceError("the server is not running")
        self._tg.start_soon(self._serve_client, stream)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        assert self._tg is not None
        if FakeRemotingServer.live.get(self.address) is self:
            del FakeRemotingServer.live[self.address]
        self._tg.cancel_scope.cancel()
        try:
            await self._tg.__aexit__(None, None, None)
            return None
        finally:
            with anyio.CancelScope(shield=True):
                for session in self.sessions:
                    await session.stream.aclose()
                if self._listener is not None:
                    await self._listener.aclose()

    async def _serve_client(self, stream: anyio.abc.ByteStream) -> None:
        session = ServerSession(stream, self.version)
        self.sessions.append(session)
        decoder = FrameDecoder()
        async with anyio.create_task_group() as tg:
            try:
                while True:
                    if session.stalled:
                        await anyio.sleep_forever()
                    data = await stream.receive()
                    for cmd in decoder.feed(data):
                        if session.stalled:
                            break
                        self.received.append(cmd)
                        tg.start_soon(self.handler, session, cmd)
            except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
                session.closed = True
                if self.on_close is not None:
                    await self.on_close(session)
