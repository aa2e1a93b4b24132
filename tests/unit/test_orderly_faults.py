"""Orderly consumption under faults a real broker will not produce on demand: a queue
reset (OFFSET_ILLEGAL) while a handler runs, lock requests that fail or are refused."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest

from aiorocket.consumer import Consumer, ConsumerMessage
from aiorocket.consumer.process_queue import ProcessQueue
from aiorocket.errors import ConfigError
from aiorocket.message import MessageQueue
from aiorocket.results import Reconsume
from aiorocket.testing.logs import capture_logs

from .consumer_fakes import (
    TOPIC,
    Collector,
    FakeBroker,
    FakeCluster,
    consumer_of,
    engine_of,
    queues_of,
    reallocate,
    running,
    take_all,
    take_none,
)
from .virtual_clock import ON_VIRTUAL_CLOCKS

pytestmark = pytest.mark.anyio


def virtual_monotonic(monkeypatch: pytest.MonkeyPatch) -> None:
    """``time.monotonic`` reads the running loop's clock: a test ``ON_VIRTUAL_CLOCKS``
    (the fake brokers and the consumer in one loop) then waits out request timeouts and
    lock lifetimes at no cost of wall clock, whatever the machine's load."""
    monkeypatch.setattr(time, "monotonic", anyio.current_time)


def one_broker() -> tuple[FakeCluster, FakeBroker]:
    broker = FakeBroker("a", 0)
    return FakeCluster({"a": [broker]}), broker


async def until(check: Callable[[], bool], timeout: float = 10.0) -> None:
    """Poll consumer state that offers no event to wait on."""
    with anyio.fail_after(timeout):
        while True:
            if check():
                return
            await anyio.sleep(0.01)


class Blocking:
    """An orderly handler recording offsets; the call for ``block_at`` waits for
    :attr:`release` (first delivery only)."""

    def __init__(self, block_at: int) -> None:
        self.block_at = block_at
        self.offsets: list[int] = []
        self.entered = anyio.Event()
        self.release = anyio.Event()

    async def __call__(self, msg: ConsumerMessage) -> None:
        self.offsets.append(msg.queue_offset)
        if msg.queue_offset == self.block_at and not self.entered.is_set():
            self.entered.set()
            await self.release.wait()


@asynccontextmanager
async def handling_offset_0(
    *bodies: bytes,
) -> AsyncIterator[tuple[FakeBroker, Blocking, ProcessQueue]]:
    """An orderly consumer of queue 0 holding ``bodies``, in its handler of offset 0."""
    cluster, broker = one_broker()
    broker.add(0, *bodies)
    handler = Blocking(block_at=0)
    async with running(cluster), consumer_of(cluster, handler, orderly=True) as consumer:
        with anyio.fail_after(10):
            await handler.entered.wait()
        pq = next(pq for mq, pq in queues_of(consumer).items() if mq.queue_id == 0)
        yield broker, handler, pq


@asynccontextmanager
async def renewing_often() -> AsyncIterator[tuple[FakeBroker, Collector, Consumer]]:
    """An orderly consumer (not started) of one running broker, renewing its locks every
    0.2 s, its handler waiting for one message."""
    cluster, broker = one_broker()
    handle = Collector(1)
    async with running(cluster):
        yield broker, handle, consumer_of(cluster, handle, orderly=True, lock_renew_interval=0.2)


@asynccontextmanager
async def past_one_message(
    broker: FakeBroker, handle: Collector, consumer: Consumer
) -> AsyncIterator[None]:
    """``consumer`` started, its queues locked and one message handled; closed on exit."""
    async with consumer:
        broker.add(0, b"m0")
        with anyio.fail_after(10):
            await handle.done.wait()
        yield


async def test_orderly_reset_during_handler_neither_skips_nor_reorders_new_messages() -> None:
    async with handling_offset_0(b"m0", b"m1", b"m2", b"m3") as (broker, handler, pq):
        # The position falls out of range while offset 0 is handled: the queue
        # restarts at 1 and the new pull lands before the handler returns.
        broker.move_pulls(0, 1)
        await until(lambda: pq.tracker.generation == 1 and len(pq.buffer) == 3)
        handler.release.set()
        await until(lambda: len(handler.offsets) >= 4)
        await until(lambda: pq.tracker.committable() == 4)
    assert handler.offsets == [0, 1, 2, 3]
    assert broker.offsets[(TOPIC, 0)] == 4


async def test_orderly_reset_during_handler_with_nothing_pulled_yet_keeps_consuming() -> None:
    async with handling_offset_0(b"m0", b"m1") as (broker, handler, pq):
        broker.move_pulls(0, 5)  # past the end: the buffer is empty after the reset
        await until(lambda: pq.tracker.generation == 1)
        handler.release.set()
        broker.add(0, b"m2", b"m3", b"m4", b"m5", b"m6")
        await until(lambda: len(handler.offsets) >= 3)
        await until(lambda: pq.tracker.committable() == 7)
    assert handler.offsets == [0, 5, 6]


async def test_orderly_close_cancels_an_overrunning_handler_before_unlocking() -> None:
    cluster, broker = one_broker()
    broker.add(0, b"m0")
    entered = anyio.Event()

    async def handle(msg: ConsumerMessage) -> None:
        entered.set()
        try:
            await anyio.sleep_forever()
        finally:
            broker.journal.append("handler ended")

    async with running(cluster):
        consumer = consumer_of(cluster, handle, orderly=True, shutdown_timeout=0.2)
        async with consumer:
            with anyio.fail_after(10):
                await entered.wait()
            broker.journal.append("closing")
    # shutdown_timeout passed: the handler is cancelled, and only then unlocked.
    assert broker.journal == ["closing", "handler ended", "unlock 0,1"]
    assert broker.offsets.get((TOPIC, 0), 0) == 0  # not handled: delivered again


async def test_orderly_close_waits_for_a_lock_renewal_in_flight_before_unlocking() -> None:
    # Seed 239 of the simulator's pull_remoting: a renewal sent as the close began was
    # applied after the close's unlock, and the broker kept the queues locked (60 s).
    async with renewing_often() as (broker, handle, consumer):
        async with past_one_message(broker, handle, consumer):
            broker.lock_delay = 0.5  # the next renewal is applied half a second late
            with anyio.fail_after(10):
                await broker.lock_received.wait()
            broker.journal.append("closing")
        await until(lambda: broker.locks_delayed == 0)  # every lock sent was applied
        assert broker.journal == ["closing", "unlock 0,1"]
        assert broker.lock_owners == {}, "no queue stays locked by the closed consumer"


async def test_orderly_close_sends_an_unlock_lost_with_its_connection_again() -> None:
    # An unlock lost with its connection (reset, or timed out and closed) left the
    # queues locked for the broker's lock expiry (60 s) after the close.
    async with renewing_often() as (broker, handle, consumer):
        async with past_one_message(broker, handle, consumer):
            broker.drop_next_unlock = True
        assert broker.journal == ["unlock dropped", "unlock 0,1"]
        assert broker.lock_owners == {}, "no queue stays locked by the closed consumer"
        assert not broker.members, "and the member unregistered on the new connection"


@ON_VIRTUAL_CLOCKS
async def test_orderly_close_unlocks_a_healthy_broker_while_another_does_not_answer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A frozen broker's unlock, sent twice (a timeout closes the connection) or after a
    # renewal to it in flight, took the close's whole unlock bound: the queues of the
    # brokers after it were never unlocked and stayed locked for the lock expiry (60 s).
    # (Virtual time: the close's 5 s bound cost 5 s of wall clock before.)
    virtual_monotonic(monkeypatch)
    a, b = FakeBroker("a", 0), FakeBroker("b", 0)
    cluster = FakeCluster({"a": [a], "b": [b]})
    handle = Collector(2)
    async with running(cluster):
        # request_timeout 2.5: two tries on the frozen broker fill the bound (5 s)
        consumer = consumer_of(cluster, handle, orderly=True, request_timeout=2.5)
        async with consumer:
            a.add(0, b"m0")
            b.add(0, b"m1")
            with anyio.fail_after(10):
                await handle.done.wait()
            first = next(iter(queues_of(consumer))).broker_name
            frozen, healthy = (a, b) if first == "a" else (b, a)
            frozen.silent_unlocks = True  # the first broker unlocked is frozen
    assert healthy.journal == ["unlock 0,1"]
    assert healthy.lock_owners == {}, "the healthy broker's queues are free for the next owner"


async def test_orderly_close_unlocks_queues_whose_rebalance_lock_was_in_flight() -> None:
    # A rebalance's lock of newly assigned queues, caught on the wire by the close: the
    # broker grants it after the close began; the queues were never started (not in
    # process_queues), and the close's unlock must still name them.
    cluster, broker = one_broker()
    async with running(cluster):
        consumer = consumer_of(cluster, Collector(1), orderly=True, allocate=take_none)
        async with consumer:
            await until(lambda: bool(broker.members))
            broker.lock_delay = 0.5
            reallocate(consumer, take_all)
            with anyio.fail_after(10):
                await broker.lock_received.wait()
        await until(lambda: broker.locks_delayed == 0)
        assert broker.lock_owners == {}, "no queue stays locked by the closed consumer"


async def test_orderly_revoke_unlock_waits_for_a_lock_renewal_in_flight() -> None:
    # A renewal sent before a rebalance revoked its queues, applied by the broker after
    # the revoke's unlock (5.x runs both on a pool of admin threads): the queues stayed
    # locked by a consumer that no longer consumed them, kept from their next owner.
    async with (
        renewing_often() as (broker, handle, consumer),
        past_one_message(broker, handle, consumer),
    ):
        broker.lock_delay = 0.5  # the next renewal is applied half a second late
        with anyio.fail_after(10):
            await broker.lock_received.wait()
        reallocate(consumer, take_none)  # revoke both queues while it is in flight
        await until(lambda: "unlock 0,1" in broker.journal)
        await until(lambda: broker.locks_delayed == 0)  # every lock sent was applied
        assert broker.lock_owners == {}, "no revoked queue stays locked by us"
        assert not consumer.assignment()


def only_broker_a(
    group: str, cid: str, queues: Sequence[MessageQueue], cids: Sequence[str]
) -> list[MessageQueue]:
    return [mq for mq in queues if mq.broker_name == "a"]


async def test_orderly_lock_renewal_does_not_send_a_queue_revoked_since_it_picked_it() -> None:
    # The renewal picks every held queue, then asks one broker after the other: broker
    # b's queues, revoked (and unlocked) while broker a's answer was awaited, were
    # locked again by it, and stayed locked by a consumer that no longer consumed them.
    a, b = FakeBroker("a", 0), FakeBroker("b", 0)
    cluster = FakeCluster({"a": [a], "b": [b]})
    handle = Collector(2)
    async with running(cluster):
        consumer = consumer_of(cluster, handle, orderly=True, allocate=take_all,
                               lock_renew_interval=0.2)  # fmt: skip
        async with consumer:
            a.add(0, b"m0")
            b.add(0, b"m1")
            with anyio.fail_after(10):
                await handle.done.wait()
            a.lock_hold = anyio.Event()  # the next renewal waits at broker a
            with anyio.fail_after(10):
                await a.lock_received.wait()
            reallocate(consumer, only_broker_a)
            await until(lambda: "unlock 0,1" in b.journal)
            b.lock_requests.clear()
            a.lock_hold.set()
            a.lock_hold = None
            with anyio.fail_after(10):  # the renewal after next: the one held has ended
                await a.lock_seen.wait()
                await a.lock_seen.wait()
            assert b.lock_requests == [], "no lock of a revoked queue after its unlock"
            assert b.lock_owners == {}, "b's queues are free for their next owner"
            assert {mq.broker_name for mq in consumer.assignment()} == {"a"}


@ON_VIRTUAL_CLOCKS
async def test_orderly_close_unlocks_known_brokers_while_one_route_query_finds_the_rest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Each queue whose master the cached route did not name cost a NameServer request
    # of its own, one after the other, before the first unlock: a slow NameServer kept
    # every broker's queues locked, and those two requests took the close's bound.
    # (Virtual time: a 6 s call under load on the wall clock, near its 10 s guards.)
    virtual_monotonic(monkeypatch)
    a, b = FakeBroker("a", 0), FakeBroker("b", 0)
    cluster = FakeCluster({"a": [a], "b": [b]})
    handle = Collector(2)
    stop, closed = anyio.Event(), anyio.Event()
    async with running(cluster):
        consumer = consumer_of(cluster, handle, orderly=True, allocate=take_all,
                               rebalance_interval=60.0)  # fmt: skip

        async def run() -> None:
            async with consumer:
                a.add(0, b"m0")
                b.add(0, b"m1")
                await stop.wait()
            closed.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            with anyio.fail_after(10):
                await handle.done.wait()
            await until(lambda: a.offsets.get((TOPIC, 0)) == 1 == b.offsets.get((TOPIC, 0)))
            # The cached route loses b's master (a refresh while it restarted, say).
            cluster.master_down.add("b")
            await engine_of(consumer).client.namesrv.query_route(TOPIC)
            cluster.master_down.discard("b")
            cluster.route_hold = anyio.Event()  # the NameServer answers when told
            before = len(cluster.route_topics)
            stop.set()
            await until(lambda: "unlock 0,1" in a.journal)  # the route query still waits
            cluster.route_hold.set()
            with anyio.fail_after(10):
                await closed.wait()
    asked = cluster.route_topics[before:].count(TOPIC)
    assert asked == 1, "one route query for the topic's queues, not one per queue"
    assert b.journal == ["unlock 0,1"]
    assert a.lock_owners == b.lock_owners == {}


async def test_orderly_close_does_not_wait_out_a_suspended_queues_retry_delay() -> None:
    # A message waiting for its local retry (no handler running) is not waited for: the
    # close unlocks its queue at once, uncommitted, so the next owner handles it first.
    cluster, broker = one_broker()
    broker.add(0, b"m0")
    calls: list[int] = []

    async def handle(msg: ConsumerMessage) -> Reconsume:
        calls.append(msg.queue_offset)
        return Reconsume(suspend=300.0)

    async with running(cluster):
        consumer = consumer_of(cluster, handle, orderly=True, shutdown_timeout=300.0)
        # Neither the delay nor shutdown_timeout (300 s each) is waited out: the close ends
        # under a guard far from both, before the delay's end (it was `< 5` s of wall clock
        # against 60 and 30 s). A close that waited either in a shielded scope fails at
        # the assertion after 300 s.
        with anyio.fail_after(60):
            async with consumer:
                pq = next(pq for mq, pq in queues_of(consumer).items() if mq.queue_id == 0)
                await until(lambda: pq.suspended_until > anyio.current_time())
        assert anyio.current_time() < pq.suspended_until
    assert calls == [0]
    assert broker.journal == ["unlock 0,1"]
    assert broker.offsets.get((TOPIC, 0), 0) == 0  # not committed: delivered again


async def test_orderly_revoked_queue_lock_is_renewed_until_its_handler_returns() -> None:
    cluster, broker = one_broker()
    broker.add(0, b"m0", b"m1")
    entered, release = anyio.Event(), anyio.Event()

    async def handle(msg: ConsumerMessage) -> None:
        if msg.queue_offset == 0:
            entered.set()
            await release.wait()
            broker.journal.append("handler ended")

    async with running(cluster):
        consumer = consumer_of(cluster, handle, orderly=True, allocate=take_all,
                               lock_renew_interval=0.2, shutdown_timeout=0.2)  # fmt: skip
        async with consumer:
            with anyio.fail_after(10):
                await entered.wait()
            reallocate(consumer, take_none)  # revoke both queues; queue 0 is being handled
            await until(lambda: not consumer.assignment())
            broker.lock_requests.clear()
            for _ in range(3):  # three renewals while the handler runs
                with anyio.fail_after(10):
                    await broker.lock_seen.wait()
            assert broker.lock_requests[-1] == {(TOPIC, 0)}, "its lock is renewed, alone"
            assert broker.journal == ["unlock 1"], "only the idle queue was unlocked"
            release.set()
            await until(lambda: len(broker.journal) == 3)
            assert broker.journal == ["unlock 1", "handler ended", "unlock 0"]
            assert broker.offsets[(TOPIC, 0)] == 1  # committed before the unlock


async def test_orderly_step_ending_during_the_revokes_commit_is_committed_before_unlock() -> None:
    # The revoke commits a queue whose step is running (offset 1 handled: 1 committed),
    # and the step ends while that commit is under way (offset 2 committable). The queue
    # was idle by the time the revoke unlocked it, and was unlocked with 1 stored: its
    # next owner handled offset 1 again (integration test_orderly_strict_order_with_
    # failures_and_rebalance, 5 of 9 runs with logging on).
    cluster, broker = one_broker()
    broker.add(0, b"m0", b"m1", b"m2")
    handler = Blocking(block_at=1)
    async with running(cluster):
        # No periodic commit: the revoke's own commit is the one under way.
        consumer = consumer_of(cluster, handler, orderly=True, allocate=take_all,
                               persist_offset_interval=3600.0)  # fmt: skip
        async with consumer:
            with anyio.fail_after(10):
                await handler.entered.wait()
            pq = queues_of(consumer)[MessageQueue(TOPIC, "a", 0)]
            hold = broker.commit_holds[0] = anyio.Event()
            reallocate(consumer, take_none)
            with anyio.fail_after(10):
                await broker.commit_received.wait()  # the revoke's commit of offset 1
            handler.release.set()
            await until(lambda: pq.tracker.committable() == 2)  # the step has ended
            hold.set()
            await until(lambda: any(0 in queues for queues, _ in broker.offsets_at_unlock))
            stored = next(o for queues, o in broker.offsets_at_unlock if 0 in queues)
            assert stored[(TOPIC, 0)] == 2, "committed past offset 1 before the unlock"
    assert handler.offsets == [0, 1]


async def test_orderly_failed_lock_renewal_keeps_queues_locked() -> None:
    async with renewing_often() as (broker, handle, consumer), consumer:
        broker.locking = "fail"  # the broker stops answering lock requests
        for _ in range(2):
            with anyio.fail_after(10):
                await broker.lock_seen.wait()
        assert all(pq.locked for pq in queues_of(consumer).values())
        broker.add(0, b"after")
        with anyio.fail_after(5):  # well within lock_max_live_time (30 s)
            await handle.done.wait()
    assert handle.got == [b"after"]


async def test_orderly_refused_lock_is_asked_again_within_seconds() -> None:
    cluster, broker = one_broker()
    handle = Collector(1)
    async with running(cluster):
        consumer = consumer_of(
            cluster, handle, orderly=True, lock_renew_interval=60.0, rebalance_interval=60.0
        )
        async with consumer:
            broker.locking = "refuse"  # another consumer holds the queues for a moment
            locks = engine_of(consumer)._locks
            assert locks is not None
            await locks.renew()
            assert not any(pq.locked for pq in queues_of(consumer).values())
            broker.locking = "grant"
            broker.add(0, b"after")
            # Asked again after LOCK_RETRY_DELAY, not after lock_renew_interval (60 s).
            with anyio.fail_after(5):
                await handle.done.wait()
            assert all(pq.locked for pq in queues_of(consumer).values())


async def test_orderly_without_handler_is_rejected_at_start() -> None:
    consumer = Consumer("g", "127.0.0.1:1", orderly=True)
    consumer.subscribe(TOPIC)
    with pytest.raises(ConfigError, match="orderly=True needs a handler"):
        async with consumer:
            pass  # async for would wait forever: nothing feeds it in orderly mode


async def test_orderly_consume_timeout_cancels_the_handler_and_retries_in_place() -> None:
    # The same watchdog as the worker pool's: an overrunning orderly handler is
    # cancelled, its message counts as failed and is retried in place, in order.
    cluster, broker = one_broker()
    broker.add(0, b"m0", b"m1")
    calls: list[int] = []
    done = anyio.Event()

    async def handle(msg: ConsumerMessage) -> None:
        calls.append(msg.queue_offset)
        if calls == [0]:
            await anyio.sleep_forever()  # the first attempt overruns consume_timeout
        if msg.queue_offset == 1:
            done.set()

    async with running(cluster):
        consumer = consumer_of(cluster, handle, orderly=True, allocate=take_all,
                               consume_timeout=0.3, suspend_current_queue_time=0.1)  # fmt: skip
        with capture_logs() as logs:
            async with consumer:
                with anyio.fail_after(10):
                    await done.wait()
                await until(lambda: broker.offsets.get((TOPIC, 0)) == 2)
    assert calls == [0, 0, 1]
    assert [e["offset"] for e in logs if e["event"] == "consume_timeout"] == [0]


@asynccontextmanager
async def revoking_queue_0(
    **settings: Any,
) -> AsyncIterator[tuple[FakeBroker, Consumer, list[int]]]:
    """An orderly consumer that handled offsets 0 and 1 of queue 0, committed nothing
    (no periodic commit: the revoke's is the only one) and is running (closed on exit);
    yields the broker, the consumer and the offsets handled."""
    cluster, broker = one_broker()
    broker.add(0, b"m0", b"m1")
    handler = Blocking(block_at=1)
    handler.release.set()  # blocks nothing: says when offset 1 is handled
    async with running(cluster):
        consumer = consumer_of(cluster, handler, orderly=True, allocate=take_all,
                               persist_offset_interval=3600.0, **settings)  # fmt: skip
        async with consumer:
            with anyio.fail_after(10):
                await handler.entered.wait()
            pq = queues_of(consumer)[MessageQueue(TOPIC, "a", 0)]
            await until(lambda: pq.tracker.committable() == 2)
            yield broker, consumer, handler.offsets


def stored_at_unlock(broker: FakeBroker, queue_id: int) -> int | None:
    """The queue's stored offset when its first unlock arrived (it must have)."""
    stored = next(o for queues, o in broker.offsets_at_unlock if queue_id in queues)
    return stored.get((TOPIC, queue_id))


def unlocked(broker: FakeBroker, queue_id: int) -> bool:
    return any(queue_id in queues for queues, _ in broker.offsets_at_unlock)


def of_queue_0(journal: list[str]) -> list[str]:
    return [e for e in journal if e.split()[1] == "0"]


async def test_orderly_revoke_whose_commit_fails_keeps_the_lock_until_a_retry_commits() -> None:
    # The revoke's commit of queue 0 failed (and the release's second try): the queue
    # was unlocked anyway with nothing stored, and its next owner handled offsets 0 and 1
    # again, which the orderly handover promises not to do.
    async with revoking_queue_0() as (broker, consumer, offsets):
        broker.commit_errors[0] = 2
        reallocate(consumer, take_none)
        await until(lambda: unlocked(broker, 0))
        assert stored_at_unlock(broker, 0) == 2, "committed past offset 1 before the unlock"
        assert of_queue_0(broker.journal) == ["commit 0 failed", "commit 0 failed", "unlock 0"]
        await until(lambda: not engine_of(consumer).state.releasing)  # once its answer came
    assert offsets == [0, 1]


async def test_orderly_revoke_under_a_valid_lock_does_not_query_the_stored_offset() -> None:
    # No other member consumes a queue whose lock we hold, so the group's stored offset
    # cannot be past ours: the query was one more round trip that could fail before the
    # revoke's commit.
    async with revoking_queue_0() as (broker, consumer, _):
        before = len(broker.offset_queries)
        reallocate(consumer, take_none)
        await until(lambda: unlocked(broker, 0))
        assert broker.offset_queries[before:] == []
        assert stored_at_unlock(broker, 0) == 2


async def test_orderly_revoke_without_a_valid_lock_still_queries_the_stored_offset() -> None:
    # A refused renewal: another member holds the queue and may have committed past us.
    async with revoking_queue_0(lock_renew_interval=60.0) as (broker, consumer, _):
        broker.locking = "refuse"
        locks = engine_of(consumer)._locks
        assert locks is not None
        await locks.renew()
        before = len(broker.offset_queries)
        reallocate(consumer, take_none)
        await until(lambda: unlocked(broker, 0))
        assert 0 in broker.offset_queries[before:]


async def test_orderly_close_during_the_revokes_commit_retries_ends_within_its_bound() -> None:
    # The retries wait for no close: the close commits and unlocks the queue itself.
    # Waiting for them would take lock_max_live_time (600 s here), far past the guard.
    with anyio.fail_after(60):
        async with revoking_queue_0(lock_max_live_time=600.0) as (broker, consumer, _):
            broker.commit_errors[0] = 1_000_000  # the broker takes no commit of queue 0
            reallocate(consumer, take_none)
            await until(lambda: broker.journal.count("commit 0 failed") >= 3)  # 2 retries
            assert not unlocked(broker, 0), "kept locked while its commit is retried"
    assert unlocked(broker, 0), "the close unlocked it"
    assert broker.lock_owners == {}


async def test_orderly_close_during_the_revokes_commit_retries_commits_before_unlock() -> None:
    async with revoking_queue_0() as (broker, consumer, _):
        broker.commit_errors[0] = 1_000_000
        reallocate(consumer, take_none)
        await until(lambda: broker.journal.count("commit 0 failed") >= 3)
        broker.commit_errors[0] = 0  # the broker takes commits again as the consumer closes
    assert stored_at_unlock(broker, 0) == 2


@ON_VIRTUAL_CLOCKS
async def test_orderly_revokes_commit_is_given_up_past_lock_max_live_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A broker that renews locks but takes no commit keeps the queue from its next owner
    # for lock_max_live_time at most: then it is unlocked uncommitted, and logged.
    # (Virtual time: the 1.5 s lifetime cost ~3 s of wall clock a backend before.)
    virtual_monotonic(monkeypatch)
    with capture_logs() as logs:
        async with revoking_queue_0(lock_renew_interval=0.2, lock_max_live_time=1.5) as (
            broker, consumer, _,
        ):  # fmt: skip
            broker.commit_errors[0] = 1_000_000
            reallocate(consumer, take_none)
            with anyio.fail_after(10):
                await until(lambda: unlocked(broker, 0))
            assert stored_at_unlock(broker, 0) != 2, "unlocked uncommitted"
            assert broker.journal.count("commit 0 failed") >= 2
    given_up = [e for e in logs if e["event"] == "orderly_handover_uncommitted"]
    assert [(e["offset"], e["log_level"]) for e in given_up] == [(2, "warning")]


async def test_orderly_revokes_commit_is_given_up_once_its_lock_is_refused() -> None:
    # Another member holds the queue now and consumes it from the group's stored offset
    # whatever we do: waiting out lock_max_live_time (30 s) would only delay it.
    with capture_logs() as logs:
        async with revoking_queue_0(lock_renew_interval=0.2) as (broker, consumer, _):
            broker.commit_errors[0] = 1_000_000
            reallocate(consumer, take_none)
            await until(lambda: broker.journal.count("commit 0 failed") >= 2)
            broker.locking = "refuse"
            with anyio.fail_after(10):
                await until(lambda: unlocked(broker, 0))
    given_up = [e for e in logs if e["event"] == "orderly_handover_uncommitted"]
    assert [e["lock_held"] for e in given_up] == [False]


async def test_orderly_queue_assigned_back_during_the_commit_retries_resumes_after_it() -> None:
    # Assigned back while its commit is retried, the queue starts again once that commit
    # succeeded, from the offset it stored: neither beside the old one nor from before it.
    with capture_logs() as logs:
        async with revoking_queue_0() as (broker, consumer, offsets):
            broker.commit_errors[0] = 1_000_000
            reallocate(consumer, take_none)
            await until(lambda: broker.journal.count("commit 0 failed") >= 2)
            reallocate(consumer, take_all)
            await until(lambda: any(e["event"] == "assignment_waits_for_release" for e in logs))
            broker.commit_errors[0] = 0
            await until(lambda: MessageQueue(TOPIC, "a", 0) in consumer.assignment())
            broker.add(0, b"m2")
            await until(lambda: len(offsets) >= 3)
    assert offsets == [0, 1, 2]
