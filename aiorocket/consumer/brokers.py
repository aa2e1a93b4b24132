"""Which broker to ask about a queue: its master (locks, send-back) or any reader."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from aiorocket.client.namesrv import NameServerClient
from aiorocket.errors import RocketMQError
from aiorocket.message import MessageQueue
from aiorocket.protocol.route import MASTER_ID

__all__ = ["BrokerFinder"]


class BrokerFinder:
    """Finds a broker of a queue's broker group in the cached routes.

    Parameters
    ----------
    namesrv:
        The NameServer client whose cached routes are read; a route is queried again
        when the cached one names no such broker (a broker group that just appeared).
    """

    def __init__(self, namesrv: NameServerClient) -> None:
        self._namesrv = namesrv

    def cached(self, mq: MessageQueue, broker_id: int = MASTER_ID) -> tuple[str, int] | None:
        """``find`` in the cached route only (None: ask ``find``): a plain call, once a
        pull, where ``find`` costs a coroutine."""
        route = self._namesrv.cached_route(mq.topic)
        return route.find_addr(mq.broker_name, broker_id) if route else None

    async def find(
        self, mq: MessageQueue, broker_id: int = MASTER_ID, *, only_this: bool = False
    ) -> tuple[str, int] | None:
        """Address and id of a broker of ``mq``'s group (see ``TopicRoute.find_addr``)."""
        route = self._namesrv.cached_route(mq.topic)
        found = route.find_addr(mq.broker_name, broker_id, only_this=only_this) if route else None
        if found is None:
            try:
                route = await self._namesrv.query_route(mq.topic)
            except RocketMQError:
                return None
            found = route.find_addr(mq.broker_name, broker_id, only_this=only_this)
        return found

    async def master(self, mq: MessageQueue) -> str | None:
        """The master of ``mq``'s broker group (locks and send-back need the master)."""
        found = await self.find(mq, only_this=True)
        return found[0] if found else None

    def cached_masters(
        self, mqs: Iterable[MessageQueue]
    ) -> tuple[dict[str, list[MessageQueue]], dict[str, list[MessageQueue]]]:
        """``mqs`` by master address as the cached routes name it, and by topic those
        whose master the cache does not name (for :meth:`masters_of_topic`)."""
        found: dict[str, list[MessageQueue]] = defaultdict(list)
        missing: dict[str, list[MessageQueue]] = defaultdict(list)
        for mq in mqs:
            route = self._namesrv.cached_route(mq.topic)
            hit = route.find_addr(mq.broker_name, MASTER_ID, only_this=True) if route else None
            if hit is None:
                missing[mq.topic].append(mq)
            else:
                found[hit[0]].append(mq)
        return found, missing

    async def masters_of_topic(
        self, topic: str, mqs: list[MessageQueue]
    ) -> dict[str, list[MessageQueue]]:
        """``mqs`` (all of ``topic``) by master address, after one route query for them
        all (not one per queue); those the new route does not name either are left out."""
        try:
            route = await self._namesrv.query_route(topic)
        except RocketMQError:
            return {}
        found: dict[str, list[MessageQueue]] = defaultdict(list)
        for mq in mqs:
            hit = route.find_addr(mq.broker_name, MASTER_ID, only_this=True)
            if hit is not None:
                found[hit[0]].append(mq)
        return found

    async def masters(self, mqs: Iterable[MessageQueue]) -> dict[str, list[MessageQueue]]:
        """``mqs`` by master address: the cached routes, then one query per topic whose
        cached route does not name a queue's master."""
        found, missing = self.cached_masters(mqs)
        for topic, group in missing.items():
            for addr, more in (await self.masters_of_topic(topic, group)).items():
                found.setdefault(addr, []).extend(more)
        return found

    async def reader(self, mq: MessageQueue) -> str | None:
        """A broker that serves reads of ``mq``: its master, else a slave."""
        found = await self.find(mq)
        return found[0] if found else None
