"""The producer group's membership on the brokers: heartbeats and unregistration.

A broker sends transaction check-backs only to clients whose heartbeat listed the
producer group (``producerDataSet``), so every broker the producer writes to gets one:
at once when a send first meets it, then every ``heartbeat_interval``. Closing the
producer unregisters the group from each of them, after the heartbeats under way there
ended, and sends none once it began (the shared
[`Heartbeats`][aiorocket.client.heartbeats.Heartbeats] says why): applied after the
unregister, a heartbeat lists the closed producer again, and the broker calls a gone
producer back for its transactions until it expires the channel (120 s).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio

from aiorocket.client.broker import BrokerClient
from aiorocket.client.heartbeats import Heartbeats

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
        self._beats = Heartbeats(broker, client_id, lambda: self._log)
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
        if self._beats.leaving:
            return False
        self._attempted.add(addr)
        if await self._beats.send(addr, self.heartbeat_data()) is not None:
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
        """Unregister from every broker a heartbeat went to (side by side), each after
        its heartbeats under way ended; no heartbeat is sent from then on."""
        await self._beats.unregister(self._attempted, group={"producer_group": self._group})
        self.registered.clear()
        self._attempted.clear()
