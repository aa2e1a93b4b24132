"""Which broker to ask about a queue: its master (locks, send-back) or any reader."""

from __future__ import annotations

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

    async def reader(self, mq: MessageQueue) -> str | None:
        """A broker that serves reads of ``mq``: its master, else a slave."""
        found = await self.find(mq)
        return found[0] if found else None
