"""The remoting ``LiteSource``: a lite consumer's pops straight from the brokers.

The same session as ``RemotingSource`` (routes, heartbeats, the group's retry policy,
the dead-letter queue), bound to one parent topic: it tells every broker of that topic
the client's lite subscriptions (LITE_SUBSCRIPTION_CTL), long-polls each of them with
POP_LITE_MESSAGE, and settles with the message's lite topic (see
``aiorocket.client.lite``). Each lite topic is FIFO (the broker hands out its next
messages only once the popped ones are acked), so the runtime delivers each lite topic
in order, as a message group; a failed message is retried in place.

A broker that drops a subscription (NOTIFY_UNSUBSCRIBE_LITE, e.g. after an
administrator's change) tells the client, which forgets the lite topic.

In an exclusive group (``lite.sub.model`` Exclusive) that notice is how a member learns
that another one took a lite topic; a 5.5.0 broker sends it once, on the connection of
the moment, and keeps nothing of it. Written into a connection that then proved dead
(half-open, reset), it is lost, and the client would go on holding the lite topic; its
next resync (COMPLETE_ADD), which 5.5.0 takes without evicting anyone, would subscribe
it again beside the member that took it: two members on one lite topic of an
exclusive group, for good. So after any connection to a broker of the parent topic
ended, the next subscription update first asks every broker which lite topics they hold
for this client (GET_LITE_CLIENT_INFO; each lists those it keeps, the union is the
client's set) and forgets, as the notice would have made it, those none holds; the
resync is asked for at once. It learns nothing if a broker does not answer, has no
master, or knows no subscription of this client (it restarted or dropped the client as
idle: then nothing of an eviction survives there either, and the resync restores the
set). Asked before any update reaches a broker on its new connection, so what a broker
lacks was dropped by the broker, not lost to a restart the client's own update then
half repaired.

The 5.5.0 broker can lose a lite topic's event while this client pops and acks at once
(apache/rocketmq#11191; ``aiorocket.client.lite``): the lite topic's messages stay
stored but are never handed out until it gets another message. Every
``REDISPATCH_INTERVAL`` the source asks each broker it was busy with (messages received,
acks, subscription changes) in the last two intervals for a full dispatch of this client
(TRIGGER_LITE_DISPATCH), so such a lite topic is delivered again within about that time.
The loss follows such a request within milliseconds; two intervals cover one that
happens just after an ask. An idle client asks nothing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Collection, Sequence

import anyio

from aiorocket.client.lite import (
    LITE_BIND_TOPIC,
    LITE_QUOTA,
    LITE_SUB_MODEL,
    NOTIFY_UNSUBSCRIBE_LITE,
    LiteRequests,
)
from aiorocket.client.pop import group_config
from aiorocket.consumer.pop.lite import LiteAction, LiteOffset, LiteSubscriptions
from aiorocket.consumer.pop.remoting_source import RemotingSource
from aiorocket.consumer.pop.source import AckRefusals, Early
from aiorocket.consumer.state import ConsumerState
from aiorocket.errors import ConfigError, LiteQuotaExceededError, NoRouteError, RocketMQError
from aiorocket.namespace import unwrap
from aiorocket.protocol.command import RemotingCommand
from aiorocket.protocol.features import LITE
from aiorocket.received import PopMessage
from aiorocket.remoting.connection import Connection

__all__ = ["DEFAULT_LITE_QUOTA", "LiteRemotingSource"]

#: lite subscriptions per client of a group without ``lite.sub.client.quota`` (5.5.0)
DEFAULT_LITE_QUOTA = 2000
#: seconds between two full dispatches asked of a broker this client is consuming from
REDISPATCH_INTERVAL = 5.0


class LiteRemotingSource(RemotingSource):
    """Pops a lite consumer's subscribed lite topics from the brokers of its bind topic.

    Parameters
    ----------
    state:
        The consumer's shared state; ``state.lite`` names the bind topic, which is also
        its one subscription (routes and heartbeats).
    namesrv, client_id:
        As ``RemotingSource`` takes them.
    """

    def __init__(
        self, state: ConsumerState, namesrv: Sequence[str], *, client_id: str | None
    ) -> None:
        assert state.lite is not None
        super().__init__(state, namesrv, client_id=client_id)
        self.lite: LiteSubscriptions = state.lite
        self.fifo = True  # each lite topic, whatever the consumer's ``orderly``
        self.requests = self.lite_requests = LiteRequests(self.client.broker)
        #: brokers to ask for a full dispatch: the asks left (see the module docstring)
        self._active: dict[str, int] = {}
        #: the group is exclusive (``lite.sub.model``): another member may take a topic
        self.exclusive = False
        #: addresses whose connection ended since the brokers were last asked what they
        #: hold for this client (an exclusive group's notices may be lost with it)
        self._unheard: set[str] = set()

    feature = LITE  # RocketMQ 5.5

    async def open(self) -> None:
        await super().open()
        try:
            await self._check_group()
        except BaseException:
            await self.close()
            raise
        self.client.dispatcher.register(NOTIFY_UNSUBSCRIBE_LITE, self._on_unsubscribe)
        self.client.pool.add_disconnect_listener(self._on_disconnected)

    async def _check_group(self) -> None:
        """The group must be bound to the bind topic (else every pop is refused); its
        per-client quota of lite subscriptions is checked here, as the official clients
        do (the broker enforces only its own total)."""
        for _topic, _name, addr in self._targets():
            try:
                config = await group_config(self.client.broker, addr, self.group)
            except RocketMQError:
                continue
            if config is None:
                continue
            attributes = config.get("attributes") or {}
            bound = attributes.get(LITE_BIND_TOPIC)
            if bound != self.lite.bind_topic:
                raise ConfigError(
                    f"group {self.group!r} is not bound to {self.lite.bind_topic!r} (its "
                    f"{LITE_BIND_TOPIC} is {bound!r}): create it with Admin.create_group("
                    f"..., lite_bind_topic={self.lite.bind_topic!r})"
                )
            self.exclusive = attributes.get(LITE_SUB_MODEL) == "Exclusive"
            quota = str(attributes.get(LITE_QUOTA, DEFAULT_LITE_QUOTA))
            self.lite.quota = int(quota) if quota.lstrip("-").isdigit() else None
            return

    async def run(self) -> None:
        """Heartbeats, and the full dispatches that recover lost events, until cancelled."""
        async with anyio.create_task_group() as tg:
            tg.start_soon(super().run)
            tg.start_soon(self._redispatch)

    def _busy(self, addr: str) -> None:
        self._active[addr] = 2

    async def _redispatch(self) -> None:
        while True:
            await anyio.sleep(REDISPATCH_INTERVAL)
            for addr, left in sorted(self._active.items()):
                try:
                    await self.lite_requests.trigger_dispatch(
                        addr, group=self.group, client_id=self.client_id
                    )
                except RocketMQError as err:
                    self.state.log.warning("lite_redispatch_failed", broker=addr, error=str(err))
                    continue  # asked again next time
                if self._active.get(addr) == left:  # not busy again meanwhile
                    if left > 1:
                        self._active[addr] = left - 1
                    else:
                        del self._active[addr]

    async def ack(self, topic: str, messages: list[PopMessage]) -> AckRefusals:
        for m in {m.broker_name: m for m in messages}.values():  # one per broker
            with contextlib.suppress(RocketMQError):  # the ack reports it
                self._busy(await self._addr(m))
        return await super().ack(topic, messages)

    async def close(self) -> None:
        self.client.pool.remove_disconnect_listener(self._on_disconnected)
        self.client.dispatcher.unregister(NOTIFY_UNSUBSCRIBE_LITE, self._on_unsubscribe)
        await super().close()

    def _on_disconnected(self, addr: str) -> None:
        """A connection ended: in an exclusive group, a notice may have been lost with it
        (see the module docstring); the brokers are asked at the next update, which is
        asked for now. Not while closing (the close hangs up its cut long polls)."""
        if self.exclusive and not self.state.closing:
            self._unheard.add(addr)
            self.lite.resync_soon()

    async def _learn_dropped(self, brokers: Sequence[tuple[str, str]], action: LiteAction,
                             adding: Collection[str]) -> set[str]:  # fmt: skip
        """After a connection ended (``_unheard``), the lite topics no broker holds for
        this client any more: forgotten, as their notices would have made them; returned.
        ``adding``: the update's own lite topics (not judged). A broker that cannot be
        asked fails a resync (sent again soon, nothing sent yet) and lets an application's
        update go on without learning (it may reach a broker on its new connection)."""
        unheard, self._unheard = self._unheard, set()
        route = self.client.namesrv.cached_route(self.lite.bind_topic)
        names = {mq.broker_name for mq in route.read_queues()} if route is not None else set()
        if not unheard & {addr for _name, addr in brokers} or len(brokers) < len(names):
            return set()  # not a broker's connection, or a broker without a master
        held: set[str] = set()
        try:
            for _name, addr in brokers:
                topics = await self.lite_requests.client_lite_topics(
                    addr, group=self.group, topic=self.lite.bind_topic, client_id=self.client_id
                )
                if topics is None:
                    return set()  # it knows none of ours: nothing of an eviction survives
                held |= topics
        except RocketMQError as err:
            self.state.log.warning("lite_subscriptions_not_learned", error=str(err),
                                   action=action.value)  # fmt: skip
            if action is LiteAction.COMPLETE_ADD:
                self._unheard |= unheard
                raise
            return set()
        dropped = set(self.lite.topics) - held - set(adding)
        for lite_topic in sorted(dropped):
            self.state.log.info("lite_drop_learned", lite_topic=lite_topic,
                                topic=self.lite.bind_topic)  # fmt: skip
            self.lite.on_unsubscribed(lite_topic)
        return dropped

    async def _on_unsubscribe(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        ext = cmd.ext_fields
        if ext.get("consumerGroup") == self.group and ext.get("clientId") == self.client_id:
            lite_topic = ext.get("liteTopic")
            if lite_topic:
                self.lite.on_unsubscribed(lite_topic)
        return RemotingCommand.response_to(cmd)

    def _brokers(self) -> list[tuple[str, str]]:
        """(broker name, master address) of every broker of the bind topic."""
        return [(name, addr) for _topic, name, addr in self._targets()]

    async def sync_lite(
        self, action: LiteAction, lite_topics: Collection[str], *, offset: LiteOffset | None = None
    ) -> None:
        brokers = self._brokers()
        if not brokers:
            route = await self.client.namesrv.get_route(self.lite.bind_topic)
            brokers = [
                (name, addr)
                for name in sorted({mq.broker_name for mq in route.read_queues()})
                if (addr := route.master_addr(name)) is not None
            ]
        if not brokers:
            raise NoRouteError(  # a failover: the master comes back
                f"no broker of {self.lite.bind_topic!r} has a master", retriable=True
            )
        if self._unheard and action is not LiteAction.COMPLETE_REMOVE:
            adding = lite_topics if action is LiteAction.PARTIAL_ADD else ()
            dropped = await self._learn_dropped(brokers, action, adding)
            if dropped and action is LiteAction.COMPLETE_ADD:
                lite_topics = set(lite_topics) - dropped

        failed: list[RocketMQError] = []

        async def one(addr: str) -> None:
            try:
                await self.lite_requests.sync_lite(
                    addr, client_id=self.client_id, group=self.group,
                    topic=self.lite.bind_topic, action=action.value, lite_topics=lite_topics,
                    offset=None if offset is None else (offset.kind, offset.value),
                )  # fmt: skip
            except RocketMQError as err:
                self.state.log.warning("lite_sync_failed", broker=addr, action=action.value,
                                       error=str(err))  # fmt: skip
                failed.append(err)

        # Every broker, at once: a lite topic's messages may be on any of them. A failure
        # is raised once all have answered, as one typed error (the set does not change;
        # a later resync repairs the brokers that took it).
        async with anyio.create_task_group() as tg:
            for _name, addr in brokers:
                self._busy(addr)
                tg.start_soon(one, addr)
        if failed:
            raise one_error(failed)

    async def receive(
        self, max_messages: int, invisible: float, early: Early | None = None
    ) -> list[PopMessage]:  # a pop's answer comes whole: ``early`` is not called
        brokers = self._brokers()
        if not brokers:
            raise NoRouteError(f"no readable queue of {self.lite.bind_topic!r} has a master")
        broker_name, addr = self._least_polled(brokers, lambda b: b[1])
        result = await self._polled(addr, addr, lambda: self.lite_requests.pop_lite(
            addr, client_id=self.client_id, group=self.group, topic=self.lite.bind_topic,
            broker_name=broker_name, max_nums=max_messages,
            invisible_ms=int(invisible * 1000), poll_ms=self._poll_ms,
            timeout=self._poll_ms / 1000 + self.state.config.request_timeout + 5,
        ))  # fmt: skip
        self._set_aside(addr, self.lite.bind_topic, result)
        if result.messages or result.undecodable:
            self._busy(addr)
        for m in result.messages:
            m.topic = unwrap(self._namespace, m.topic)  # the application's name
        return result.messages

    def _lite_topic(self, msg: PopMessage) -> str | None:
        return msg.lite_topic


def one_error(errors: list[RocketMQError]) -> RocketMQError:
    """The error to raise for an update some brokers refused: the quota's refusal if one
    said so, else one that retrying will not cure, else the first; the others were
    logged where they failed. Its ``retriable`` says whether sending the update again
    may help."""
    quota = [e for e in errors if isinstance(e, LiteQuotaExceededError)]
    final = [e for e in errors if not e.retriable]
    return (quota or final or errors)[0]
