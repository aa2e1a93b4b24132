"""What every part of [`aiorocket.admin.Admin`][] uses: its connections, the
cluster's brokers, routes, and the brokers that know a group."""

from __future__ import annotations

from collections.abc import Sequence
from types import TracebackType
from typing import TypeVar

from aiorocket.client.admin import AdminRequests, parse_cluster_info
from aiorocket.client.instance import ClientInstance
from aiorocket.client.namesrv import namesrv_addrs
from aiorocket.errors import ClientClosedError, GroupNotFoundError
from aiorocket.protocol.codes import RequestCode
from aiorocket.protocol.route import TopicRoute
from aiorocket.security import Credentials, TlsSetting

__all__ = ["AdminCore"]

_A = TypeVar("_A", bound="AdminCore")


class AdminCore:
    """The connection of an [`Admin`][aiorocket.admin.Admin] (its parameters) and what
    every part of it uses."""

    def __init__(
        self,
        namesrv: str | Sequence[str] | None = None,
        *,
        request_timeout: float = 5.0,
        credentials: Credentials | None = None,
        tls: TlsSetting | None = None,
    ) -> None:
        self._namesrv = namesrv_addrs(namesrv)
        self._timeout = request_timeout
        self._credentials = credentials
        self._tls = tls
        self._client: ClientInstance | None = None
        self._requests: AdminRequests | None = None

    async def __aenter__(self: _A) -> _A:
        client = ClientInstance(
            self._namesrv,
            request_timeout=self._timeout,
            credentials=self._credentials,
            tls=self._tls,
        )
        await client.__aenter__()
        self._client = client
        self._requests = AdminRequests(client.broker)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        client, self._client, self._requests = self._client, None, None
        if client is not None:
            await client.__aexit__(exc_type, exc, tb)

    @property
    def client(self) -> ClientInstance:
        if self._client is None:
            raise ClientClosedError("use the Admin in `async with`")
        return self._client

    @property
    def requests(self) -> AdminRequests:
        if self._requests is None:
            raise ClientClosedError("use the Admin in `async with`")
        return self._requests

    # -- cluster -----------------------------------------------------------------------

    async def brokers(self) -> dict[str, dict[int, str]]:
        """Broker name -> {broker id: address} (id 0 is the master), from the NameServer."""
        resp = await self.client.namesrv.ask(RequestCode.GET_BROKER_CLUSTER_INFO, {})
        return parse_cluster_info(resp.body)

    async def masters(self) -> dict[str, str]:
        """Broker name -> master address."""
        return {name: ids[0] for name, ids in (await self.brokers()).items() if 0 in ids}

    async def route(self, topic: str) -> TopicRoute:
        """The topic's route (TopicNotExistError when the NameServers have none)."""
        return await self.client.namesrv.query_route(topic)

    async def _require_group(self, group: str) -> dict[str, str]:
        """The masters of brokers that know ``group``; GroupNotFoundError if none does."""
        masters = await self.masters()
        known: dict[str, str] = {}
        for name, addr in masters.items():
            # The whole table: asking for one group (GET_SUBSCRIPTIONGROUP_CONFIG) creates
            # it on a broker with autoCreateSubscriptionGroup.
            if group in await self.requests.group_configs(addr):
                known[name] = addr
        if not known:
            raise GroupNotFoundError(26, f"consumer group {group!r} does not exist")
        return known
