"""A client's heartbeats to brokers and its unregister, in the order the brokers apply them.

A broker runs HEART_BEAT and UNREGISTER_CLIENT on different executors (5.x
``BrokerController``: the heartbeat executor, the client-manage executor), so their
order on one connection does not decide the order it applies them in. A heartbeat
applied after the unregister lists the closed client again, and applied after the
connection's close too (``ClientManageProcessor.heartBeat`` registers the dead channel):
a consumer group's others hand the ghost queues, a broker calls a ghost producer back
for its transactions, until the broker's scan drops the channel (120 s). So once leaving
begins no heartbeat is sent, and the unregister to a broker waits for the end of a
heartbeat still under way there (answered: applied; or failed). The Java client up to
4.9.0 serialized the two by a lock (``MQClientInstance.lockHeartbeat``, tried for 3 s by
``unregisterClientWithLock``, which skipped the unregister when it failed: 4.9.1 dropped
the lock for that ghost, ISSUE #3066); here the wait is bounded by the heartbeat's own
timeout and the unregister always goes.

One mechanism for the consumer's and the producer's memberships (each says what its
heartbeat carries and which brokers it has).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.lowlevel

from aiorocket.client.broker import BrokerClient
from aiorocket.errors import (
    ClientClosedError,
    ConnectionClosedError,
    RequestTimeoutError,
    RocketMQError,
)

__all__ = ["Heartbeats"]


@dataclass(eq=False)
class _Beat:
    """One heartbeat under way."""

    ended: anyio.Event = field(default_factory=anyio.Event)
    #: it failed for want of its connection (timed out, or closed): the broker may
    #: never have read it, and the connection is gone
    lost: bool = False


class Heartbeats:
    """Sends one client's heartbeats and its unregister so that none is applied after it.

    Parameters
    ----------
    broker:
        The broker request client.
    client_id:
        The client's id (the unregister names it).
    log:
        Returns the owner's logger now (an owner binds more context to it later).
    """

    def __init__(self, broker: BrokerClient, client_id: str, log: Callable[[], Any]) -> None:
        self._broker = broker
        self._client_id = client_id
        self._log = log
        #: set when leaving begins: no heartbeat is sent from then on
        self._leaving = False
        #: heartbeats under way, by broker address (the unregister waits for their end)
        self._beats: dict[str, set[_Beat]] = {}

    @property
    def leaving(self) -> bool:
        return self._leaving

    def leave(self) -> set[str]:
        """No heartbeat is sent from now on (the unregister is coming); the brokers
        heartbeats are under way to now (unregistered from even if they end before)."""
        self._leaving = True
        return set(self._beats)

    async def send(self, addr: str, data: dict[str, Any]) -> RocketMQError | None:
        """One heartbeat to ``addr``; the error it failed with (logged), None if taken."""
        if self._leaving:
            return ClientClosedError("unregistering: no more heartbeats")
        await anyio.lowlevel.checkpoint_if_cancelled()  # the shield below hides it
        beat = _Beat()
        beats = self._beats.setdefault(addr, set())
        beats.add(beat)
        try:
            # Shielded: a heartbeat sent may be applied whoever stops waiting for it, so
            # its end is awaited even when its caller is cancelled (the close cancels the
            # heartbeat loop): the unregister waits for it. The request times out by
            # itself; the bound is for a connect or a write that waits longer (a full
            # socket buffer that a silent peer does not read waits until it closes).
            with anyio.move_on_after(2 * self._broker.timeout, shield=True) as scope:
                await self._broker.heartbeat(addr, data)
            if scope.cancelled_caught:
                raise RequestTimeoutError(f"heartbeat to {addr} did not end in time")
        except RocketMQError as exc:
            beat.lost = isinstance(exc, (ConnectionClosedError, RequestTimeoutError))
            self._log().warning("heartbeat_failed", broker=addr, error=str(exc))
            return exc
        finally:
            beats.discard(beat)
            if not beats:
                del self._beats[addr]
            beat.ended.set()
        return None

    async def ended(self, addr: str) -> bool:
        """Wait until no heartbeat is under way to ``addr`` (each is bounded); True if
        one of them lost its connection. Returns with no await after its last check: a
        caller closing the connection next closes it under no heartbeat."""
        lost = False
        while beats := self._beats.get(addr):
            beat = next(iter(beats))
            self._log().debug("awaiting_heartbeat", broker=addr)
            await beat.ended.wait()
            lost = lost or beat.lost
        return lost

    async def unregister(self, addrs: Iterable[str], *, group: dict[str, str]) -> None:
        """UNREGISTER_CLIENT (``group``: ``unregister_client``'s group argument) on every
        broker of ``addrs`` and any a heartbeat is under way to, side by side: a silent
        broker's wait and tries would otherwise use up the caller's bound before the
        next broker's turn."""
        self._leaving = True
        async with anyio.create_task_group() as tg:
            for addr in sorted(set(addrs) | set(self._beats)):
                tg.start_soon(self._unregister_from, addr, group)

    async def _unregister_from(self, addr: str, group: dict[str, str]) -> None:
        # Two tries: an unregister lost with its connection (silent, half-open: it timed
        # out and the connection was closed; or reset) is sent once more, on a new one:
        # left listed, the client is a ghost until the broker expires its channel
        # (2 min). A heartbeat awaited first that lost its connection was that loss
        # already: the one try goes on a new connection. The wait (at most a request
        # timeout) and that try fit the caller's bound (two request timeouts) as the
        # two tries do.
        lost = await self.ended(addr)
        for last in (True,) if lost else (False, True):
            try:
                await self._broker.unregister_client(addr, self._client_id, **group)
            except (ConnectionClosedError, RequestTimeoutError) as exc:
                if not last:
                    self._log().info("unregister_retried", broker=addr, error=str(exc))
                    continue
                self._log().warning("unregister_failed", broker=addr, error=str(exc))
            except RocketMQError as exc:
                self._log().warning("unregister_failed", broker=addr, error=str(exc))
            break
