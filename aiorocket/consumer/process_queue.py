"""ProcessQueue: the consumer's state for one assigned message queue.

One pull task per ProcessQueue keeps it fed; handlers drain it. The queue's cache
limits (count, bytes, span) are what the pull task waits on, so a slow handler slows
pulling instead of growing memory.
"""

from __future__ import annotations

import enum
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import anyio

from aiorocket._signal import Signal
from aiorocket.consumer.offsets import OffsetTracker
from aiorocket.message import MessageExt, MessageQueue

if TYPE_CHECKING:
    from aiorocket.consumer.config import ConsumerConfig

__all__ = [
    "RUN_BYTES",
    "TRANSITIONS",
    "CacheBudget",
    "InvalidQueueTransition",
    "ProcessQueue",
    "PulledRun",
    "QueueState",
    "next_state",
]


#: A pull's answer whose offsets are one run (``ProcessQueue.on_pulled``): its messages
#: in offset order (the list itself, compared by identity), the first one's offset, the
#: queue's generation, and the bodies' sizes: one a message, or None and the one length
#: they all have.
PulledRun = tuple[Sequence[MessageExt], int, int, list[int] | None, int]

#: The bodies an answer noted as ``pulled_run`` may hold at most: a delivery may keep
#: noted answers' messages past their handling (64 answers at most: ``WorkerPool``), so
#: only small ones are noted (the many-messages-a-second case they are for).
RUN_BYTES = 64 * 1024


class QueueState(enum.Enum):
    """Where a ``ProcessQueue`` is in its life.

    ``ACTIVE``: pulled and consumed. ``PAUSED``: the application paused it
    (``PullConsumer.pause``): no pulls, its buffered messages are not returned, but it is
    still owned and its offsets still commit. ``DROPPED``: revoked by a rebalance or
    closed with the consumer; final: a queue assigned again gets a new ProcessQueue.
    """

    ACTIVE = "active"
    PAUSED = "paused"
    DROPPED = "dropped"


#: The transitions a queue may make, all of them: a move not listed is a bug
#: (``InvalidQueueTransition``). Moving to the state it is in is allowed and
#: changes nothing (pausing twice, dropping a dropped queue at close).
TRANSITIONS: dict[QueueState, frozenset[QueueState]] = {
    QueueState.ACTIVE: frozenset({QueueState.PAUSED, QueueState.DROPPED}),
    QueueState.PAUSED: frozenset({QueueState.ACTIVE, QueueState.DROPPED}),
    QueueState.DROPPED: frozenset(),
}


class InvalidQueueTransition(RuntimeError):
    """A ProcessQueue was asked to make a move ``TRANSITIONS`` does not allow (a bug
    in the engine, not a condition of the broker: deliberately not a RocketMQError)."""


def next_state(current: QueueState, wanted: QueueState) -> QueueState:
    """The state after asking ``current`` to become ``wanted``: the one rule, no I/O."""
    if wanted is current or wanted in TRANSITIONS[current]:
        return wanted
    raise InvalidQueueTransition(f"a {current.value} queue cannot become {wanted.value}")


class CacheBudget:
    """The cap on messages cached by all of a consumer's queues (``pull_threshold_for_all``;
    over gRPC, what the receivers may hold: messages and body bytes).

    Each queue (a remoting ``ProcessQueue``, a gRPC ``PopQueue``) reports here every
    change of its cached count (pulled, finished or taken, reset, dropped), so the total
    is always current and a pull waiting for room is woken by whichever of them frees
    it, whoever caused it.

    Parameters
    ----------
    limit:
        Pulls wait while this many messages or more are cached.
    max_bytes:
        ... or while this many body bytes or more are (default: no byte limit). One
        large message always passes: the limit is checked before a pull, not per message.
    """

    __slots__ = ("_room", "bytes", "count", "limit", "max_bytes")

    def __init__(self, limit: int, max_bytes: float = float("inf")) -> None:
        self.limit = limit
        self.max_bytes = max_bytes
        self.count = 0
        self.bytes = 0
        self._room = Signal()

    def has_room(self) -> bool:
        return self.count < self.limit and self.bytes < self.max_bytes

    def add(self, n: int, size: int) -> None:
        self.count += n
        self.bytes += size

    def release(self, n: int, size: int = 0) -> None:
        self.count -= n
        self.bytes -= size
        if self.count < self.limit and self.bytes < self.max_bytes:
            self._room.notify()

    async def wait_room(self) -> None:
        while not self.has_room():
            await self._room.wait()


class ProcessQueue:
    """The state of one assigned queue.

    Parameters
    ----------
    mq:
        The queue.
    start_offset:
        Where its first pull starts.
    budget:
        The consumer's cap on all queues' cached messages, if it has one; this queue
        reports its cached count to it.
    """

    __slots__ = (
        "_budget",
        "_calls",
        "_changed",
        "_discarded",
        "_room",
        "_room_at",
        "buffer",
        "cached_bytes",
        "cached_count",
        "consume_scope",
        "created_at",
        "disconnects",
        "dropped",
        "last_consumed",
        "last_lock_time",
        "last_pull_completed",
        "locked",
        "mq",
        "offset_unverified",
        "order_lock",
        "pull_scope",
        "pulled_run",
        "pulled_total",
        "request_scope",
        "running",
        "small_batch",
        "small_batch_until",
        "stall_reported",
        "state",
        "suspended_until",
        "tracker",
        "undecodable_total",
    )

    def __init__(
        self, mq: MessageQueue, start_offset: int, budget: CacheBudget | None = None
    ) -> None:
        self.mq = mq
        self._budget = budget
        self.tracker = OffsetTracker(start_offset)
        self.cached_count = 0
        self.cached_bytes = 0
        #: handler calls running for this queue that their callers count (``+= 1`` and
        #: ``-= 1`` around each: orderly steps, batches, ``_worker``); ``handler_calls()``
        #: adds those a worker pool counts from its workers' slots
        self.running = 0
        #: the calls a worker pool counts from its workers' slots, not a call at a time
        #: (``WorkerPool._worker_remoting``): how many of them are this queue's now
        self._calls: Callable[[ProcessQueue], int] | None = None
        #: the lifecycle (see QueueState); changed only by _enter (pause, resume, drop)
        self.state = QueueState.ACTIVE
        #: ``state is DROPPED``, kept by _enter as a plain attribute: every delivery path
        #: reads it once per message, where a property would add a call on the hottest
        #: path (benchmarks/ceiling.py; a precaution, within that benchmark's noise).
        self.dropped = False
        self.pull_scope: anyio.CancelScope | None = None
        #: orderly: the scope of the queue's consume loop (cancelled only by the close)
        self.consume_scope: anyio.CancelScope | None = None
        self.pulled_total = 0
        #: The answer ``on_pulled`` just took, when its offsets are one run: what the
        #: delivery it is handed to next may mark a run at a time (see ``PulledRun``);
        #: the pull task clears it once the answer is delivered.
        self.pulled_run: PulledRun | None = None
        self._discarded = 0  # pulled, then forgotten unconsumed by a reset
        self.undecodable_total = 0  # records dead-lettered or skipped, never delivered
        # A pull answer over the frame limit: pull this queue this many messages at a
        # time (0: the configured batch) until the offset passes small_batch_until.
        self.small_batch = 0
        self.small_batch_until = 0
        self.created_at = time.monotonic()
        #: ``time.monotonic()`` when a pull of this queue last completed (None before).
        self.last_pull_completed: float | None = None
        #: ``time.monotonic()`` when a message of this queue last finished (its creation
        #: before): the running info's lastConsumeTimestamp, from which mqadmin's
        #: consumerStatus tells a queue that holds messages and consumes none ("maybe
        #: blocked", after a minute)
        self.last_consumed = self.created_at
        # Orderly consumption: broker lock state and one-handler-at-a-time lock.
        self.locked = False
        self.last_lock_time = 0.0
        self.order_lock = anyio.Lock()
        self.suspended_until = 0.0
        # Orderly and pull-consumer modes keep their messages here, in offset order,
        # instead of the shared work channel.
        self.buffer: deque[Any] = deque()
        #: the unsettled offset last reported as stalling this queue (once per message).
        self.stall_reported: int | None = None
        self.request_scope: anyio.CancelScope | None = None
        #: The connection to the queue's broker was lost since the offset was last known
        #: good. The broker unregisters a client whose connection closes, so another
        #: member may have owned the queue meanwhile and committed past us. Until the
        #: pull task has compared with the broker's stored offset (and moved the queue
        #: there if it is ahead), no pull carries a commit and the committer stores ours
        #: only if the stored one is not ahead: a stale commit would move the group's
        #: offset backwards (duplicates).
        self.offset_unverified = False
        #: how many times ``mark_unverified`` was called: a check whose query spanned
        #: a new loss of the connection does not count (its answer may predate it).
        self.disconnects = 0
        self._changed = Signal()
        self._room = Signal()  # a pull waiting for cache room may go
        self._room_at: tuple[int, int] | None = None  # (count, bytes) it resumes at

    def handler_calls(self) -> int:
        """Handler calls running for this queue now: ``running`` (their callers' count)
        and those a worker pool counts from its workers' slots (``_calls``: over remoting
        on asyncio, where a count up and down a message was 14 bytecodes of the worker's;
        benchmarks/README.md, "Round 17"). What a revoke waits for, what the stats
        show."""
        calls = self._calls
        return self.running if calls is None else self.running + calls(self)

    # -- lifecycle ------------------------------------------------------------------

    def _enter(self, wanted: QueueState) -> None:
        self.state = next_state(self.state, wanted)
        self.dropped = self.state is QueueState.DROPPED

    @property
    def paused(self) -> bool:
        return self.state is QueueState.PAUSED

    def pause(self) -> None:
        """Stop pulling and returning this queue's messages (a dropped queue stays so)."""
        if not self.dropped:
            self._enter(QueueState.PAUSED)

    def resume(self) -> None:
        """Undo ``pause`` (a dropped queue stays dropped); wakes its pull task."""
        if not self.dropped:
            self._enter(QueueState.ACTIVE)
            self._changed.notify()

    def mark_unverified(self) -> None:
        """The connection to the queue's broker was lost (see ``offset_unverified``)."""
        self.offset_unverified = True
        self.disconnects += 1

    # -- pull side -----------------------------------------------------------------

    def has_capacity(self, cfg: ConsumerConfig) -> bool:
        # (the tracker's span() without its call: once a pull, "Round 18")
        tracker = self.tracker
        low = tracker._low
        return (
            self.cached_count < cfg.pull_threshold_for_queue
            and self.cached_bytes < cfg.pull_threshold_size_for_queue
            and (tracker._next - low if low >= 0 else 0) <= cfg.consume_concurrently_max_span
        )

    async def wait_room(self, cfg: ConsumerConfig) -> None:
        """Wait until another pull may go out (the pull task saw ``has_capacity`` false).

        Over the count or size limit, the pull waits until the cache has drained to half
        of it. Resuming at the first message freed would send one pull per batch freed,
        each on its own, whenever handlers are the bottleneck; refilling from half-full
        sends pulls right after their answers, where they leave in one write with the
        other queues' pulls (draining a backlog with ``async for``, pull writes fell
        from 8,353 to ~3,000 per 300,000 messages).
        """
        count_limit, bytes_limit = cfg.pull_threshold_for_queue, cfg.pull_threshold_size_for_queue
        if self.cached_count < count_limit and self.cached_bytes < bytes_limit:
            await self._changed.wait()  # only the span: it moves when the oldest finishes
            return
        self._room_at = (count_limit // 2, bytes_limit // 2)
        try:
            await self._room.wait()
        finally:
            self._room_at = None

    async def wait_changed(self) -> None:
        """Wait until a message of this queue finishes (or the queue is dropped)."""
        await self._changed.wait()

    def on_pulled(
        self,
        messages: Sequence[MessageExt],
        next_offset: int,
        body_len: int = -1,
        offsets: Sequence[int] | None = None,
    ) -> None:
        """Record a pull's ``messages`` (offsets increasing) and its ``next_offset``.
        ``body_len``: every message's body is that long (the decoder's summary of an
        answer laid out alike), so their sizes are not read a message at a time; -1:
        unknown. ``offsets``: the messages' queue offsets, in order (the decoder's, that
        read them: "Round 17"), so that they are not read a message at a time either;
        None: unknown.

        Once a pull (benchmarks/ceiling.py): an answer whose offsets are one run of
        consecutive offsets, of at most ``RUN_BYTES`` of bodies, is noted in
        ``pulled_run``, so that its successes can be marked a run at a time without a
        look at each message (benchmarks/README.md, "Round 16")."""
        self.pulled_run = None
        if offsets is None or len(offsets) != len(messages):
            offsets = [m.queue_offset for m in messages]
        self.tracker.add(offsets, next_offset)  # checks that the offsets increase
        n = len(messages)
        sizes: list[int] | None = None
        if body_len < 0:
            sizes = [len(m.body) for m in messages]
            size = sum(sizes)
        else:
            size = n * body_len
        self.cached_count += n
        if self._budget is not None:
            self._budget.add(n, size)
        self.cached_bytes += size
        self.pulled_total += n
        # increasing (tracker.add raised otherwise), so consecutive when the ends are
        # n - 1 apart
        if n and offsets[-1] - offsets[0] == n - 1 and size <= RUN_BYTES:
            self.pulled_run = (messages, offsets[0], self.tracker.generation, sizes, body_len)

    def on_done(self, msg: MessageExt, generation: int, now: float = 0.0) -> bool:
        """Mark a message finished; False if it belonged to an older generation (reset).
        ``now``: ``time.monotonic()`` as the caller just read it (0.0: read it here)."""
        # Once per message (benchmarks/ceiling.py): OffsetTracker.done's common case, the
        # lowest offset in flight with none finished early and more in its run, is done
        # here without the call (benchmarks/README.md, "Round 5"); the rest goes to it.
        tracker = self.tracker
        offset = msg.queue_offset
        if offset == tracker._low and generation == tracker.generation:
            offset += 1
            if offset < tracker._stop and not tracker._early:
                tracker._low = offset
            else:
                tracker.advance(offset)
        elif not tracker.done(offset, generation):
            return False
        size = len(msg.body)
        self.cached_count -= 1
        self.cached_bytes -= size
        self.last_consumed = now or time.monotonic()
        if self._budget is not None:
            self._budget.release(1, size)
        if self._changed._event is not None:  # Signal.notify without the call
            self._changed.notify()
        room_at = self._room_at
        if room_at and self.cached_count <= room_at[0] and self.cached_bytes <= room_at[1]:
            self._room.notify()
        return True

    def on_run_done(
        self, run: Sequence[MessageExt], generation: int, size: int, now: float
    ) -> None:
        """Mark finished ``run``, messages of consecutive offsets of one ``generation``
        whose bodies are ``size`` bytes, as ``on_done`` marks each one, and wake the
        queue's waiters. ``now``: ``time.monotonic()`` as the caller read it.

        The worker pool's successes, a run at a time (benchmarks/ceiling.py;
        benchmarks/README.md, "Round 13"): the common case, the run starts at the lowest
        offset in flight with none finished early, moves the tracker and the counters
        once for the whole run; any other goes through ``on_done`` a message."""
        tracker = self.tracker
        start = run[0].queue_offset
        stop = start + len(run)
        if (start == tracker._low and generation == tracker.generation
                and stop <= tracker._stop and not tracker._early):  # fmt: skip
            if stop < tracker._stop:
                tracker._low = stop
            else:
                tracker.advance(stop)  # the first run is done: the next one, if any
            n = len(run)
            self.cached_count -= n
            self.cached_bytes -= size
            self.last_consumed = now
            if self._budget is not None:
                self._budget.release(n, size)
            room_at = self._room_at
            if room_at and self.cached_count <= room_at[0] and self.cached_bytes <= room_at[1]:
                self._room.notify()
        else:
            for msg in run:
                self.on_done(msg, generation, now)
        # also when every message was stale: the waiters must see ``running`` drop
        self._changed.notify()

    @property
    def consumed_total(self) -> int:
        """Messages pulled and finished: counted from the others, so that finishing one
        updates a counter less (once per message: benchmarks/README.md,
        "Round 4 (issue 43, goal 1)")."""
        return self.pulled_total - self.cached_count - self._discarded

    def reset(self, offset: int) -> None:
        """Forget everything cached (OFFSET_ILLEGAL or seek) and restart at ``offset``."""
        self.tracker.reset(offset)
        if self._budget is not None:
            self._budget.release(self.cached_count, self.cached_bytes)
        self._discarded += self.cached_count
        self.cached_count = 0
        self.cached_bytes = 0
        self.buffer.clear()
        if self.request_scope is not None:
            self.request_scope.cancel()  # a pull in flight was for the old position
        self._changed.notify()
        self._room.notify()

    def drop(self) -> None:
        """Stop the queue; its cached messages no longer count against the budget."""
        self._enter(QueueState.DROPPED)
        if self._budget is not None:
            # Messages still being handled finish later, but they are no more than the
            # running handlers; leaving the rest counted would hold every other pull.
            self._budget.release(self.cached_count, self.cached_bytes)
            self._budget = None
        if self.pull_scope is not None:
            self.pull_scope.cancel()
        self._changed.notify()
        self._room.notify()

    def notify(self) -> None:
        self._changed.notify()

    def __repr__(self) -> str:
        return (
            f"<ProcessQueue {self.mq} cached={self.cached_count} running={self.handler_calls()} "
            f"commit={self.tracker.committable()}{' dropped' if self.dropped else ''}>"
        )
