"""A pool holding one connection per address, reconnecting after failures.

The pool is an async context manager that owns a task group; every connection's
reader runs in it, so closing the pool stops every reader and fails every pending
request. Connections that die are dropped from the pool and the next request to
that address connects again.
"""

from __future__ import annotations

import ssl
import weakref
from collections.abc import Callable, Mapping
from types import TracebackType

import anyio
import anyio.abc

from aiorocket._log import get_logger
from aiorocket._tasks import BackgroundTasks
from aiorocket.errors import ClientClosedError, ConnectionClosedError
from aiorocket.protocol.command import RemotingCommand
from aiorocket.remoting.connection import Connection, RequestHandler, StallCheck, WireTiming
from aiorocket.security import Credentials


class ConnectionPool:
    """One ``Connection`` per ``host:port``, created on first use."""

    def __init__(
        self,
        handler: RequestHandler | None = None,
        connect_timeout: float = 3.0,
        *,
        close_on_timeout: bool = True,
        credentials: Credentials | None = None,
        ssl_context: ssl.SSLContext | None = None,
        address_map: Mapping[str, str] | None = None,
    ) -> None:
        """
        Parameters
        ----------
        handler:
            Serves the requests servers send us (NOTIFY_CONSUMER_IDS_CHANGED, ...).
        connect_timeout:
            Seconds to establish a TCP connection.
        close_on_timeout:
            Close a connection when one of its requests times out, so the next request
            opens a new one (the Java client's default): a half-open socket is
            otherwise only noticed by the kernel, minutes later.
        credentials:
            ACL identity signing every request sent (see [`aiorocket.security`][]).
        ssl_context:
            Connect over TLS, verifying the servers with this context.
        address_map:
            Connect to ``address_map[a]`` whenever address ``a`` is asked for: servers
            reached through port forwarding or a tunnel, since routes carry the addresses
            the brokers advertise (and tests put a fault-injecting proxy there).
        """
        self._address_map = dict(address_map or {})
        self._credentials = credentials
        self._ssl_context = ssl_context
        self._handler = handler
        self._connect_timeout = connect_timeout
        self._close_on_timeout = close_on_timeout
        self._connect_listeners: list[Callable[[str], None]] = []
        self._disconnect_listeners: list[Callable[[str], None]] = []
        self._reported_lost: weakref.WeakSet[Connection] = weakref.WeakSet()
        self._connections: dict[str, Connection] = {}
        self._connecting: dict[str, anyio.Lock] = {}
        self._tg: anyio.abc.TaskGroup | None = None
        self._tasks = BackgroundTasks()
        self._closed = False
        self._log = get_logger("remoting.pool")

    async def __aenter__(self) -> ConnectionPool:
        self._tg = await self._tasks.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        try:
            await self.aclose_connections()
        finally:
            # Left even when closing a connection failed, so no cancel scope stays open.
            await self._tasks.__aexit__(exc_type, exc, tb)
        return None

    async def aclose_connections(self) -> None:
        self._closed = True
        conns, self._connections = list(self._connections.values()), {}
        with anyio.CancelScope(shield=True):
            for conn in conns:
                await conn.aclose()

    def add_connect_listener(self, listener: Callable[[str], None]) -> None:
        """Call ``listener(address)`` (synchronously: start a task for any I/O) each time
        a connection is established, the first time or after one was lost."""
        self._connect_listeners.append(listener)

    def remove_connect_listener(self, listener: Callable[[str], None]) -> None:
        if listener in self._connect_listeners:
            self._connect_listeners.remove(listener)

    def add_disconnect_listener(self, listener: Callable[[str], None]) -> None:
        """Call ``listener(address)`` (synchronously) each time a connection of the pool
        ends while the pool is open: closed by the server, failed, or dropped after a
        timeout. It runs before any new connection to that address can be made."""
        self._disconnect_listeners.append(listener)

    def remove_disconnect_listener(self, listener: Callable[[str], None]) -> None:
        if listener in self._disconnect_listeners:
            self._disconnect_listeners.remove(listener)

    @property
    def addresses(self) -> list[str]:
        return list(self._connections)

    def live(self, address: str) -> Connection | None:
        """The open connection to ``address``, or None (``get`` then connects): a plain
        call where ``get`` costs a coroutine, for the pull path (once a pull)."""
        conn = self._connections.get(address)  # empty once the pool is closed
        return conn if conn is not None and not conn.closed else None

    async def get(self, address: str) -> Connection:
        """The live connection to ``address``, connecting first if there is none."""
        if self._closed or self._tg is None:
            raise ClientClosedError("connection pool is closed or not started")
        conn = self._connections.get(address)
        if conn is not None and not conn.closed:
            return conn
        lock = self._connecting.setdefault(address, anyio.Lock())
        async with lock:
            conn = self._connections.get(address)
            if conn is not None:
                if not conn.closed:
                    return conn
                self._lost(conn)
            conn = await Connection.connect(
                address,
                self._handler,
                self._connect_timeout,
                close_on_timeout=self._close_on_timeout,
                credentials=self._credentials,
                ssl_context=self._ssl_context,
                via=self._address_map.get(address),
            )
            if self._closed:
                await conn.aclose()
                raise ClientClosedError("connection pool closed while connecting")
            self._connections[address] = conn
            # A consumer must hear of the loss before the caller of a timed-out request
            # can act on the failure (an application's commit retried at once: its checks
            # must find the queues unverified; pull_remoting 44028).
            conn.on_abort = lambda: self._lost(conn)
            await self._tg.start(self._run, conn)
            self._log.debug("connected", address=address)
            for listener in list(self._connect_listeners):
                listener(address)
            return conn

    async def _run(
        self,
        conn: Connection,
        *,
        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        try:
            await conn.run(task_status=task_status)
        finally:
            if self._connections.get(conn.address) is conn:
                del self._connections[conn.address]
            self._log.debug("disconnected", address=conn.address)
            self._lost(conn)

    def _lost(self, conn: Connection) -> None:
        """Tell the disconnect listeners that ``conn`` is gone, once per connection, and
        before a connection replacing it is made (``get`` and ``drop`` call this too: a
        closed connection's reader may end after its replacement was made)."""
        if self._closed or conn in self._reported_lost:
            return
        self._reported_lost.add(conn)
        for listener in list(self._disconnect_listeners):
            listener(conn.address)

    async def request(
        self,
        address: str,
        cmd: RemotingCommand,
        timeout: float,
        stall: StallCheck | None = None,
        timing: WireTiming | None = None,
    ) -> RemotingCommand:
        conn = await self.get(address)
        return await conn.request(cmd, timeout, stall, timing)

    async def oneway(self, address: str, cmd: RemotingCommand) -> None:
        conn = await self.get(address)
        await conn.oneway(cmd)

    async def drop(self, address: str) -> None:
        """Close the connection to ``address`` (e.g. after a timeout that suggests it is stuck)."""
        conn = self._connections.pop(address, None)
        if conn is not None:
            self._lost(conn)
            await conn.aclose()


__all__ = ["ConnectionClosedError", "ConnectionPool"]
