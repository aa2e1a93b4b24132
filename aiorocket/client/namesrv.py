"""NameServer client: topic routes with failover across addresses and a refreshed cache.

Routes change when brokers come and go or topics are re-created; the Java client polls
every 30 s (``pollNameServerInterval``) and so do we, from ``run_refresher``,
which an owner runs in its task group. A refresh that finds a route unchanged keeps the
cached ``TopicRoute`` object, so users (the rebalancer) can tell "unchanged" by
identity and reuse what they derived from it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence

import anyio
import anyio.abc

from aiorocket._log import get_logger
from aiorocket.errors import (
    ConfigError,
    ConnectionClosedError,
    NameServerUnavailableError,
    ProtocolError,
    RequestTimeoutError,
    TlsError,
    error_for_response,
)
from aiorocket.protocol.codes import RequestCode, ResponseCode
from aiorocket.protocol.command import RemotingCommand
from aiorocket.protocol.route import TopicRoute
from aiorocket.remoting.pool import ConnectionPool

__all__ = [
    "NAMESRV_ENV",
    "REFRESH_CONCURRENCY",
    "ROUTE_REFRESH_INTERVAL",
    "NameServerClient",
    "namesrv_addrs",
    "parse_namesrv_addrs",
]

ROUTE_REFRESH_INTERVAL = 30.0
#: route queries in flight during a refresh: a consumer of hundreds of topics refreshes
#: them in a few round trips (their frames share writes) without flooding a NameServer.
REFRESH_CONCURRENCY = 16


#: read by the clients when no NameServer address is given (and exported by
#: ``python -m aiorocket.testing.broker status --env``).
NAMESRV_ENV = "AIOROCKET_NAMESRV_ADDR"


def namesrv_addrs(addrs: str | Sequence[str] | None) -> list[str]:
    """The NameServer addresses given, else those of ``$AIOROCKET_NAMESRV_ADDR``."""
    if addrs is None:
        addrs = os.environ.get(NAMESRV_ENV, "")
        if not addrs.strip():
            raise ConfigError(
                f"no NameServer address: pass namesrv='host:9876' or set {NAMESRV_ENV}"
            )
    return parse_namesrv_addrs(addrs)


def parse_namesrv_addrs(addrs: str | Sequence[str]) -> list[str]:
    """Accept ``"a:9876;b:9876"`` (the Java form), a comma list, or a sequence."""
    items = addrs.replace(",", ";").split(";") if isinstance(addrs, str) else list(addrs)
    out = [a.strip() for a in items if a and a.strip()]
    if not out:
        raise ConfigError("at least one NameServer address is required")
    for a in out:
        host, sep, port = a.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ConfigError(f"NameServer address {a!r} is not host:port")
    return out


class NameServerClient:
    def __init__(
        self,
        pool: ConnectionPool,
        addrs: str | Sequence[str],
        *,
        timeout: float = 3.0,
        refresh_interval: float = ROUTE_REFRESH_INTERVAL,
    ) -> None:
        self._pool = pool
        self._addrs = parse_namesrv_addrs(addrs)
        self._current = 0
        self._timeout = timeout
        self._refresh_interval = refresh_interval
        self._routes: dict[str, TopicRoute] = {}
        self._bodies: dict[str, bytes] = {}
        self._log = get_logger("client.namesrv")

    @property
    def addrs(self) -> list[str]:
        return list(self._addrs)

    async def ask(self, code: int, ext: dict[str, str]) -> RemotingCommand:
        """One request to the NameServers (the last good one first); a success answer.

        Raises [`NameServerUnavailableError`][aiorocket.errors.NameServerUnavailableError] when none
        answers.
        """
        last_error: Exception | None = None
        for attempt in range(len(self._addrs)):
            index = (self._current + attempt) % len(self._addrs)
            addr = self._addrs[index]
            try:
                resp = await self._pool.request(
                    addr, RemotingCommand.request(code, dict(ext)), self._timeout
                )
            except (ConnectionClosedError, RequestTimeoutError) as exc:
                self._log.warning("namesrv_unreachable", namesrv=addr, error=str(exc))
                last_error = exc
                continue
            self._current = index
            if resp.code != ResponseCode.SUCCESS:
                raise error_for_response(resp.code, resp.remark, code)
            return resp
        assert last_error is not None
        if isinstance(last_error, TlsError):
            raise last_error  # a configuration problem, not an outage: say so
        raise NameServerUnavailableError(
            f"no NameServer of {self._addrs} answered: {last_error}"
        ) from last_error

    async def query_route(self, topic: str) -> TopicRoute:
        """Ask the NameServers (the last good one first) for the route of ``topic``."""
        if not topic:
            raise ConfigError("topic must not be empty")
        resp = await self.ask(
            RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic, "acceptStandardJsonOnly": "true"}
        )
        return self._store(topic, resp.body)

    async def list_topics(self) -> list[str]:
        """Every topic the NameServers know (system topics included), sorted."""
        resp = await self.ask(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, {})
        try:
            topics = json.loads(resp.body).get("topicList") or []
            return sorted(str(t) for t in topics)
        except (ValueError, AttributeError, TypeError, RecursionError) as exc:
            raise ProtocolError(f"topic list is malformed: {exc!r}") from None

    def _store(self, topic: str, body: bytes) -> TopicRoute:
        old = self._routes.get(topic)
        if old is not None and self._bodies.get(topic) == body:
            return old  # the usual refresh: nothing to parse
        route = TopicRoute.from_json(topic, body)
        if old is not None and route == old:
            route = old  # same route, serialised differently
        self._routes[topic] = route
        self._bodies[topic] = body
        return route

    async def get_route(self, topic: str) -> TopicRoute:
        """The cached route of ``topic``, queried on first use."""
        route = self._routes.get(topic)
        if route is None:
            route = await self.query_route(topic)
        return route

    def cached_route(self, topic: str) -> TopicRoute | None:
        return self._routes.get(topic)

    def forget(self, topic: str) -> None:
        self._routes.pop(topic, None)
        self._bodies.pop(topic, None)

    async def prefetch(self, topics: Iterable[str]) -> dict[str, Exception]:
        """Query the routes of ``topics`` not cached yet, concurrently; the failures."""
        return await self._query_many([t for t in topics if t not in self._routes])

    async def refresh_all(self) -> None:
        for topic, exc in (await self._query_many(list(self._routes))).items():
            self._log.warning("route_refresh_failed", topic=topic, error=str(exc))

    async def _query_many(self, topics: list[str]) -> dict[str, Exception]:
        pending = iter(topics)
        failed: dict[str, Exception] = {}

        async def worker() -> None:
            for topic in pending:
                try:
                    await self.query_route(topic)
                except Exception as exc:  # one topic's failure must not stop the others
                    failed[topic] = exc

        async with anyio.create_task_group() as tg:
            for _ in range(min(REFRESH_CONCURRENCY, len(topics))):
                tg.start_soon(worker)
        return failed

    async def run_refresher(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        task_status.started()
        while True:
            await anyio.sleep(self._refresh_interval)
            await self.refresh_all()
