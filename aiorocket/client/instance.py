"""The shared client core: one connection pool, one NameServer client, one broker client.

Producers and consumers each own one ``ClientInstance``; its task group runs the
connections' readers and the route refresher, so closing the instance stops them all.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import TracebackType

import anyio
import anyio.abc

from aiorocket._host import local_ip, make_client_id
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
        self._started = False

    @property
    def task_group(self) -> anyio.abc.TaskGroup:
        if self._tg is None:
            raise ClientClosedError("client is not started")
        return self._tg

    async def __aenter__(self) -> ClientInstance:
        await self.pool.__aenter__()
        try:
            self._tg = anyio.create_task_group()
            await self._tg.__aenter__()
            self._tg.start_soon(self.namesrv.run_refresher)
        except BaseException as exc:
            await self.pool.__aexit__(type(exc), exc, exc.__traceback__)
            raise
        self._started = True
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        assert self._tg is not None
        self._tg.cancel_scope.cancel()
        try:
            await self._tg.__aexit__(None, None, None)  # body errors propagate unwrapped
        finally:
            await self.pool.__aexit__(None, None, None)
        return None
