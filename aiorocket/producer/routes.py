"""Where a topic can be written: its writable queues, from the NameServer's route.

Routes come from the client's :class:`~aiorocket.client.namesrv.NameServerClient`, whose
cache its refresher re-queries every ``route_refresh_interval``; the queue list here is
rebuilt whenever that cache holds a newer route. A send that finds no queue, or a broker
that says the topic does not exist, asks the NameServer again at once.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import anyio

from aiorocket.client.namesrv import NameServerClient
from aiorocket.errors import NoRouteError, TopicNotExistError
from aiorocket.message import MessageQueue
from aiorocket.producer.selectors import RoundRobin
from aiorocket.protocol.route import TopicRoute


@dataclass(slots=True)
class PublishInfo:
    """One topic's route and its writable queues (broker name order, then queue id)."""

    route: TopicRoute
    queues: list[MessageQueue]
    round_robin: RoundRobin = field(default_factory=RoundRobin)

    def broker_addr(self, broker_name: str) -> str | None:
        return self.route.master_addr(broker_name)


class PublishRoutes:
    def __init__(self, namesrv: NameServerClient) -> None:
        self._namesrv = namesrv
        self._infos: dict[str, PublishInfo] = {}
        self._locks: dict[str, anyio.Lock] = {}

    @property
    def topics(self) -> list[str]:
        return list(self._infos)

    def broker_addrs(self) -> set[str]:
        """Master addresses of every broker serving a topic this producer wrote to."""
        addrs: set[str] = set()
        for info in self._infos.values():
            addrs.update(info.route.all_master_addrs().values())
        return addrs

    async def get(self, topic: str) -> PublishInfo:
        """The topic's publish info; queried on first use or when it has no queue."""
        route = self._namesrv.cached_route(topic)
        info = self._infos.get(topic)
        if route is not None and info is not None and info.route is route and info.queues:
            return info
        if route is None or not route.write_queues():
            route = await self._query(topic, route)
        return self._update(topic, route)

    async def refresh(self, topic: str) -> PublishInfo:
        """Ask the NameServer again (e.g. after a broker said the topic does not exist)."""
        return self._update(topic, await self._query(topic, self._namesrv.cached_route(topic)))

    async def _query(self, topic: str, seen: TopicRoute | None) -> TopicRoute:
        lock = self._locks.setdefault(topic, anyio.Lock())
        async with lock:
            # Another task may have refreshed it while this one waited for the lock.
            route = self._namesrv.cached_route(topic)
            if route is not None and route is not seen:
                return route
            try:
                return await self._namesrv.query_route(topic)
            except TopicNotExistError as exc:
                raise NoRouteError(f"topic {topic!r} does not exist (no route): {exc}") from exc

    def _update(self, topic: str, route: TopicRoute) -> PublishInfo:
        info = self._infos.get(topic)
        if info is not None and info.route is route:
            return info
        queues = route.write_queues()
        if not queues:
            raise NoRouteError(f"topic {topic!r} has no writable queue on a broker with a master")
        if info is None:
            info = PublishInfo(route, queues)
        else:
            info.route, info.queues = route, queues
        self._infos[topic] = info
        return info
