"""Group membership on the brokers: heartbeats (with subscriptions) and unregistering.

The unregister is the last word a broker hears from a member: a broker runs HEART_BEAT
and UNREGISTER_CLIENT on different executors (5.x ``BrokerController``: the heartbeat
executor, the client-manage executor), so their order on one connection does not decide
the order it applies them in. A heartbeat applied after the unregister lists the closed
member again, and applied after the connection's close too (the broker registers the
dead channel): the others hand it queues until the broker's scan drops it (120 s). So
once unregistering begins no heartbeat is sent, and the unregister to a broker waits for
the end of a heartbeat still under way there (answered: applied; or failed). The Java
client up to 4.9.0 serialized the two by a lock (``MQClientInstance.lockHeartbeat``,
tried for 3 s by ``unregisterClientWithLock``, which skipped the unregister when it
failed: 4.9.1 dropped the lock for that ghost, ISSUE #3066); here the wait is bounded by
the heartbeat's own timeout and the unregister always goes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.lowlevel

from aiorocket.client.broker import BrokerClient
from aiorocket.client.namesrv import NameServerClient
from aiorocket.consumer.state import ConsumerState
from aiorocket.errors import (
    AccessDeniedError,
    ClientClosedError,
    ConnectionClosedError,
    RequestTimeoutError,
    RocketMQError,
    TopicNotExistError,
)

__all__ = ["Membership"]


@dataclass(eq=False)
class _Beat:
    """One heartbeat under way."""

    ended: anyio.Event = field(default_factory=anyio.Event)
    #: it failed for want of its connection (timed out, or closed): the broker may
    #: never have read it, and the connection is gone
    lost: bool = False


def _consume_type(state: ConsumerState) -> str:
    if state.pop_mode:
        return "CONSUME_POP"
    return "CONSUME_ACTIVELY" if state.pull_mode else "CONSUME_PASSIVELY"


class Membership:
    """Tells the brokers of the subscribed topics that this client is in the group.

    Shaped like the producer's [`Membership`][aiorocket.producer.membership.Membership].

    Parameters
    ----------
    state:
        The consumer's shared state: group, subscriptions, configuration, mode.
    client_id:
        This client's id in the group.
    broker:
        The broker request client.
    namesrv:
        The NameServer client; its cached routes name the brokers to heartbeat.
    """

    def __init__(
        self,
        state: ConsumerState,
        client_id: str,
        broker: BrokerClient,
        namesrv: NameServerClient,
    ) -> None:
        self._state = state
        self._client_id = client_id
        self._broker = broker
        self._namesrv = namesrv
        #: set when unregistering begins: no heartbeat is sent from then on
        self._leaving = False
        #: heartbeats under way, by broker address (the unregister waits for their end)
        self._beats: dict[str, set[_Beat]] = {}

    @property
    def _member(self) -> bool:
        # A manually assigned pull consumer is not a group member.
        return self._state.manual_assignment is None

    def heartbeat_data(self) -> dict[str, Any]:
        state, cfg = self._state, self._state.config
        return {
            "clientID": self._client_id,
            "producerDataSet": [],
            "consumerDataSet": [
                {
                    "groupName": state.group,
                    "consumeType": _consume_type(state),
                    "messageModel": cfg.message_model.value,
                    "consumeFromWhere": cfg.consume_from_where.value,
                    "subscriptionDataSet": [s.to_heartbeat() for s in state.subscriptions.values()],
                    "unitMode": False,
                }
            ],
            "heartbeatFingerprint": 0,
        }

    async def broker_addrs(self) -> set[str]:
        """Every broker (slaves too) of the subscribed topics' routes."""
        subscriptions = self._state.subscriptions
        # Routes are cached after the first time; then this asks only for missing ones.
        for topic, exc in (await self._namesrv.prefetch(subscriptions)).items():
            if not isinstance(exc, TopicNotExistError):
                self._state.log.warning("route_failed", topic=topic, error=str(exc))
        addrs: set[str] = set()
        for topic in subscriptions:
            route = self._namesrv.cached_route(topic)
            if route is not None:
                # Slaves too (as the Java consumer does): they serve the pulls of a group
                # whose master is down, and need the subscription for them.
                addrs.update(route.all_addrs())
        return addrs

    async def send_heartbeats(self, *, starting: bool = False) -> None:
        """Heartbeat to every broker of the subscribed topics (failures are logged).

        ``starting``: when every broker refused the heartbeat for lack of permission (ACL:
        no Sub on the group or a subscribed topic), raise that AccessDeniedError: the
        consumer could never consume, and the error names what is missing.
        """
        if not self._member:
            return
        data = self.heartbeat_data()
        addrs = sorted(await self.broker_addrs())
        denied: list[AccessDeniedError] = []
        for addr in addrs:
            error = await self._heartbeat(addr, data)
            if isinstance(error, AccessDeniedError):
                denied.append(error)
        if starting and denied and len(denied) == len(addrs):
            raise denied[0]

    async def heartbeat_to(self, addr: str) -> bool:
        """Heartbeat to ``addr`` if it is a broker of a subscribed topic (cached routes
        only); True once that broker took it.

        Sent when a connection to a broker is (re-)established: a broker that restarted,
        or expired our channel while the network was down, knows nothing of us until then.
        """
        if not self._member:
            return False
        routes = [self._namesrv.cached_route(topic) for topic in self._state.subscriptions]
        if any(route is not None and addr in route.all_addrs() for route in routes):
            return await self._heartbeat(addr, self.heartbeat_data()) is None
        return False

    async def _heartbeat(self, addr: str, data: dict[str, Any]) -> RocketMQError | None:
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
            self._state.log.warning("heartbeat_failed", broker=addr, error=str(exc))
            return exc
        finally:
            beats.discard(beat)
            if not beats:
                del self._beats[addr]
            beat.ended.set()
        return None

    async def heartbeats_ended(self, addr: str) -> bool:
        """Wait until no heartbeat is under way to ``addr`` (each is bounded); True if
        one of them lost its connection. Returns with no await after its last check: a
        caller closing the connection next closes it under no heartbeat."""
        lost = False
        while beats := self._beats.get(addr):
            beat = next(iter(beats))
            self._state.log.debug("awaiting_heartbeat", broker=addr)
            await beat.ended.wait()
            lost = lost or beat.lost
        return lost

    async def unregister(self) -> None:
        """UNREGISTER_CLIENT on every broker of the subscribed topics (and any a heartbeat
        is under way to), side by side: a silent broker's wait and tries would otherwise
        use up the caller's bound before the next broker's turn."""
        if not self._member:
            return
        self._leaving = True
        beating = set(self._beats)
        addrs = await self.broker_addrs() | beating
        async with anyio.create_task_group() as tg:
            for addr in sorted(addrs):
                tg.start_soon(self._unregister_from, addr)

    async def _unregister_from(self, addr: str) -> None:
        # Two tries: an unregister lost with its connection (silent, half-open: it timed
        # out and the connection was closed; or reset) is sent once more, on a new one:
        # left listed, this member holds its queues from the others until the broker
        # expires its channel (2 min). A heartbeat awaited first that lost its connection
        # was that loss already: the one try goes on a new connection. The wait (at most
        # a request timeout) and that try fit the caller's bound (``engine._close_bound``,
        # two request timeouts) as the two tries do.
        lost = await self.heartbeats_ended(addr)
        for last in (True,) if lost else (False, True):
            try:
                await self._broker.unregister_client(
                    addr, self._client_id, consumer_group=self._state.group
                )
            except (ConnectionClosedError, RequestTimeoutError) as exc:
                if not last:
                    self._state.log.info("unregister_retried", broker=addr, error=str(exc))
                    continue
                self._state.log.warning("unregister_failed", broker=addr, error=str(exc))
            except RocketMQError as exc:
                self._state.log.warning("unregister_failed", broker=addr, error=str(exc))
            break
