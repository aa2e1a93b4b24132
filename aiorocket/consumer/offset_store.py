"""Where consumer offsets live: on the broker (clustering) or, later, in a local file."""

from __future__ import annotations

from typing import Protocol

from aiorocket.client.instance import ClientInstance
from aiorocket.errors import NoRouteError
from aiorocket.message import MessageQueue

__all__ = [
    "OffsetStore",
    "RemoteOffsetStore",
]


class OffsetStore(Protocol):
    async def read(self, mq: MessageQueue) -> int | None:
        """The stored offset (next to consume) of ``mq``, or None when there is none."""

    async def persist(self, mq: MessageQueue, offset: int) -> None:
        """Store ``offset`` for ``mq``; raises on failure so the caller can retry later."""

    async def flush(self) -> None:
        """Make persisted offsets durable (a no-op where persist already is)."""


class RemoteOffsetStore:
    """Offsets of a clustering group, stored by the broker that hosts each queue."""

    def __init__(self, client: ClientInstance, group: str) -> None:
        self._client = client
        self._group = group

    async def _addr(self, mq: MessageQueue) -> str:
        """The master of the queue's broker group, else a slave (as the Java client does
        when the master is down: offsets keep moving while the slaves serve the pulls)."""
        route = await self._client.namesrv.get_route(mq.topic)
        found = route.find_addr(mq.broker_name)
        if found is None:
            route = await self._client.namesrv.query_route(mq.topic)
            found = route.find_addr(mq.broker_name)
        if found is None:
            raise NoRouteError(f"no broker for {mq}")
        return found[0]

    async def read(self, mq: MessageQueue) -> int | None:
        return await self._client.broker.query_consumer_offset(
            await self._addr(mq), self._group, mq
        )

    async def persist(self, mq: MessageQueue, offset: int) -> None:
        await self._client.broker.update_consumer_offset(
            await self._addr(mq), self._group, mq, offset
        )

    async def flush(self) -> None:
        return None
