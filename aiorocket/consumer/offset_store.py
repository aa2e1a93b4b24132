"""Where consumer offsets live: on the broker (clustering) or, later, in a local file."""

from __future__ import annotations

from typing import Protocol

from aiorocket.client.instance import ClientInstance
from aiorocket.errors import NoRouteError
from aiorocket.message import MessageQueue


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
        route = await self._client.namesrv.get_route(mq.topic)
        addr = route.master_addr(mq.broker_name)
        if addr is None:
            route = await self._client.namesrv.query_route(mq.topic)
            addr = route.master_addr(mq.broker_name)
        if addr is None:
            raise NoRouteError(f"no master broker for {mq}")
        return addr

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
