"""Group membership under faults: a broker that forgot us, a connection re-opened.

Against the scripted cluster of :mod:`tests.unit.consumer_fakes`: a real broker cannot
be made to drop one consumer from its member list, or refuse its heartbeats while
serving its pulls, on demand.
"""

from __future__ import annotations

import anyio
import pytest

from aiorocket.consumer import Consumer
from aiorocket.message import MessageQueue

from .consumer_fakes import (
    TOPIC,
    Collector,
    FakeBroker,
    FakeCluster,
    consumer_of,
    engine_of,
    running,
)

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


async def test_a_forgotten_member_drops_its_queues_and_soon_takes_its_share_back() -> None:
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
