"""The producer group's membership on the brokers: heartbeats and unregistration.

A broker sends transaction check-backs only to clients whose heartbeat listed the
producer group (``producerDataSet``), so every broker the producer writes to gets one:
at once when a send first meets it, then every ``heartbeat_interval``. Closing the
producer unregisters the group from each of them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio

from aiorocket.client.broker import BrokerClient
from aiorocket.errors import RocketMQError

__all__ = [
    "Membership",
]


class Membership:
    def __init__(
        self,
        broker: BrokerClient,
        client_id: str,
        group: str,
        broker_addrs: Callable[[], set[str]],
        log: Any,
    ) -> None:
        self._broker = broker
        self._client_id = client_id
        self._group = group
        self._broker_addrs = broker_addrs
        self._log = log
        #: brokers that accepted a heartbeat.
        self.registered: set[str] = set()
        self._seen: set[str] = set()
        #: brokers a heartbeat was sent to, answered or not: all are unregistered from.
        self._attempted: set[str] = set()
        self._wake = anyio.Event()

    def heartbeat_data(self) -> dict[str, Any]:
        return {
            "clientID": self._client_id,
            "producerDataSet": [{"groupName": self._group}],
            "consumerDataSet": [],
            "heartbeatFingerprint": 0,
        }

    def saw(self, addr: str) -> None:
        """A send is about to use ``addr``: heartbeat it soon if it is new."""
        if addr not in self._seen:
            self._seen.add(addr)
            self._wake.set()

    async def heartbeat(self, addr: str) -> bool:
        self._seen.add(addr)
        self._attempted.add(addr)
        try:
            await self._broker.heartbeat(addr, self.heartbeat_data())
        except RocketMQError as exc:
            self._log.warning("heartbeat_failed", broker=addr, error=str(exc))
            return False
        if addr not in self.registered:
            self._log.debug("registered", broker=addr)
        self.registered.add(addr)
        return True

    async def ensure(self, addr: str) -> None:
        """Heartbeat ``addr`` now unless it already has our group."""
        if addr not in self.registered:
            await self.heartbeat(addr)

    async def heartbeat_all(self) -> None:
        """Heartbeat every broker of the routes in use (a broker gone from them is dropped)."""
        addrs = self._broker_addrs()
        self._seen &= addrs
        async with anyio.create_task_group() as tg:
            for addr in sorted(addrs):
                tg.start_soon(self.heartbeat, addr)

    async def run(self, interval: float) -> None:
        """Heartbeat every ``interval`` and whenever a send meets a new broker."""
        while True:
            with anyio.move_on_after(interval):
                await self._wake.wait()
            self._wake = anyio.Event()
            await self.heartbeat_all()

    async def unregister_all(self) -> None:
        """Unregister from every broker a heartbeat went to (concurrently)."""
        async with anyio.create_task_group() as tg:
            for addr in sorted(self._attempted):
                tg.start_soon(self._unregister, addr)
        self.registered.clear()
        self._attempted.clear()

    async def _unregister(self, addr: str) -> None:
        try:
            await self._broker.unregister_client(addr, self._client_id, producer_group=self._group)
        except RocketMQError as exc:
            self._log.warning("unregister_failed", broker=addr, error=str(exc))
