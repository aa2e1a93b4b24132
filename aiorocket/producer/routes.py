"""Where a topic can be written: its writable queues, from the NameServer's route.

Routes come from the client's [`NameServerClient`][aiorocket.client.namesrv.NameServerClient], whose
cache its refresher re-queries every ``route_refresh_interval``; the queue list here is
rebuilt whenever that cache holds a newer route. A send that finds no queue, or a broker
that says the topic does not exist, asks the NameServer again at once.

A topic the NameServer has no route for is written, as the Java producer does, to the
brokers of the *create-topic key*'s route (``TBW102``; a broker registers it only with
``autoCreateTopicEnable``), each with at most ``default_topic_queue_nums`` queues: the
send header names that key, and a broker without the topic creates it. That borrowed
route is used for ``route_refresh_interval`` (Java's NameServer poll), then the
NameServer is asked again, by when it knows the new topic.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field

import anyio

from aiorocket._log import Logger, get_logger
from aiorocket.client.namesrv import NameServerClient
from aiorocket.errors import NoRouteError, TopicNotExistError
from aiorocket.message import MessageQueue
from aiorocket.producer.selectors import RoundRobin
from aiorocket.protocol.route import TopicRoute

__all__ = [
    "PublishInfo",
    "PublishRoutes",
]


@dataclass(slots=True)
class PublishInfo:
    """One topic's route and its writable queues (broker name order, then queue id)."""

    route: TopicRoute
    queues: list[MessageQueue]
    round_robin: RoundRobin = field(default_factory=RoundRobin)

    def broker_addr(self, broker_name: str) -> str | None:
        return self.route.master_addr(broker_name)


class PublishRoutes:
    """The publish info of each topic written to.

    Parameters
    ----------
    namesrv:
        Where routes come from (and are cached).
    create_topic_key:
        The topic whose route serves topics without one (empty: none does).
    default_topic_queue_nums:
        At most this many queues per broker of such a borrowed route.
    borrowed_for:
        Seconds a borrowed route is used before the NameServer is asked again.
    log:
        Where the first use of a borrowed route is told.
    """

    def __init__(
        self,
        namesrv: NameServerClient,
        *,
        create_topic_key: str = "TBW102",
        default_topic_queue_nums: int = 4,
        borrowed_for: float = 30.0,
        log: Logger | None = None,
    ) -> None:
        self._namesrv = namesrv
        self._infos: dict[str, PublishInfo] = {}
        self._locks: dict[str, anyio.Lock] = {}
        self._create_topic_key = create_topic_key
        self._default_queue_nums = default_topic_queue_nums
        self._borrowed_for = borrowed_for
        #: topic -> (route borrowed from the create-topic key's, monotonic time it expires)
        self._borrowed: dict[str, tuple[TopicRoute, float]] = {}
        self._log = log or get_logger("producer")

    @property
    def topics(self) -> list[str]:
        return list(self._infos)

    def broker_addrs(self) -> set[str]:
        """Master addresses of every broker serving a topic this producer wrote to."""
        addrs: set[str] = set()
        for info in self._infos.values():
            addrs.update(info.route.all_master_addrs().values())
        return addrs

    def cached(self, topic: str) -> PublishInfo | None:
        """The topic's publish info if ``get`` would return it without a query (its
        cached route's, or a borrowed route still in use), else None: a plain call
        where ``get`` costs a coroutine (once a send attempt)."""
        route = self._namesrv.cached_route(topic)
        info = self._infos.get(topic)
        if info is None:
            return None
        if route is not None:
            return info if info.route is route and info.queues else None
        return info if self._borrowing(topic, info.route) else None

    async def get(self, topic: str) -> PublishInfo:
        """The topic's publish info; queried on first use or when it has no queue."""
        info = self.cached(topic)
        if info is not None:
            return info
        route = self._namesrv.cached_route(topic)
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
            borrowed = self._borrowed.get(topic)
            if borrowed and borrowed[0] is not seen and self._borrowing(topic, borrowed[0]):
                return borrowed[0]
            try:
                route = await self._namesrv.query_route(topic)
            except TopicNotExistError as exc:
                return await self._borrow(topic, exc)
            self._borrowed.pop(topic, None)
            return route

    def _borrowing(self, topic: str, route: TopicRoute) -> bool:
        borrowed = self._borrowed.get(topic)
        return borrowed is not None and borrowed[0] is route and time.monotonic() < borrowed[1]

    async def _borrow(self, topic: str, missing: TopicNotExistError) -> TopicRoute:
        """The create-topic key's route, as the route of ``topic`` (Java's default route)."""
        key = self._create_topic_key
        if not key or key == topic:
            raise NoRouteError(f"topic {topic!r} does not exist (no route): {missing}") from missing
        try:
            default = await self._namesrv.get_route(key)
        except TopicNotExistError as exc:
            raise NoRouteError(
                f"topic {topic!r} does not exist (no route), and no broker creates topics "
                f"(no route for {key!r}: autoCreateTopicEnable is off)"
            ) from exc
        nums = self._default_queue_nums
        route = dataclasses.replace(
            default,
            topic=topic,
            queue_datas=tuple(
                dataclasses.replace(
                    q,
                    read_queue_nums=min(nums, q.read_queue_nums),
                    write_queue_nums=min(nums, q.read_queue_nums),
                )
                for q in default.queue_datas
            ),
        )
        if topic not in self._borrowed:
            self._log.info("topic_route_borrowed", topic=topic, create_topic_key=key)
        self._borrowed[topic] = (route, time.monotonic() + self._borrowed_for)
        return route

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
