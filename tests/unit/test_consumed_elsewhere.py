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
from aiorocket.consumer.committer import OffsetCommitter
from aiorocket.consumer.process_queue import ProcessQueue
from aiorocket.message import MessageQueue

from .consumer_fakes import TOPIC, Collector, FakeBroker, FakeCluster, consumer_of, running

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

    async def read(self, mq: MessageQueue) -> int | None:
        return self.stored

    async def persist(self, mq: MessageQueue, offset: int) -> None:
        self.writes.append(offset)
        self.stored = offset

    async def flush(self) -> None:
        return None


@pytest.mark.parametrize(("stored", "written"), [(10, []), (5, [7]), (7, [7]), (None, [7])])
async def test_an_unverified_queue_is_committed_only_if_the_group_is_not_ahead(
    stored: int | None, written: list[int]
) -> None:
    """At close or revoke the pull task may not have checked yet: the committer checks
    itself, and never moves the group's offset back below another member's."""
    store = MemoryStore(stored)
    committer = OffsetCommitter(store, get_logger("test"), bound=5.0)
    pq = ProcessQueue(MessageQueue(TOPIC, "broker-a", 0), 3)
    pq.tracker.add([3, 4, 5, 6], 7)
    for offset in (3, 4, 5, 6):
        pq.tracker.done(offset)
    pq.offset_unverified = True
    assert await committer.commit(pq) is bool(written)
    assert store.writes == written
    assert pq.tracker.dirty is not bool(written)
