"""Committing queue offsets to the offset store, safe against cancellation and dead brokers.

Four rules:

* an offset counts as committed only once the store accepted it. A commit cancelled
  mid-request (the flusher stopped at close, a rebalance pass cancelled) leaves the queue
  dirty, so the next commit, the final one at close included, sends it again;
* the queues of different brokers are committed concurrently, each broker under its own
  time bound: one dead broker costs its own queues' commits, never the healthy ones';
* a revoked queue's last commit is not sent when the group's stored offset is past it
  (its new owner committed meanwhile): it would move the group back. The stored offset
  is not asked for while the queue's broker lock is ours (orderly, ``lock_held``): no
  other member can have consumed the queue, and the query is one more round trip that
  can fail before the orderly handover's commit;
* a queue whose broker connection was lost (``ProcessQueue.offset_unverified``) is
  neither committed nor pulled from its own position until the group's stored offset
  was read and found not ahead of it (``verify_offset``, ``group_ahead``). The
  flag is cleared only by a check that succeeded with no new loss of the connection
  during its query, so whatever runs meanwhile (a flush, the application's commit)
  checks for itself, and a failed or timed-out query leaves the queue unverified.
  A stored offset found below the queue's resume floor (a restarted broker lost
  commits) is raised to it and committed again (see aiorocket.consumer.offsets).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

import anyio

from aiorocket._log import Logger
from aiorocket.consumer.offsets import resume_offset
from aiorocket.errors import CommitFailedError, RocketMQError

if TYPE_CHECKING:
    from aiorocket.consumer.offset_store import OffsetStore
    from aiorocket.consumer.process_queue import ProcessQueue
    from aiorocket.consumer.state import ConsumerState

__all__ = ["AutoCommit", "OffsetCommitter", "check_commit", "group_ahead", "verify_offset"]


async def group_ahead(
    store: OffsetStore, pq: ProcessQueue, offset: int | None = None
) -> int | None:
    """The group's stored offset of ``pq``'s queue when it is past ``offset`` (default:
    ``pq``'s committable one), else None: another member consumed the queue while the
    broker had dropped us. The one rule of ProcessQueue.offset_unverified, for the
    committer, the puller and the application's commits."""
    stored = await store.read(pq.mq)
    if offset is None:
        offset = pq.tracker.committable()  # read after the query: the position now
    return stored if stored is not None and stored > offset else None


async def verify_offset(
    store: OffsetStore, pq: ProcessQueue, log: Logger, *, auto_commit: bool = True
) -> bool:
    """Check an unverified queue's offset; True once it is verified (and the flag cleared).

    If the group's stored offset is past ours, another member consumed the queue while we
    were cut off (frozen, or dropped by the broker after missed heartbeats): the queue
    moves there instead of consuming it all again. One below our resume floor (see
    aiorocket.consumer.offsets) is the broker's own older record (it persists offsets
    every few seconds, a restart loses the rest): the floor is committed again at once,
    so that whoever reads the queue's offset next (a member it moves to) does not start
    there. The queue goes on from its own position either way.

    A failed query or commit raises and leaves the queue unverified. A connection lost
    again during the query leaves it unverified too (False): the answer may predate a
    commit made since.
    """
    disconnects = pq.disconnects
    stored = await store.read(pq.mq)
    tracker = pq.tracker
    if pq.dropped:
        return False
    if stored is not None and stored > tracker.committable():
        log.warning(
            "queue_consumed_elsewhere", offset=tracker.committable(), stored_offset=stored,
            hint="the broker dropped this consumer (connection lost or heartbeats "
            "missed past its channel expiry) and another member consumed this queue; "
            "continuing from the group's offset",
        )  # fmt: skip
        pq.reset(stored)
        tracker.mark_committed(stored)
    if stored is not None:
        tracker.floor = stored if tracker.floor is None else max(tracker.floor, stored)
    if pq.disconnects != disconnects:
        return False
    restored = resume_offset(stored, tracker.resume_floor(auto_commit))
    if restored is not None:
        generation = tracker.generation
        await store.persist(pq.mq, restored)
        if tracker.generation == generation:  # not reset meanwhile (a seek)
            tracker.mark_committed(restored)
        log.info("stored_offset_restored", stored_offset=stored, offset=restored)
    pq.offset_unverified = False
    return True


async def check_commit(store: OffsetStore, pq: ProcessQueue, offset: int) -> None:
    """Raise [`CommitFailedError`][aiorocket.errors.CommitFailedError] if the
    application's commit of ``offset`` for ``pq`` would move the group's stored offset
    back: below the offset read when the queue was checked after a lost connection, or,
    not checked yet, below the one stored now; or if ``pq`` was revoked (by the end of
    the check: a rebalance while earlier stores or this query were awaited), its new
    owner continuing from its own commits. A failed query raises its own error."""
    floor = pq.tracker.floor
    stored: int | None = None
    if floor is not None and offset < floor:
        stored = floor
    elif pq.offset_unverified:
        stored = await _ahead_now(store, pq, offset)
    if pq.dropped:
        raise CommitFailedError(
            f"{pq.mq} is not assigned to this consumer any more (a rebalance gave it to "
            "another member during the commit): nothing of it was committed"
        )
    if stored is not None:
        raise CommitFailedError(
            f"offset {offset} of {pq.mq} is behind the group's stored offset {stored}: the "
            "connection to its broker was lost and the group moved on meanwhile; nothing "
            "was committed (the messages in between may be consumed twice)"
        )


async def _ahead_now(store: OffsetStore, pq: ProcessQueue, offset: int) -> int | None:
    """``group_ahead`` by a query no loss of the connection overlapped: the answer of
    one that a loss overlapped may predate a commit made since (``verify_offset``'s
    rule), so it is asked again, on the new connection; a loss during that one too
    fails the commit of the queue."""
    for _ in range(2):
        disconnects = pq.disconnects
        stored = await group_ahead(store, pq, offset)
        if pq.disconnects == disconnects:
            return stored
    raise CommitFailedError(
        f"the connection to the broker of {pq.mq} was lost during each check of the "
        "group's stored offset: nothing of it was committed"
    )


class OffsetCommitter:
    """Commits the committable offset of queues whose offset changed.

    Parameters
    ----------
    store:
        Where offsets are stored (the brokers, or a local file in broadcasting).
    log:
        The consumer's logger; failures are logged with the queue, never raised.
    bound:
        Seconds one broker's commits may take in one ``commit_all`` call; queues not
        committed in time stay dirty and are retried by the next call.
    lock_held:
        Whether a queue's broker lock is ours now (orderly consumption), else None.
    """

    def __init__(
        self,
        store: OffsetStore,
        log: Logger,
        *,
        bound: float,
        lock_held: Callable[[ProcessQueue], bool] | None = None,
    ) -> None:
        self._store = store
        self._log = log
        self._bound = bound
        self._lock_held = lock_held

    async def commit(self, pq: ProcessQueue) -> bool:
        """Commit ``pq``'s committable offset if it changed. True once nothing is left to
        send: the store has the offset, or the group's stored offset is past it (a
        revoked or unverified queue that another member consumed); False when the commit
        failed (the queue stays dirty)."""
        tracker = pq.tracker
        if not tracker.dirty:
            return True
        offset = None  # until the check below passed
        try:
            # After a lost connection: behind the group's stored offset, committing would
            # move the group back (duplicates); the pull task moves the queue there. A
            # revoked queue (dropped) too: its new owner may have committed past it while
            # the revoke waited for its handlers (up to shutdown_timeout), unless its
            # broker lock is still ours, which no other member's consumption passes.
            if (pq.offset_unverified or (pq.dropped and not self._holds_lock(pq))) and (
                await group_ahead(self._store, pq) is not None
            ):
                return True
            offset = tracker.committable()
            await self._store.persist(pq.mq, offset)
        except RocketMQError as exc:
            self._log.warning(
                "offset_persist_failed",
                topic=pq.mq.topic,
                broker=pq.mq.broker_name,
                queue=pq.mq.queue_id,
                offset=offset,
                error=str(exc),
            )
            return False
        # Marked only now: cancelled above, the queue stays dirty for the next commit.
        tracker.mark_committed(offset)
        return True

    def _holds_lock(self, pq: ProcessQueue) -> bool:
        return self._lock_held is not None and self._lock_held(pq)

    async def commit_all(self, pqs: Iterable[ProcessQueue]) -> None:
        """Commit every changed queue: one task per broker, each within ``bound``."""
        by_broker: dict[str, list[ProcessQueue]] = {}
        for pq in pqs:
            if pq.tracker.dirty:
                by_broker.setdefault(pq.mq.broker_name, []).append(pq)
        if not by_broker:
            return
        if len(by_broker) == 1:
            await self._commit_broker(*by_broker.items())
            return
        async with anyio.create_task_group() as tg:
            for item in by_broker.items():
                tg.start_soon(self._commit_broker, item)

    async def _commit_broker(self, item: tuple[str, list[ProcessQueue]]) -> None:
        broker, pqs = item
        done = 0
        with anyio.move_on_after(self._bound) as scope:
            for pq in pqs:
                await self.commit(pq)
                done += 1
        if scope.cancelled_caught:
            self._log.warning(
                "offset_persist_timeout",
                broker=broker,
                queues_left=len(pqs) - done,
                timeout=self._bound,
            )


class AutoCommit:
    """The engine's commits: every ``persist_offset_interval``, at revoke and at close.

    With ``auto_commit=False`` (a PullConsumer whose application commits) every method
    does nothing: only the application's ``commit()`` stores offsets.

    Parameters
    ----------
    state:
        The consumer's shared state: its owned and releasing queues, ``auto_commit``.
    committer:
        Commits the queues (bounded per broker, safe against cancellation).
    store:
        The offset store, flushed after each periodic commit (a local file).
    """

    def __init__(
        self, state: ConsumerState, committer: OffsetCommitter, store: OffsetStore
    ) -> None:
        self._state = state
        self._committer = committer
        self.store = store

    async def commit(self, pq: ProcessQueue) -> bool:
        """Commit ``pq``'s offset if it changed; False when that failed (see
        ``OffsetCommitter.commit``)."""
        if not self._state.auto_commit:
            return True  # the application's commits only
        return await self._committer.commit(pq)

    async def commit_queues(self, pqs: Iterable[ProcessQueue]) -> None:
        if self._state.auto_commit:
            await self._committer.commit_all(pqs)

    async def commit_all(self) -> None:
        """Commit every changed queue (concurrently per broker, each bounded), then flush."""
        state = self._state
        if not state.auto_commit:
            return
        await self._committer.commit_all(
            [*state.process_queues.values(), *state.releasing.values()]
        )
        try:
            await self.store.flush()
        except OSError as exc:
            state.log.warning("offset_flush_failed", error=str(exc))

    async def run(self) -> None:
        """Commit every ``persist_offset_interval`` until cancelled."""
        interval = self._state.config.persist_offset_interval
        while True:
            await anyio.sleep(interval)
            await self.commit_all()
