"""Group membership under faults: a broker that forgot us, a connection re-opened, a
heartbeat under way as the close unregisters.

Against the scripted cluster of :mod:`tests.unit.consumer_fakes`: a real broker cannot
be made to drop one consumer from its member list, or refuse its heartbeats while
serving its pulls, on demand.
"""

from __future__ import annotations

import time
from functools import partial

import anyio
import pytest

from aiorocket.consumer import Consumer
from aiorocket.message import MessageQueue
from aiorocket.protocol.codes import RequestCode
from aiorocket.protocol.command import RemotingCommand
from aiorocket.testing.fake_remoting import ServerHandler, ServerSession

from .consumer_fakes import (
    TOPIC,
    Collector,
    FakeBroker,
    FakeCluster,
    PopBroker,
    consumer_of,
    engine_of,
    running,
)
from .virtual_clock import ON_VIRTUAL_CLOCKS

pytestmark = pytest.mark.anyio


class Listener:
    def __init__(self) -> None:
        self.owned: set[MessageQueue] = set()
        self.changed = anyio.Event()

    async def on_queues_revoked(self, queues: list[MessageQueue]) -> None:
        self.owned -= set(queues)
        self.changed.set()
        self.changed = anyio.Event()

    async def on_queues_assigned(self, queues: list[MessageQueue]) -> None:
        self.owned |= set(queues)
        self.changed.set()
        self.changed = anyio.Event()

    def topic_queues(self) -> set[MessageQueue]:
        return {mq for mq in self.owned if mq.topic == TOPIC}


@ON_VIRTUAL_CLOCKS
async def test_a_forgotten_member_drops_its_queues_and_soon_takes_its_share_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # On a virtual clock (the fake broker and the consumer in one loop, time.monotonic
    # the loop's): the pass 1 s later cost ~2 s of wall clock a backend before, and its
    # 8 s guard against the 20 s rebalance_interval is exact whatever the load.
    monkeypatch.setattr(time, "monotonic", anyio.current_time)
    broker = FakeBroker("broker-a", 0)
    cluster = FakeCluster({"broker-a": [broker]})
    broker.add(0, b"m0")
    broker.add(1, b"m1")
    handler = Collector(2)
    listener = Listener()
    async with running(cluster), consumer_of(cluster, handler, listener=listener) as consumer:
        await forgotten_scenario(consumer, broker, listener, handler.done)
    assert sorted(handler.got) == [b"m0", b"m1"]  # nothing consumed twice meanwhile


async def forgotten_scenario(
    consumer: Consumer, broker: FakeBroker, listener: Listener, consumed: anyio.Event
) -> None:
    with anyio.fail_after(10):
        await consumed.wait()
    assert len(listener.topic_queues()) == 2
    # The broker expired our channel (heartbeats lost) and a peer joined: the peer
    # allocates every queue to itself. Our heartbeats keep failing, pulls still work.
    broker.members = {"peer"}
    broker.accept_heartbeats = False
    heartbeats = len(broker.heartbeats)
    engine_of(consumer).state.request_rebalance()
    with anyio.fail_after(10):
        await broker.heartbeat_seen.wait()  # a heartbeat right away...
    assert listener.topic_queues() == set()  # ...after the queues were dropped
    assert len(broker.heartbeats) == heartbeats + 1
    assert broker.offsets[(TOPIC, 0)] == 1 and broker.offsets[(TOPIC, 1)] == 1
    broker.accept_heartbeats = True
    # Well within rebalance_interval (20 s): the next pass comes soon.
    with anyio.fail_after(8):
        while not listener.topic_queues():
            await listener.changed.wait()
    assert len(listener.topic_queues()) == 1  # our share next to the peer


async def test_a_reopened_broker_connection_gets_a_heartbeat_at_once() -> None:
    broker = FakeBroker("broker-a", 0)
    cluster = FakeCluster({"broker-a": [broker]})
    async with running(cluster), consumer_of(cluster) as consumer:
        await reconnect_scenario(consumer, broker)


async def reconnect_scenario(consumer: Consumer, broker: FakeBroker) -> None:
    first = {session for session, _ in broker.heartbeats}
    assert len(first) == 1
    # The broker restarted (or a NAT dropped the connection): it knows nothing of us.
    for session in broker.server.sessions:
        await session.close()
    broker.members.clear()
    # Far below heartbeat_interval (30 s): the new connection carries one at once.
    with anyio.fail_after(8):
        while not {session for session, _ in broker.heartbeats} - first:
            await broker.heartbeat_seen.wait()
    assert consumer.client_id in broker.members


async def test_a_reopened_broker_connection_brings_a_rebalance_at_once() -> None:
    """A peer joined while our connection was down: the broker's change notice went to
    the dead connection. The member used to keep every queue (consumed twice, its
    commits moving the peer's offset back) until its next pass, rebalance_interval
    (20 s) later (simulator pull_remoting 2070); after the heartbeat on the new
    connection it rebalances at once, as the Java client does."""
    broker = FakeBroker("broker-a", 0)
    cluster = FakeCluster({"broker-a": [broker]})
    listener = Listener()
    async with running(cluster), consumer_of(cluster, listener=listener):
        with anyio.fail_after(10):
            while len(listener.topic_queues()) != 2:
                await listener.changed.wait()
        broker.members = {"peer"}  # we are listed again by the heartbeat that follows
        for session in broker.server.sessions:
            await session.close()
        # Far below rebalance_interval (20 s): no notice comes, the reconnect is enough.
        with anyio.fail_after(8):
            while len(listener.topic_queues()) != 1:
                await listener.changed.wait()


async def test_a_client_listed_twice_still_takes_every_queue() -> None:
    """A broker lists a client once per channel: after a half-open connection was
    replaced, the old channel stays until the broker expires it. The consumer used to
    count itself twice and take half of the queues, leaving the rest to nobody
    (found by the half-open scenario of tests/integration/test_fault_campaign.py)."""
    broker = FakeBroker("broker-a", 0)
    cid = "10.0.0.1@solo"
    broker.stale_channels = [cid]
    async with running(FakeCluster({"broker-a": [broker]})) as cluster:
        consumer = consumer_of(cluster, Collector(1), client_id=cid)
        async with consumer:
            assert {mq.queue_id for mq in consumer.assignment() if mq.topic == TOPIC} == {0, 1}


class LateHeartbeat:
    """A broker that runs heartbeats on an executor of their own, as 5.x does (HEART_BEAT
    on the heartbeat executor, UNREGISTER_CLIENT on the client-manage one): once ``lag``
    is set, the next heartbeat waits up to ``lag`` seconds after it arrived before it is
    applied and answered, and an UNREGISTER_CLIENT arriving meanwhile is applied first."""

    def __init__(self) -> None:
        self.lag: float | None = None
        self.held = anyio.Event()  # the lagging heartbeat arrived
        self.applied = anyio.Event()  # ... and was applied
        self.unregistered = anyio.Event()
        self.order: list[str] = []  # "heartbeat" (the lagging one) and "unregister"

    async def hold_next(self, lag: float) -> None:
        """Make the next heartbeat lag; returns once it arrived (under way)."""
        self.lag = lag
        with anyio.fail_after(10):
            await self.held.wait()

    async def order_applied(self) -> list[str]:
        """Once the held heartbeat was applied: the order of it and the unregister."""
        with anyio.fail_after(10):
            await self.applied.wait()
        return self.order

    async def handle(
        self, apply: ServerHandler, session: ServerSession, cmd: RemotingCommand
    ) -> None:
        if cmd.code == RequestCode.HEART_BEAT and self.lag is not None:
            lag, self.lag = self.lag, None
            self.held.set()
            with anyio.move_on_after(lag):
                await self.unregistered.wait()
            self.order.append("heartbeat")
            await apply(session, cmd)
            self.applied.set()
            return
        await apply(session, cmd)
        if cmd.code == RequestCode.UNREGISTER_CLIENT:
            self.order.append("unregister")
            self.unregistered.set()


class HangingHeartbeat:
    """Once ``hang`` is set, the next heartbeat's connection goes silent as it arrives
    (half-open: never answered, nothing more read from it); a new connection works. The
    session of each UNREGISTER_CLIENT is kept (``unregisters``)."""

    def __init__(self) -> None:
        self.hang = False
        self.hung = anyio.Event()
        self.unregisters: list[int] = []

    async def handle(
        self, apply: ServerHandler, session: ServerSession, cmd: RemotingCommand
    ) -> None:
        if cmd.code == RequestCode.HEART_BEAT and self.hang:
            self.hang = False
            session.stall()
            self.hung.set()
            return
        if cmd.code == RequestCode.UNREGISTER_CLIENT:
            self.unregisters.append(id(session))
        await apply(session, cmd)


class PullBrokerLate(FakeBroker):
    def __init__(self) -> None:
        super().__init__("broker-a", 0)
        self.late = LateHeartbeat()
        self.hangs = HangingHeartbeat()

    async def handle(self, session: ServerSession, cmd: RemotingCommand) -> None:
        await self.hangs.handle(partial(self.late.handle, super().handle), session, cmd)


class PopBrokerLate(PopBroker):
    def __init__(self) -> None:
        super().__init__()
        self.late = LateHeartbeat()

    async def handle(self, session: ServerSession, cmd: RemotingCommand) -> None:
        await self.late.handle(super().handle, session, cmd)


@pytest.mark.parametrize("mode", ["pull", "pop"])
async def test_a_heartbeat_under_way_as_the_close_begins_goes_before_the_unregister(
    mode: str,
) -> None:
    """Simulator pull_remoting seed 9360: a member's heartbeat went out at the instant its
    close began; the close cancelled the heartbeat loop (not the request: it was sent)
    and unregistered, and the broker applied the unregister first, then the heartbeat,
    listing the closed member again (its queues handed to it until the broker expires
    the channel, 120 s on 5.5.0). The unregister now waits for the heartbeat's answer.
    The POP consumer over remoting shares the membership (and had the same defect)."""
    broker = PullBrokerLate() if mode == "pull" else PopBrokerLate()
    cluster = FakeCluster({"broker-a": [broker]})
    settings = {"heartbeat_interval": 0.2, "request_timeout": 3.0}
    async with running(cluster):
        if mode == "pull":
            consumer = consumer_of(cluster, **settings)
        else:
            consumer = consumer_of(cluster, Collector(1), consume_mode="pop", **settings)
        async with consumer:
            with anyio.fail_after(10):
                while consumer.client_id not in broker.members:
                    await broker.heartbeat_seen.wait()
            await broker.late.hold_next(1.0)  # well inside its request_timeout (3 s)
        # Closed as the heartbeat was under way (on the old code the broker applied it
        # after the close, as the unregister came in first).
        assert await broker.late.order_applied() == ["heartbeat", "unregister"]
        assert consumer.client_id not in broker.members


async def test_the_close_unregisters_within_its_bound_when_the_heartbeat_under_way_hangs() -> None:
    """The unregister waits for a heartbeat under way; one that hangs ends by its request
    timeout, its connection closed, and the unregister then goes once, on a new
    connection: the wait and the try fit the close's bound as the two tries did (a guard
    of the fix above: the old code passes it too, not waiting)."""
    broker = PullBrokerLate()
    cluster = FakeCluster({"broker-a": [broker]})
    timeout = 1.0
    async with running(cluster):
        consumer = consumer_of(cluster, heartbeat_interval=0.2, request_timeout=timeout)
        async with consumer:
            with anyio.fail_after(10):
                while consumer.client_id not in broker.members:
                    await broker.heartbeat_seen.wait()
            broker.hangs.hang = True
            with anyio.fail_after(10):
                await broker.hangs.hung.wait()
            stalled = {id(s) for s in broker.server.sessions if s.stalled}
        # The heartbeat's timeout (1 s from its start), then one try: about 1 s of the
        # close's bound (5 s), which cuts the unregister when it runs out (none sent).
    assert consumer.client_id not in broker.members
    assert len(broker.hangs.unregisters) == 1 and not stalled & set(broker.hangs.unregisters)
