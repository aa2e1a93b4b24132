"""Rebalance passes against fakes: request counts and memoised allocation.

The real broker tests (tests/integration) show that consumers split and move queues;
these pin what a pass costs, which only a fake can count exactly: how many member-list
queries it sends, whether unchanged inputs re-run the strategy, what it starts and stops.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from typing import Any, cast

import anyio
import pytest

from aiorocket._log import get_logger
from aiorocket.client.broker import BrokerClient
from aiorocket.client.namesrv import NameServerClient
from aiorocket.consumer import rebalance
from aiorocket.consumer.allocation import allocate_averagely
from aiorocket.consumer.brokers import BrokerFinder
from aiorocket.consumer.config import ConsumerConfig
from aiorocket.consumer.membership import Membership
from aiorocket.consumer.process_queue import ProcessQueue
from aiorocket.consumer.state import ConsumerState
from aiorocket.errors import ConnectionClosedError, TopicNotExistError
from aiorocket.message import MessageQueue
from aiorocket.protocol.codes import ResponseCode
from aiorocket.protocol.command import RemotingCommand
from aiorocket.protocol.route import TopicRoute
from aiorocket.protocol.subscription import Subscription
from aiorocket.remoting.pool import ConnectionPool

pytestmark = pytest.mark.anyio

BROKERS = {"broker-a": "10.0.0.1:10911", "broker-b": "10.0.0.2:10911"}


def route_body(brokers: Sequence[str], queues: int = 8) -> bytes:
    return json.dumps(
        {
            "queueDatas": [
                {"brokerName": b, "readQueueNums": queues, "writeQueueNums": queues, "perm": 6}
                for b in brokers
            ],
            "brokerDatas": [
                {"cluster": "c", "brokerName": b, "brokerAddrs": {"0": BROKERS[b]}} for b in brokers
            ],
        }
    ).encode()


class FakeNamesrv:
    def __init__(self, routes: dict[str, TopicRoute]) -> None:
        self.routes = routes

    async def get_route(self, topic: str) -> TopicRoute:
        try:
            return self.routes[topic]
        except KeyError:
            raise TopicNotExistError(17, f"no route for {topic}") from None

    def cached_route(self, topic: str) -> TopicRoute | None:
        return self.routes.get(topic)


class FakeBroker:
    def __init__(self, members: list[str]) -> None:
        self.members = members
        self.calls: Counter[str] = Counter()
        self.down: set[str] = set()

    async def get_consumer_ids(self, addr: str, group: str) -> list[str]:
        self.calls[f"ids {addr}"] += 1
        if addr in self.down:
            raise ConnectionClosedError(f"{addr} is down")
        return list(self.members)

    async def get_max_offset(self, addr: str, mq: MessageQueue) -> int:
        self.calls["max"] += 1
        return 0

    async def get_min_offset(self, addr: str, mq: MessageQueue) -> int:
        self.calls["min"] += 1
        return 0


class ConnectedPool:
    """Connected to every broker of the current routes: none is new to us (introducing
    a consumer to new brokers is tested on the scripted cluster)."""

    def __init__(self, routes: dict[str, TopicRoute]) -> None:
        self._routes = routes

    @property
    def addresses(self) -> list[str]:
        return sorted({addr for r in self._routes.values() for addr in r.all_addrs()})


class FakeOffsets:
    def __init__(self) -> None:
        self.persisted: dict[MessageQueue, int] = {}

    async def read(self, mq: MessageQueue) -> int | None:
        return None

    async def persist(self, mq: MessageQueue, offset: int) -> None:
        self.persisted[mq] = offset


class CountingStrategy:
    name = "AVG"

    def __init__(self) -> None:
        self.calls = 0

    def __call__(
        self, group: str, client_id: str, queues: Sequence[MessageQueue], cids: Sequence[str]
    ) -> list[MessageQueue]:
        self.calls += 1
        return allocate_averagely(group, client_id, queues, cids)


class Recorder:
    """The engine's side of a rebalance (QueueControl) and membership, recorded."""

    def __init__(self, state: ConsumerState) -> None:
        self._state = state
        self.started: list[MessageQueue] = []
        self.revoked: list[MessageQueue] = []
        self.assigned_calls: list[list[MessageQueue]] = []
        self.rejoins = 0

    async def start_queue(self, pq: ProcessQueue, sub: Subscription) -> None:
        assert sub.topic == pq.mq.topic
        self.started.append(pq.mq)

    async def revoke(self, pqs: list[ProcessQueue]) -> None:
        for pq in pqs:
            self.revoked.append(pq.mq)
            del self._state.process_queues[pq.mq]

    async def assigned(self, mqs: list[MessageQueue]) -> None:
        self.assigned_calls.append(mqs)

    async def send_heartbeats(self, *, starting: bool = False) -> None:
        self.rejoins += 1  # the rebalancer heartbeats when the member list lacks us

    async def heartbeat_to(self, addr: str) -> None:
        raise AssertionError("every broker is connected already (ConnectedPool)")

    async def master(self, mq: MessageQueue) -> str | None:
        return BROKERS[mq.broker_name]

    async def reader(self, mq: MessageQueue) -> str | None:
        return BROKERS[mq.broker_name]


class FakeConsumer:
    """A real Rebalancer and ConsumerState, with fake brokers, routes and engine."""

    def __init__(self, topics: dict[str, list[str]], members: list[str]) -> None:
        self.state = ConsumerState("g", ConsumerConfig(), get_logger("test"))
        self.state.subscriptions.update({t: Subscription(t) for t in topics})
        self.routes = {t: TopicRoute.from_json(t, route_body(b)) for t, b in topics.items()}
        self.broker = FakeBroker(members)
        self.offset_store = FakeOffsets()
        self.allocate = CountingStrategy()
        self.recorder = Recorder(self.state)
        self.rebalancer = rebalance.Rebalancer(
            self.state,
            "me",
            cast(BrokerClient, self.broker),
            cast(NameServerClient, FakeNamesrv(self.routes)),
            cast(ConnectionPool, ConnectedPool(self.routes)),
            cast(Membership, self.recorder),
            cast(BrokerFinder, self.recorder),
            self.offset_store,
            self.allocate,
            self.recorder,
        )

    @property
    def process_queues(self) -> dict[MessageQueue, ProcessQueue]:
        return self.state.process_queues

    @property
    def subscriptions(self) -> dict[str, Subscription]:
        return self.state.subscriptions

    @property
    def started(self) -> list[MessageQueue]:
        return self.recorder.started

    @property
    def revoked(self) -> list[MessageQueue]:
        return self.recorder.revoked

    @property
    def assigned_calls(self) -> list[list[MessageQueue]]:
        return self.recorder.assigned_calls

    @property
    def rejoins(self) -> int:
        return self.recorder.rejoins

    @property
    def joined(self) -> bool:
        return self.state.joined

    @property
    def auto_commit(self) -> bool:
        return self.state.auto_commit

    @auto_commit.setter
    def auto_commit(self, value: bool) -> None:
        self.state.auto_commit = value


async def run_pass(consumer: FakeConsumer) -> None:
    await consumer.rebalancer.rebalance()


def state(consumer: FakeConsumer) -> rebalance.RebalanceState:
    return consumer.rebalancer.memory


def id_queries(consumer: FakeConsumer) -> int:
    return sum(n for k, n in consumer.broker.calls.items() if k.startswith("ids "))


async def test_one_member_query_per_pass_whatever_the_topic_count() -> None:
    topics = {f"t{i:03d}": ["broker-a"] for i in range(125)}
    consumer = FakeConsumer(topics, ["me", "other"])
    await run_pass(consumer)
    assert id_queries(consumer) == 1
    assert len(consumer.process_queues) == 125 * 8 // 2
    assert consumer.allocate.calls == 125
    # Every topic's queues arrived in one listener call, their start offsets committed.
    assert [len(c) for c in consumer.assigned_calls] == [500]
    assert set(consumer.offset_store.persisted) == set(consumer.process_queues)
    assert all(not pq.tracker.dirty for pq in consumer.process_queues.values())
    await run_pass(consumer)
    assert id_queries(consumer) == 2


async def test_at_most_one_member_query_per_broker() -> None:
    # Topics only on a, only on b, and on both: b-only topics cannot use a's answer.
    topics: dict[str, list[str]] = {}
    for i in range(10):
        topics[f"a{i}"] = ["broker-a"]
        topics[f"b{i}"] = ["broker-b"]
        topics[f"ab{i}"] = ["broker-a", "broker-b"]
    consumer = FakeConsumer(topics, ["me"])
    await run_pass(consumer)
    calls = consumer.broker.calls
    assert calls[f"ids {BROKERS['broker-a']}"] == 1
    assert calls[f"ids {BROKERS['broker-b']}"] == 1
    assert len(consumer.process_queues) == 10 * 8 + 10 * 8 + 10 * 16


async def test_unchanged_inputs_do_not_reallocate() -> None:
    consumer = FakeConsumer({f"t{i}": ["broker-a", "broker-b"] for i in range(20)}, ["me", "x"])
    await run_pass(consumer)
    owned = dict(consumer.process_queues)
    allocations, started = consumer.allocate.calls, len(consumer.started)
    assert allocations == 20 and state(consumer).allocations == 20
    for _ in range(3):
        await run_pass(consumer)
    assert consumer.allocate.calls == allocations  # no re-sort, no strategy call
    assert len(consumer.started) == started and consumer.revoked == []
    assert consumer.process_queues == owned
    assert len(consumer.assigned_calls) == 1


async def test_member_change_reallocates_and_moves_queues() -> None:
    consumer = FakeConsumer({f"t{i}": ["broker-a"] for i in range(4)}, ["me"])
    await run_pass(consumer)
    assert len(consumer.process_queues) == 32
    consumer.broker.members = ["me", "zz-other"]  # a member joined
    await run_pass(consumer)
    assert consumer.allocate.calls == 8
    assert len(consumer.process_queues) == 16 and len(consumer.revoked) == 16
    consumer.broker.members = ["zz-other", "me"]  # same members, other order
    await run_pass(consumer)
    assert consumer.allocate.calls == 8
    consumer.broker.members = ["me"]
    await run_pass(consumer)
    assert consumer.allocate.calls == 12 and len(consumer.process_queues) == 32


async def test_new_route_object_reallocates_that_topic_only() -> None:
    consumer = FakeConsumer({"t1": ["broker-a"], "t2": ["broker-a"]}, ["me"])
    await run_pass(consumer)
    consumer.routes["t2"] = TopicRoute.from_json("t2", route_body(["broker-a"], queues=4))
    await run_pass(consumer)
    assert consumer.allocate.calls == 3
    assert len([mq for mq in consumer.process_queues if mq.topic == "t2"]) == 4
    assert len(consumer.revoked) == 4


async def test_a_failing_broker_is_asked_once_and_another_serves() -> None:
    topics = {f"t{i}": ["broker-a", "broker-b"] for i in range(30)}
    consumer = FakeConsumer(topics, ["me"])
    consumer.broker.down.add(BROKERS["broker-a"])
    await run_pass(consumer)
    assert consumer.broker.calls[f"ids {BROKERS['broker-a']}"] <= 1
    assert consumer.broker.calls[f"ids {BROKERS['broker-b']}"] == 1
    assert len(consumer.process_queues) == 30 * 16


async def test_all_brokers_failing_keeps_the_current_queues() -> None:
    consumer = FakeConsumer({f"t{i}": ["broker-a"] for i in range(5)}, ["me"])
    await run_pass(consumer)
    consumer.broker.down.add(BROKERS["broker-a"])
    await run_pass(consumer)
    assert id_queries(consumer) == 2  # one failed query, not one per topic
    assert len(consumer.process_queues) == 40 and consumer.revoked == []


async def test_a_group_whose_master_is_down_keeps_its_queues_and_its_slave_answers() -> None:
    consumer = FakeConsumer({"t": ["broker-a", "broker-b"]}, ["me"])
    slave = "10.0.0.12:10911"
    body = json.loads(route_body(["broker-a", "broker-b"]))
    body["brokerDatas"][1]["brokerAddrs"] = {"1": slave}  # b's master is down
    consumer.routes["t"] = TopicRoute.from_json("t", json.dumps(body).encode())
    consumer.broker.down.add(BROKERS["broker-a"])  # a cannot tell the members either
    await run_pass(consumer)
    assert consumer.broker.calls[f"ids {slave}"] == 1
    assert len(consumer.process_queues) == 16
    assert {mq.broker_name for mq in consumer.process_queues} == {"broker-a", "broker-b"}


async def test_not_registered_yet_takes_nothing_and_rejoins() -> None:
    consumer = FakeConsumer({f"t{i}": ["broker-a"] for i in range(5)}, ["someone-else"])
    await run_pass(consumer)
    assert consumer.process_queues == {} and consumer.allocate.calls == 0
    assert consumer.rejoins == 1
    assert not consumer.joined  # not ready: no assignment computed for us


async def test_joined_once_every_topic_has_an_assignment() -> None:
    """Readiness (Consumer.has_joined): a pass that was a member for every topic, even
    when the strategy gave it no queue; not before the missing topic has a route."""
    consumer = FakeConsumer({"t1": ["broker-a"], "t2": ["broker-a"]}, ["me"])
    consumer.subscriptions["missing"] = Subscription("missing")
    await run_pass(consumer)
    assert not consumer.joined and len(consumer.process_queues) == 16
    del consumer.subscriptions["missing"]
    consumer.broker.members = ["a", "b", "c", "d", "e", "f", "g", "h", "i", "me"]
    await run_pass(consumer)
    assert consumer.joined


async def test_a_member_missing_from_the_list_drops_its_queues_and_rejoins() -> None:
    """The others allocate without us: keeping our queues would consume them twice."""
    consumer = FakeConsumer({"t1": ["broker-a"], "t2": ["broker-b"]}, ["me", "other"])
    await run_pass(consumer)
    owned = set(consumer.process_queues)
    assert len(owned) == 8 and consumer.rejoins == 0
    consumer.broker.members = ["other"]  # the broker forgot us (expired heartbeats)
    await run_pass(consumer)
    assert consumer.process_queues == {}
    assert set(consumer.revoked) == owned  # revoked: handlers awaited, offsets persisted
    assert consumer.rejoins == 1
    consumer.broker.members = ["me", "other"]  # the heartbeat got through
    await run_pass(consumer)
    assert set(consumer.process_queues) == owned


async def test_without_auto_commit_the_start_is_left_to_the_flusher() -> None:
    consumer = FakeConsumer({"t": ["broker-a"]}, ["me"])
    consumer.auto_commit = False
    await run_pass(consumer)
    assert consumer.offset_store.persisted == {}
    assert all(pq.tracker.dirty for pq in consumer.process_queues.values())


async def test_passes_do_not_overlap() -> None:
    consumer = FakeConsumer({f"t{i}": ["broker-a"] for i in range(10)}, ["me"])
    async with anyio.create_task_group() as tg:
        for _ in range(3):
            tg.start_soon(run_pass, consumer)
    # Overlapping passes would each start the same queues.
    assert len(consumer.started) == len(set(consumer.started)) == 80


# ------------------------------------------------------------------- route cache


class FakePool:
    """Answers GET_ROUTEINFO_BY_TOPIC from ``bodies``, counting requests in flight."""

    def __init__(self, bodies: dict[str, bytes]) -> None:
        self.bodies = bodies
        self.requests = 0
        self.in_flight = 0
        self.max_in_flight = 0

    async def request(self, addr: str, cmd: RemotingCommand, timeout: float) -> RemotingCommand:
        self.requests += 1
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            await anyio.lowlevel.checkpoint()
            body = self.bodies.get(cmd.ext_fields["topic"])
            if body is None:
                return RemotingCommand.response_to(cmd, ResponseCode.TOPIC_NOT_EXIST, "none")
            return RemotingCommand.response_to(cmd, ResponseCode.SUCCESS, body=body)
        finally:
            self.in_flight -= 1


async def test_refresh_keeps_unchanged_routes_and_replaces_changed_ones() -> None:
    bodies = {f"t{i}": route_body(["broker-a"]) for i in range(40)}
    pool = FakePool(bodies)
    ns = NameServerClient(cast(Any, pool), "127.0.0.1:9876")
    await ns.prefetch(bodies)
    assert pool.requests == 40 and 1 < pool.max_in_flight <= 16
    before = {t: ns.cached_route(t) for t in bodies}
    bodies["t3"] = route_body(["broker-a", "broker-b"])
    await ns.refresh_all()
    assert pool.requests == 80
    for t, route in before.items():
        if t == "t3":
            assert ns.cached_route(t) is not route and ns.cached_route(t) != route
        else:
            assert ns.cached_route(t) is route
    assert await ns.prefetch(bodies) == {}  # everything cached: no request
    assert pool.requests == 80
    failed = await ns.prefetch(["t1", "missing"])
    assert list(failed) == ["missing"] and isinstance(failed["missing"], TopicNotExistError)
    assert pool.requests == 81


async def test_equal_route_in_another_serialisation_keeps_the_object() -> None:
    body = route_body(["broker-a"])
    pool = FakePool({"t": body})
    ns = NameServerClient(cast(Any, pool), "127.0.0.1:9876")
    route = await ns.get_route("t")
    pool.bodies["t"] = json.dumps(json.loads(body), indent=2).encode()
    await ns.refresh_all()
    assert ns.cached_route("t") is route
