"""Group membership on the brokers: heartbeats (with subscriptions) and unregistering.

The unregister is the last word a broker hears from a member: no heartbeat is sent once
it began, and it waits for one still under way to its broker (the shared
[`Heartbeats`][aiorocket.client.heartbeats.Heartbeats] says why).
"""

from __future__ import annotations

from typing import Any

from aiorocket.client.broker import BrokerClient
from aiorocket.client.heartbeats import Heartbeats
from aiorocket.client.namesrv import NameServerClient
from aiorocket.consumer.state import ConsumerState
from aiorocket.errors import AccessDeniedError, TopicNotExistError

__all__ = ["Membership"]


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
        self._namesrv = namesrv
        self._beats = Heartbeats(broker, client_id, lambda: state.log)

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
            error = await self._beats.send(addr, data)
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
            return await self._beats.send(addr, self.heartbeat_data()) is None
        return False

    async def heartbeats_ended(self, addr: str) -> bool:
        """Wait until no heartbeat is under way to ``addr`` (``Heartbeats.ended``)."""
        return await self._beats.ended(addr)

    async def unregister(self) -> None:
        """UNREGISTER_CLIENT on every broker of the subscribed topics (and any a heartbeat
        is under way to), side by side, each after its heartbeats under way ended."""
        if not self._member:
            return
        beating = self._beats.leave()  # before the routes are asked: none meanwhile
        addrs = await self.broker_addrs() | beating
        await self._beats.unregister(addrs, group={"consumer_group": self._state.group})
