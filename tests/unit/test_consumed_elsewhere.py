"""A consumer cut off from its broker long enough for another member to consume its
queue resumes from the group's stored offset, not from where it was.

A broker unregisters a client whose connection closes (its channel expired after missed
heartbeats: a frozen process, a long GC pause, a partition); the group's other members
then take the client's queues and commit past it. Continuing from its own position would
consume all of that again and, worse, commit its old offset over theirs. (Fault scenario
6 against the real broker: tests/integration/test_frozen_consumer.py.)
"""

from __future__ import annotations

import anyio
import pytest

from aiorocket._log import get_logger
from aiorocket.client.broker import PULL_COMMIT_OFFSET
from aiorocket.consumer import ConsumeFromWhere, PullConsumer
from aiorocket.consumer.committer import OffsetCommitter, check_commit, verify_offset
from aiorocket.consumer.process_queue import ProcessQueue
from aiorocket.errors import CommitFailedError, RequestTimeoutError, RocketMQError
from aiorocket.message import MessageQueue
from aiorocket.protocol.codes import RequestCode
from aiorocket.protocol.command import RemotingCommand
from aiorocket.testing.fake_remoting import ServerSession

from .consumer_fakes import (
    FAST,
    TOPIC,
    Collector,
    FakeBroker,
    FakeCluster,
    consumer_of,
    engine_of,
    running,
)

pytestmark = pytest.mark.anyio


async def consume_across_a_lost_connection(
    stored_meanwhile: int, more: int
) -> tuple[list[bytes], int]:
    """Consume m0 and m1 (offset 2 committed); then the broker closes our connection
    and, meanwhile, its stored offset becomes ``stored_meanwhile``; then ``more``
    messages arrive. What the handler got (until it got ``2 + more - skipped``), and
    the stored offset after the consumer closed."""
    broker = FakeBroker("broker-a", 0)
    cluster = FakeCluster({"broker-a": [broker]})
    expected = 2 + more - max(0, stored_meanwhile - 2)
    handler = Collector(expected)
    async with running(cluster):
        async with consumer_of(cluster, handler):
            broker.add(0, b"m0", b"m1")
            with anyio.fail_after(10):  # consumed, and offset 2 committed
                while broker.offsets.get((TOPIC, 0)) != 2:
                    await broker.offset_stored.wait()
            broker.offsets[(TOPIC, 0)] = stored_meanwhile
            for session in list(broker.server.sessions):
                await session.close()
            broker.add(0, *(f"m{i}".encode() for i in range(2, 2 + more)))
            with anyio.fail_after(10):
                await handler.done.wait()
        return handler.got, broker.offsets[(TOPIC, 0)]  # the consumer closed: its last commit


async def test_a_queue_consumed_elsewhere_while_disconnected_resumes_at_the_groups_offset() -> None:
    # Another member consumed m2..m9 and committed 10 while we were cut off.
    got, stored = await consume_across_a_lost_connection(stored_meanwhile=10, more=10)
    assert got == [b"m0", b"m1", b"m10", b"m11"]
    assert stored == 12


async def test_a_broker_that_lost_our_last_commit_does_not_make_us_consume_again() -> None:
    """The other way round: the stored offset is *below* ours after the reconnection (a
    restarted broker persisted offsets a few seconds before it died). That is the broker's
    stale record, not another member's progress: consumption goes on from our position
    and the next commit puts the record right."""
    got, stored = await consume_across_a_lost_connection(stored_meanwhile=0, more=2)
    assert got == [b"m0", b"m1", b"m2", b"m3"]
    assert stored == 4


class MemoryStore:
    """An offset store in a dict (the committer's only dependency besides the log)."""

    def __init__(self, stored: int | None) -> None:
        self.stored = stored
        self.writes: list[int] = []
        self.reads = 0

    async def read(self, mq: MessageQueue) -> int | None:
        self.reads += 1
        return self.stored

    async def persist(self, mq: MessageQueue, offset: int) -> None:
        self.writes.append(offset)
        self.stored = offset

    async def flush(self) -> None:
        return None


def _handled_up_to_7(stored: int | None) -> tuple[MemoryStore, OffsetCommitter, ProcessQueue]:
    """A store holding ``stored``, its committer, and a queue whose messages 3-6 were
    handled (committable: 7)."""
    store = MemoryStore(stored)
    committer = OffsetCommitter(store, get_logger("test"), bound=5.0)
    pq = ProcessQueue(MessageQueue(TOPIC, "broker-a", 0), 3)
    pq.tracker.add([3, 4, 5, 6], 7)
    for offset in (3, 4, 5, 6):
        pq.tracker.done(offset)
    return store, committer, pq


@pytest.mark.parametrize(("stored", "written"), [(10, []), (5, [7]), (7, [7]), (None, [7])])
async def test_an_unverified_queue_is_committed_only_if_the_group_is_not_ahead(
    stored: int | None, written: list[int]
) -> None:
    """At close or revoke the pull task may not have checked yet: the committer checks
    itself, and never moves the group's offset back below another member's."""
    store, committer, pq = _handled_up_to_7(stored)
    pq.offset_unverified = True
    assert await committer.commit(pq) is True  # nothing left to send (not failed)
    assert store.writes == written
    assert pq.tracker.dirty is not bool(written)


@pytest.mark.parametrize(("stored", "written"), [(10, []), (5, [7]), (7, [7]), (None, [7])])
async def test_a_revoked_queues_last_commit_does_not_move_the_group_back(
    stored: int | None, written: list[int]
) -> None:
    """A revoke commits after its handlers end (up to shutdown_timeout after the notice;
    a member that missed the notice revokes later still): the new owner may have
    committed past it meanwhile. Its commit would move the group's offset back, and the
    next owner would consume those messages again."""
    store, committer, pq = _handled_up_to_7(stored)
    pq.drop()
    assert await committer.commit(pq) is True  # nothing left to send (not failed)
    assert store.writes == written


@pytest.mark.parametrize(("held", "reads", "written"), [(True, 0, [7]), (False, 1, [])])
async def test_a_revoked_queues_last_commit_asks_no_stored_offset_under_its_lock(
    held: bool, reads: int, written: list[int]
) -> None:
    """Orderly: while the queue's broker lock is ours no other member consumed it, so
    the stored offset (here 10, as if another member had) is not asked for; a lock no
    longer ours is."""
    store, _, pq = _handled_up_to_7(10)
    committer = OffsetCommitter(store, get_logger("test"), bound=5.0, lock_held=lambda _: held)
    pq.drop()
    assert await committer.commit(pq) is True
    assert (store.reads, store.writes) == (reads, written)


class ParkingBroker(FakeBroker):
    """Leaves the next ``park`` QUERY_CONSUMER_OFFSET requests of queue 0 unanswered (the
    client's request times out), and notes every offset request of queue 0."""

    def __init__(self, name: str = "broker-a") -> None:
        super().__init__(name, 0)
        self.park = 0
        self.parked = 0
        #: set (and replaced) at every QUERY_ or UPDATE_CONSUMER_OFFSET of queue 0
        self.offset_request = anyio.Event()

    async def handle(self, session: ServerSession, cmd: RemotingCommand) -> None:
        offset_codes = (RequestCode.QUERY_CONSUMER_OFFSET, RequestCode.UPDATE_CONSUMER_OFFSET)
        if cmd.code in offset_codes and cmd.ext_fields.get("queueId") == "0":
            self.offset_request.set()
            self.offset_request = anyio.Event()
            if self.park and cmd.code == RequestCode.QUERY_CONSUMER_OFFSET:
                self.park -= 1
                self.parked += 1
                return
        await super().handle(session, cmd)

    async def cut_off(self, stored_meanwhile: int) -> anyio.Event:
        """Close every connection to us (the broker unregisters the consumer) once
        another member committed ``stored_meanwhile``; then m2..m11 arrive. The event
        of the next offset request of queue 0: the pull task's check."""
        self.offsets[(TOPIC, 0)] = stored_meanwhile
        asked = self.offset_request
        for session in list(self.server.sessions):
            await session.close()
        self.add(0, *(f"m{i}".encode() for i in range(2, 12)))
        return asked


async def take(consumer: PullConsumer, n: int) -> list[bytes]:
    got: list[bytes] = []
    with anyio.fail_after(10):
        while len(got) < n:
            for msgs in (await consumer.getmany(timeout=5)).values():
                got.extend(m.body for m in msgs)
    return got


async def test_a_flush_during_the_verifying_query_does_not_store_the_stale_offset() -> None:
    """Issue 30, item 2. We are at 2; another member committed 10 while we were cut off.
    The pull task's query of the group's offset is in flight when a flush runs: the flush
    must check for itself, not store 2. The query then times out: the queue stays
    unverified (no pull), and the next query moves it to 10 (m2..m9 not again)."""
    broker = ParkingBroker()
    broker.offsets[(TOPIC, 0)] = 0
    cluster = FakeCluster({"broker-a": [broker]})
    async with running(cluster):
        consumer = PullConsumer(
            "g", cluster.namesrv.address, consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
            **{**FAST, "persist_offset_interval": 3600.0, "request_timeout": 1.0},
        )  # fmt: skip  (flushes only when the test runs one)
        consumer.assign([MessageQueue(TOPIC, "broker-a", q) for q in range(2)])
        async with consumer, anyio.create_task_group() as tg:
            broker.add(0, b"m0", b"m1")
            assert await take(consumer, 2) == [b"m0", b"m1"]
            broker.park = 2
            asked = await broker.cut_off(10)
            with anyio.fail_after(10):
                await asked.wait()  # the pull task's query, left unanswered
                asked = broker.offset_request
                tg.start_soon(engine_of(consumer).commits.commit_all)
                await asked.wait()  # the flush's own request, during that query
            broker.park = 0  # the next queries are answered
            assert broker.offsets[(TOPIC, 0)] == 10
            assert await take(consumer, 2) == [b"m10", b"m11"]
        assert broker.parked == 2  # the pull task's query and the flush's
    assert broker.offsets[(TOPIC, 0)] == 12


class GatedStore(MemoryStore):
    """A MemoryStore whose reads wait until ``answer`` is set, then fail if ``error``."""

    def __init__(self, stored: int | None) -> None:
        super().__init__(stored)
        self.asked = anyio.Event()
        self.answer = anyio.Event()
        self.error: RocketMQError | None = None

    async def read(self, mq: MessageQueue) -> int | None:
        self.asked.set()
        await self.answer.wait()
        if self.error is not None:
            raise self.error
        return self.stored


def unverified_queue_at(offset: int) -> ProcessQueue:
    pq = ProcessQueue(MessageQueue(TOPIC, "broker-a", 0), offset)
    pq.mark_unverified()
    return pq


@pytest.mark.parametrize("lost_again", [False, True])
async def test_a_queue_is_verified_only_by_a_query_that_no_disconnect_overlapped(
    lost_again: bool,
) -> None:
    """The flag stays set while the query runs (a flush meanwhile checks for itself); a
    connection lost again during the query leaves it set, as the answer may predate a
    commit made since; the queue moves to the group's offset in both cases."""
    store = GatedStore(10)
    pq = unverified_queue_at(2)
    async with anyio.create_task_group() as tg:
        verified: list[bool] = []

        async def verify() -> None:
            verified.append(await verify_offset(store, pq, get_logger("test")))

        tg.start_soon(verify)
        with anyio.fail_after(5):
            await store.asked.wait()
        assert pq.offset_unverified
        if lost_again:
            pq.mark_unverified()
        store.answer.set()
    assert verified == [not lost_again]
    assert pq.offset_unverified is lost_again
    assert (pq.tracker.next_offset, pq.tracker.dirty, pq.tracker.floor) == (10, False, 10)


async def test_a_failed_query_leaves_the_queue_unverified() -> None:
    store = GatedStore(10)
    store.error = RequestTimeoutError("no answer")
    store.answer.set()
    pq = unverified_queue_at(2)
    with pytest.raises(RequestTimeoutError):
        await verify_offset(store, pq, get_logger("test"))
    assert pq.offset_unverified
    assert pq.tracker.next_offset == 2


async def test_an_apps_commit_behind_the_groups_offset_after_a_disconnect_is_refused() -> None:
    """Issue 30, item 3. With ``auto_commit=False`` we committed 2; another member
    committed 10 while we were cut off. The application's commit of its old position is
    refused (CommitFailedError) and stores nothing: while the queue is unverified (the
    pull task's query unanswered) and after the pull task moved it to 10. Before, it
    stored 2 and the next polls returned m2..m9 again."""
    broker = ParkingBroker()
    broker.offsets[(TOPIC, 0)] = 0
    cluster = FakeCluster({"broker-a": [broker]})
    q0, q1 = (MessageQueue(TOPIC, "broker-a", q) for q in range(2))
    async with running(cluster):
        consumer = PullConsumer(
            "g", cluster.namesrv.address, auto_commit=False,
            consume_from_where=ConsumeFromWhere.FIRST_OFFSET, **{**FAST, "request_timeout": 1.0},
        )  # fmt: skip
        consumer.assign([q0])
        async with consumer:
            broker.add(0, b"m0", b"m1")
            assert await take(consumer, 2) == [b"m0", b"m1"]
            await consumer.commit()
            assert broker.offsets == {(TOPIC, 0): 2}
            with pytest.raises(CommitFailedError, match="not assigned"):
                await consumer.commit({q0: 1, q1: 0})  # q1 is not ours: q0 is not stored either
            assert broker.offsets == {(TOPIC, 0): 2}

            broker.park = 1  # the pull task's query: the queue stays unverified
            asked = await broker.cut_off(10)
            with anyio.fail_after(10):
                await asked.wait()
            for offsets in ({q0: 2}, None):  # the batch processed; the position (2 too)
                with pytest.raises(CommitFailedError, match="stored offset 10"):
                    await consumer.commit(offsets)
            assert broker.offsets == {(TOPIC, 0): 10}

            assert await take(consumer, 2) == [b"m10", b"m11"]  # moved to the group's offset
            with pytest.raises(CommitFailedError, match="stored offset 10"):
                await consumer.commit({q0: 2})
            assert broker.offsets == {(TOPIC, 0): 10}
            await consumer.commit()
            assert broker.offsets == {(TOPIC, 0): 12}


@pytest.mark.parametrize(
    ("meanwhile", "refusal"), [("lost", "stored offset 10"), ("revoked", "not assigned")]
)
async def test_an_apps_commit_checks_each_queue_again_after_the_stores_before_it(
    meanwhile: str, refusal: str
) -> None:
    """The application commits a0 and b0; both pass their checks, and while a0's commit
    waits for broker-a the group's offset of b0 moves to 10 (another member consumed
    it): broker-b dropped us (``lost``: pull_remoting seed 44028), or a rebalance
    revoked b0 (``revoked``: here the application's own ``assign``). b0's old position
    is not stored over it: CommitFailedError, a0 stored. Before 728ece4 the checks ran
    only before the first store (both cases stored 2 over 10: the other member's
    messages consumed again); before the revoked case's fix the check before b0's store
    asked only about a lost connection (that case stored 2 over 10)."""
    broker_a, broker_b = FakeBroker("broker-a", 0), ParkingBroker("broker-b")
    broker_a.offsets[(TOPIC, 0)] = broker_b.offsets[(TOPIC, 0)] = 0
    cluster = FakeCluster({"broker-a": [broker_a], "broker-b": [broker_b]})
    a0, b0 = MessageQueue(TOPIC, "broker-a", 0), MessageQueue(TOPIC, "broker-b", 0)
    async with running(cluster):
        consumer = PullConsumer(
            "g", cluster.namesrv.address, auto_commit=False,
            consume_from_where=ConsumeFromWhere.FIRST_OFFSET, **FAST,
        )  # fmt: skip
        consumer.assign([a0, b0])
        async with consumer, anyio.create_task_group() as tg:
            broker_b.add(0, b"m0", b"m1")
            assert await take(consumer, 2) == [b"m0", b"m1"]
            hold = broker_a.commit_holds[0] = anyio.Event()
            failed: list[BaseException] = []

            async def commit() -> None:
                try:
                    await consumer.commit({a0: 1, b0: 2})
                except CommitFailedError as exc:
                    failed.append(exc)

            with anyio.fail_after(10):
                received = broker_a.commit_received
                tg.start_soon(commit)
                await received.wait()  # both checked; a0's store waits at broker-a
                if meanwhile == "lost":
                    asked = await broker_b.cut_off(10)
                    await asked.wait()  # the pull task's check of b0: the loss was seen
                else:
                    consumer.assign([a0])
                    while b0 in consumer.assignment():  # noqa: ASYNC110 - no event
                        await anyio.sleep(0.005)
                    broker_b.offsets[(TOPIC, 0)] = 10  # the new owner's commit
                hold.set()
        assert len(failed) == 1 and refusal in str(failed[0])
        assert broker_b.offsets[(TOPIC, 0)] == 10
        assert broker_a.offsets[(TOPIC, 0)] == 1


class LostDuringTheQuery(MemoryStore):
    """The connection of the first read is lost while it is out: its answer (``stored``)
    was made before another member committed ``then``, which later reads find."""

    def __init__(self, pq: ProcessQueue, stored: int, then: int) -> None:
        super().__init__(stored)
        self.pq, self.then = pq, then

    async def read(self, mq: MessageQueue) -> int | None:
        answer = await super().read(mq)
        if self.reads == 1:
            self.pq.mark_unverified()  # the loss, reported before the answer is read
            self.stored = self.then
        return answer


async def test_an_apps_commit_is_not_checked_by_a_query_a_lost_connection_overlapped() -> None:
    """b0 is unverified (its connection was lost); the application's commit of 2 asks
    the group's offset, and the connection is lost again while the query is out: its
    answer (0) may predate a commit made since (10, by the member that took the queue),
    so it is asked again, and the commit is refused. Before, the answer 0 passed the
    check (verify_offset already guarded its query so)."""
    pq = unverified_queue_at(2)
    store = LostDuringTheQuery(pq, 0, 10)
    with pytest.raises(CommitFailedError, match="stored offset 10"):
        await check_commit(store, pq, 2)
    assert store.reads == 2 and store.writes == []


class SilentOnUnregister(FakeBroker):
    """The connection goes silent (half-open) just as the client unregisters: that
    request is never answered; a new connection works."""

    def __init__(self, name: str, role_id: int) -> None:
        super().__init__(name, role_id)
        self.silenced = False

    async def handle(self, session: ServerSession, cmd: RemotingCommand) -> None:
        if cmd.code == RequestCode.UNREGISTER_CLIENT and not self.silenced:
            self.silenced = True
            session.stall()
            return
        await super().handle(session, cmd)


async def test_an_unregister_lost_on_a_silent_connection_is_sent_again_on_a_new_one() -> None:
    """Issue 40 (simulator pull_remoting seed 1111): a member closing while its broker
    connection is half-open. Its unregister times out there (the connection is closed);
    sent once more on a new connection, it reaches the broker, which no longer lists the
    member (else it keeps the member's queues from the others until it expires the
    channel, 2 min on 5.5.0)."""
    broker = SilentOnUnregister("broker-a", 0)
    cluster = FakeCluster({"broker-a": [broker]})
    async with running(cluster):
        consumer = consumer_of(cluster, Collector(1), request_timeout=0.5)
        async with consumer:
            with anyio.fail_after(10):
                while consumer.client_id not in broker.members:
                    await broker.heartbeat_seen.wait()
        assert broker.silenced and consumer.client_id not in broker.members


async def test_a_pull_commits_no_offset_the_member_only_read() -> None:
    """A new owner's query may come before the previous owner's revoke commit lands (a
    join's rebalances run at once on every member). Its pulls then must not commit the
    position it read: the broker would take it over the later one and the next owner
    would consume those messages again (pull_remoting seed 43086: its pulls refused, the
    owner sent its stale 2 over 4 for 3 s, then left; the next owner began at 2). Once it
    has consumed something, its pulls carry its own position until it is committed."""
    broker = FakeBroker("broker-a", 0)
    cluster = FakeCluster({"broker-a": [broker]})
    broker.add(0, b"m0", b"m1")
    broker.offsets[(TOPIC, 0)] = 2
    broker.offsets[(TOPIC, 1)] = 0
    handler = Collector(1)

    def queue0_pulls() -> list[RemotingCommand]:
        return [p for p in broker.pulls if p.ext_fields["queueId"] == "0"]

    # no flush in between: the pulls alone carry commits
    async with running(cluster), consumer_of(cluster, handler, persist_offset_interval=3600):
        with anyio.fail_after(10):
            while len(queue0_pulls()) < 2:  # the first long poll ended, a second began
                await broker.pulled.wait()
        # the position read (2) was sent as no commit
        assert not any(int(p.ext_fields["sysFlag"]) & PULL_COMMIT_OFFSET for p in queue0_pulls())
        broker.add(0, b"m2")
        with anyio.fail_after(10):
            await handler.done.wait()
            while not any(int(p.ext_fields["sysFlag"]) & PULL_COMMIT_OFFSET
                          for p in queue0_pulls()):  # fmt: skip
                await broker.pulled.wait()
    committing = [p for p in queue0_pulls() if int(p.ext_fields["sysFlag"]) & PULL_COMMIT_OFFSET]
    assert committing[0].ext_fields["commitOffset"] == "3"
