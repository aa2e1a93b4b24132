"""The shared client core: one connection pool, one NameServer client, one broker client.

Producers and consumers each own one ``ClientInstance``; its task group runs the
connections' readers and the route refresher, so closing the instance stops them all.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AsyncExitStack
from types import TracebackType

import anyio.abc

from aiorocket._host import local_ip, make_client_id
from aiorocket._tasks import BackgroundTasks
from aiorocket.client.broker import BrokerClient
from aiorocket.client.namesrv import NameServerClient
from aiorocket.errors import ClientClosedError
from aiorocket.remoting.dispatcher import RequestDispatcher
from aiorocket.remoting.pool import ConnectionPool
from aiorocket.security import Credentials, TlsSetting, resolve_tls

# local_ip and make_client_id live in the neutral core (aiorocket._host), which the gRPC
# transport shares; they stay importable from here for the remoting side's callers.
__all__ = [
    "ClientInstance",
    "local_ip",
    "make_client_id",
]


class ClientInstance:
    def __init__(
        self,
        namesrv: str | Sequence[str],
        *,
        client_id: str | None = None,
        request_timeout: float = 3.0,
        route_refresh_interval: float = 30.0,
        credentials: Credentials | None = None,
        tls: TlsSetting | None = None,
        address_map: Mapping[str, str] | None = None,
    ) -> None:
        """
        Parameters
        ----------
        namesrv:
            NameServer addresses.
        client_id:
            ``ip@instance`` of this client; a fresh one by default.
        request_timeout:
            Seconds per request (NameServer and broker), long polls excepted.
        route_refresh_interval:
            Seconds between refreshes of the cached topic routes.
        credentials:
            ACL identity signing every request, to NameServers and brokers alike.
        tls:
            Connect over TLS to every server: True (system CAs) or an ``ssl.SSLContext``.
        address_map:
            Advertised ``host:port`` -> the address to connect to instead.
        """
        self.client_id = client_id or make_client_id()
        self.dispatcher = RequestDispatcher()
        self.pool = ConnectionPool(
            self.dispatcher,
            credentials=credentials,
            ssl_context=resolve_tls(tls),
            address_map=address_map,
        )
        self.namesrv = NameServerClient(
            self.pool, namesrv, timeout=request_timeout, refresh_interval=route_refresh_interval
        )
        self.broker = BrokerClient(self.pool, request_timeout)
        self._tg: anyio.abc.TaskGroup | None = None
        self._stack: AsyncExitStack | None = None
        self._started = False

    @property
    def task_group(self) -> anyio.abc.TaskGroup:
        if self._tg is None:
            raise ClientClosedError("client is not started")
        return self._tg

    async def __aenter__(self) -> ClientInstance:
        # One stack (aiorocket._tasks): the pool, then the background tasks over it; a
        # failed start unwinds it here, the close later, in reverse order either way.
        async with AsyncExitStack() as stack:
            await stack.enter_async_context(self.pool)
            self._tg = await stack.enter_async_context(BackgroundTasks())
            self._tg.start_soon(self.namesrv.run_refresher)
            self._stack = stack.pop_all()
        self._started = True
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        stack, self._stack = self._stack, None
        if stack is not None:
            await stack.aclose()  # body errors propagate unwrapped
        return None
