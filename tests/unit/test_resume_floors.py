"""Resume floors (aiorocket.consumer.offsets): a broker restarted after a crash has older
offsets than the group committed, and a queue must not resume below this client's own
commits. First the rule on its own (pure, no fakes), then the rebalancer and the offset
check that apply it, then the member list a restarted broker gives. The real broker
SIGKILL: tests/integration/test_fault_campaign.py."""

from __future__ import annotations

from typing import cast

import anyio
import pytest

from aiorocket._log import get_logger
from aiorocket.client.broker import BrokerClient
from aiorocket.consumer import rebalance
from aiorocket.consumer.committer import AutoCommit, verify_offset
from aiorocket.consumer.offsets import OffsetTracker, ResumeFloors, resume_offset
from aiorocket.consumer.operator_requests import OperatorRequests
from aiorocket.consumer.process_queue import ProcessQueue
from aiorocket.errors import ConnectionClosedError
from aiorocket.message import MessageQueue
from aiorocket.protocol import fastjson
from aiorocket.protocol.codes import RequestCode
from aiorocket.protocol.command import RemotingCommand
from aiorocket.protocol.route import TopicRoute

from .test_consumed_elsewhere import MemoryStore
from .test_rebalance import BROKERS, FakeConsumer, FakeOffsets, route_body, run_pass

pytestmark = pytest.mark.anyio

A0 = MessageQueue("t", "broker-a", 0)
B0 = MessageQueue("t", "broker-b", 0)


# -- the rule --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("stored", "floor", "resume"),
    [
        (None, None, None),  # nothing known: the usual start
        (50, None, None),  # no floor (reset, another member's turn): the stored offset
        (None, 70, 70),  # the broker lost the group's offsets altogether
        (50, 70, 70),  # the broker lost the last commits
        (70, 70, None),  # nothing lost
        (90, 70, None),  # another member moved on: its offset wins
        (0, 0, None),
    ],
)
def test_the_floor_wins_only_over_a_missing_or_lower_stored_offset(
    stored: int | None, floor: int | None, resume: int | None
) -> None:
    assert resume_offset(stored, floor) == resume


def handled_up_to(tracker: OffsetTracker, end: int) -> None:
    """Pull and handle everything from the tracker's next offset to ``end``."""
    start = tracker.next_offset
    tracker.add(range(start, end), end)
    for offset in range(start, end):
        tracker.done(offset)


def test_the_engine_commits_committable_and_the_application_its_highest_commit() -> None:
    tracker = OffsetTracker(10)  # started from the store: committed
    assert tracker.high_commit == 10
    handled_up_to(tracker, 40)
    tracker.add([40, 41], 42)  # in flight: below them nothing is lost
    assert tracker.resume_floor(auto_commit=True) == 40
    assert tracker.resume_floor(auto_commit=False) == 10  # the application committed nothing
    tracker.mark_committed(30)
    tracker.mark_committed(25)  # an older commit never lowers it
    assert tracker.high_commit == 30 and tracker.resume_floor(auto_commit=False) == 30


def test_a_reset_clears_the_floor_until_its_own_commit() -> None:
    tracker = OffsetTracker(10)
    handled_up_to(tracker, 40)
    tracker.mark_committed(40)
    tracker.reset(5)  # backwards: a seek, an operator's reset, OFFSET_ILLEGAL
    assert tracker.high_commit is None and tracker.resume_floor(auto_commit=False) is None
    assert tracker.resume_floor(auto_commit=True) == 5  # the new position, not 40
    tracker.mark_committed(5)
    assert tracker.high_commit == 5


def test_the_table_keeps_takes_once_and_forgets() -> None:
    floors = ResumeFloors()
    floors.keep(B0, 70)
    floors.keep(A0, None)  # nothing to keep
    assert list(floors) == [B0] and floors.get(B0) == 70
    assert floors.take(B0) == 70 and floors.take(B0) is None  # used once
    floors.keep(B0, 70)
    floors.keep(B0, None)  # a later revoke with nothing known replaces it
    assert len(floors) == 0
    floors.keep(A0, 1)
    floors.keep(B0, 2)
    floors.forget([B0, MessageQueue("t", "broker-c", 0)])
    assert list(floors) == [A0]


# -- the rebalancer ----------------------------------------------------------------------


class StoredOffsets(FakeOffsets):
    """The brokers' stored offsets, per queue (FakeOffsets stores none)."""

    def __init__(self) -> None:
        super().__init__()
        self.stored: dict[MessageQueue, int] = {}

    async def read(self, mq: MessageQueue) -> int | None:
        return self.stored.get(mq)

    async def persist(self, mq: MessageQueue, offset: int) -> None:
        await super().persist(mq, offset)
        self.stored[mq] = offset


def two_broker_consumer(members: list[str]) -> tuple[FakeConsumer, StoredOffsets]:
    consumer = FakeConsumer({"t": ["broker-a", "broker-b"]}, members)
    store = StoredOffsets()
    consumer.offset_store = store
    consumer.rebalancer._offset_store = store
    return consumer, store


def route(consumer: FakeConsumer, brokers: list[str]) -> None:
    """The NameServer's route of ``t`` changes (a new object: the pass re-allocates)."""
    consumer.routes["t"] = TopicRoute.from_json("t", route_body(brokers, queues=1))


async def consumed_until_broker_b_dies(
    consumer: FakeConsumer, store: StoredOffsets, handled: int
) -> ProcessQueue:
    """Own t@broker-b:0, handle its first ``handled`` messages (the broker kept 0 of
    the commits), then broker-b leaves the route and the queue is revoked."""
    route(consumer, ["broker-a", "broker-b"])
    await run_pass(consumer)
    pq = consumer.process_queues[B0]
    handled_up_to(pq.tracker, handled)
    route(consumer, ["broker-a"])
    await run_pass(consumer)
    assert B0 in consumer.revoked and B0 not in consumer.process_queues
    store.stored[B0] = 0  # restarted with what it last wrote to disk
    return pq


async def test_a_queue_back_from_a_crashed_broker_resumes_at_our_commits() -> None:
    consumer, store = two_broker_consumer(["me"])
    await consumed_until_broker_b_dies(consumer, store, handled=70)
    assert consumer.state.resume_floors.get(B0) == 70
    store.persisted.clear()
    route(consumer, ["broker-a", "broker-b"])  # broker-b is back
    await run_pass(consumer)
    assert consumer.process_queues[B0].tracker.next_offset == 70
    assert store.persisted == {B0: 70}  # committed again: the group's record is right
    assert len(consumer.state.resume_floors) == 0  # used once


async def test_a_broker_that_lost_all_of_a_new_groups_offsets() -> None:
    consumer, store = two_broker_consumer(["me"])
    await consumed_until_broker_b_dies(consumer, store, handled=70)
    del store.stored[B0]  # none written yet: no stored offset, not FIRST_OFFSET's 0
    route(consumer, ["broker-a", "broker-b"])
    await run_pass(consumer)
    assert consumer.process_queues[B0].tracker.next_offset == 70


async def test_a_stored_offset_past_the_floor_wins() -> None:
    consumer, store = two_broker_consumer(["me"])
    await consumed_until_broker_b_dies(consumer, store, handled=70)
    store.stored[B0] = 90
    route(consumer, ["broker-a", "broker-b"])
    await run_pass(consumer)
    assert consumer.process_queues[B0].tracker.next_offset == 90


async def test_a_start_that_fails_keeps_the_floor_for_the_next_pass() -> None:
    consumer, store = two_broker_consumer(["me"])
    await consumed_until_broker_b_dies(consumer, store, handled=70)

    async def broken(mq: MessageQueue) -> int | None:
        raise ConnectionClosedError("broker-b is still starting")

    store.read = broken  # type: ignore[method-assign]
    route(consumer, ["broker-a", "broker-b"])
    await run_pass(consumer)
    assert B0 not in consumer.process_queues
    assert consumer.state.resume_floors.get(B0) == 70
    del store.read
    await run_pass(consumer)
    assert consumer.process_queues[B0].tracker.next_offset == 70


async def test_a_queue_given_to_another_member_loses_its_floor() -> None:
    """Back in the route but allocated to another member: it may move the queue
    anywhere (an operator's reset through it too), so coming back to us later, the queue
    starts at the stored offset."""
    consumer, store = two_broker_consumer(["me"])
    await consumed_until_broker_b_dies(consumer, store, handled=70)
    consumer.broker.members = ["me", "other"]  # a member joined while b was away
    route(consumer, ["broker-a", "broker-b"])
    await run_pass(consumer)
    assert B0 not in consumer.process_queues  # other has broker-b:0 now
    assert len(consumer.state.resume_floors) == 0
    store.stored[B0] = 20  # other committed, or an operator reset it
    consumer.broker.members = ["me"]
    await run_pass(consumer)
    assert consumer.process_queues[B0].tracker.next_offset == 20


async def test_a_queue_revoked_for_another_member_keeps_no_floor() -> None:
    consumer, _ = two_broker_consumer(["me"])
    route(consumer, ["broker-a", "broker-b"])
    await run_pass(consumer)
    handled_up_to(consumer.process_queues[B0].tracker, 70)
    consumer.broker.members = ["me", "other"]  # other takes broker-b:0
    await run_pass(consumer)
    assert B0 not in consumer.process_queues and len(consumer.state.resume_floors) == 0


async def test_without_auto_commit_the_floor_is_the_applications_commit() -> None:
    consumer, store = two_broker_consumer(["me"])
    consumer.auto_commit = False
    route(consumer, ["broker-a", "broker-b"])
    await run_pass(consumer)
    pq = consumer.process_queues[B0]
    handled_up_to(pq.tracker, 70)
    pq.tracker.mark_committed(60)  # the application committed 60, not 70
    route(consumer, ["broker-a"])
    await run_pass(consumer)
    assert consumer.state.resume_floors.get(B0) == 60
    store.stored[B0] = 0
    route(consumer, ["broker-a", "broker-b"])
    await run_pass(consumer)
    assert consumer.process_queues[B0].tracker.next_offset == 60
    assert store.stored[B0] == 60  # its own commit, stored again without auto-commit


async def test_an_operators_reset_notice_forgets_the_floor_of_a_queue_not_owned() -> None:
    consumer, store = two_broker_consumer(["me"])
    await consumed_until_broker_b_dies(consumer, store, handled=70)
    operator = OperatorRequests(
        consumer.state, [], None, cast(AutoCommit, None)  # no owned queue to commit
    )
    body = fastjson.dumps_with({}, {"offsetTable": fastjson.dumps_queue_map([(B0, 0)])})
    request = RemotingCommand.request(
        RequestCode.RESET_CONSUMER_CLIENT_OFFSET,
        {"topic": "t", "group": consumer.state.group, "timestamp": "0", "isForce": "true"},
        body.encode(),
    )

    class FromBroker:
        address = BROKERS["broker-b"]

    answer = await operator.reset_offset(FromBroker(), request)  # type: ignore[arg-type]
    assert answer is not None and answer.code == 0
    assert len(consumer.state.resume_floors) == 0
    route(consumer, ["broker-a", "broker-b"])
    await run_pass(consumer)
    assert consumer.process_queues[B0].tracker.next_offset == 0  # the reset wins


# -- a still-owned queue checked after its broker connection was lost --------------------


@pytest.mark.parametrize(
    ("auto_commit", "stored", "written"),
    [(True, 0, [70]), (True, 70, []), (True, None, [70]), (False, 0, [60]), (False, 65, [])],
)
async def test_a_checked_queue_commits_its_floor_again_over_a_lower_stored_offset(
    auto_commit: bool, stored: int | None, written: list[int]
) -> None:
    """The broker restarted before the route lost it: the queue stayed ours and goes on
    from its position; the lost commit is stored again at once (idle, the queue would
    not commit again, and the next member to read the offset would start behind)."""
    store = MemoryStore(stored)
    pq = ProcessQueue(B0, 10)
    handled_up_to(pq.tracker, 70)
    pq.tracker.mark_committed(60)
    pq.mark_unverified()
    assert await verify_offset(store, pq, get_logger("test"), auto_commit=auto_commit)
    assert store.writes == written
    assert pq.tracker.next_offset == 70 and not pq.offset_unverified


# -- the member list of a restarted broker -----------------------------------------------


class RestartedBrokerLists:
    """broker-b restarted: it lists only the members that reached it since."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    async def get_consumer_ids(self, addr: str, group: str) -> list[str]:
        self.asked.append(addr)
        return ["me"] if addr == BROKERS["broker-b"] else ["me", "other"]


async def test_a_broker_connected_again_just_now_is_asked_for_members_last() -> None:
    memory = rebalance.RebalanceState()
    memory.connected_at[BROKERS["broker-b"]] = anyio.current_time()  # reconnected now
    brokers = RestartedBrokerLists()
    for _ in range(20):  # whatever the shuffle
        lists = rebalance._MemberLists(
            cast(BrokerClient, brokers), "g", memory, settle=60.0
        )
        assert await lists.for_brokers([BROKERS["broker-b"], BROKERS["broker-a"]]) == (
            "me", "other",
        )  # fmt: skip
    assert set(brokers.asked) == {BROKERS["broker-a"]}
    # Settled, or the only broker of the topic: asked as before.
    lists = rebalance._MemberLists(cast(BrokerClient, brokers), "g", memory, settle=60.0)
    assert await lists.for_brokers([BROKERS["broker-b"]]) == ("me",)
    brokers.asked.clear()
    for _ in range(20):
        await rebalance._MemberLists(
            cast(BrokerClient, brokers), "g", memory, settle=0.0
        ).for_brokers([BROKERS["broker-b"], BROKERS["broker-a"]])
    assert set(brokers.asked) == {BROKERS["broker-a"], BROKERS["broker-b"]}


async def test_a_settled_broker_that_fails_leaves_the_answer_to_the_restarted_one() -> None:
    memory = rebalance.RebalanceState()
    memory.connected_at[BROKERS["broker-b"]] = anyio.current_time()

    class Down(RestartedBrokerLists):
        async def get_consumer_ids(self, addr: str, group: str) -> list[str]:
            if addr == BROKERS["broker-a"]:
                raise ConnectionClosedError("broker-a is down")
            return await super().get_consumer_ids(addr, group)

    lists = rebalance._MemberLists(cast(BrokerClient, Down()), "g", memory, settle=60.0)
    assert await lists.for_brokers([BROKERS["broker-a"], BROKERS["broker-b"]]) == ("me",)
