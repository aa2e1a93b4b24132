"""Per-queue in-flight offset tracking for the push consumer.

A queue's messages are pulled in increasing queue-offset order but handled
concurrently, so they finish out of order. The offset we may commit is the lowest
offset still being handled: committing anything higher would lose that message if the
consumer died now. This is the Java client's ``ProcessQueue`` rule (commit
``msgTreeMap.firstKey()``, or the end of what was pulled once nothing is cached), with
one refinement: when nothing is in flight we commit the last pull's
``nextBeginOffset``, which also skips a trailing run of filtered-out messages (Java
gets the same effect from ``correctTagsOffset`` on NO_MATCHED_MSG).

Offsets in a batch may have gaps (the broker filtered messages out by tag or SQL);
those offsets were never ours and are simply skipped.

Cost per message is amortised O(1): the offsets in flight are kept as runs of
consecutive offsets (a pull's answer is one run unless the broker filtered some out)
and the lowest unfinished one; finishing it, the common case, moves that offset on;
an offset finished while a lower one is not is kept in a set until the lowest passes
it, so each is added and removed once (min, span and the commit point in O(1)).

Resume floors: never resume below our own commits after a broker crash
----------------------------------------------------------------------
A broker keeps consumer offsets in memory and writes them to disk every few seconds
(``flushConsumerOffsetInterval``, 5 s). SIGKILLed or crashed, it restarts with the offsets
of its last write, behind what the group committed since (or with none for a group newer
than that write); a queue started from that record consumes again every message committed
after it (8,023 messages of a 36,000-message run). The client knows better for the queues
it owned, and the rule is:

* A queue's *resume floor* is this client's commit position for it: with the engine
  committing (auto-commit), the offset it commits (``committable``: everything below is
  handled), including the final commit at revoke that the dead broker could not take;
  with the application committing, the highest offset it committed (``high_commit``).
* Whenever the client reads the group's stored offset of a queue it owned without a
  break and finds it below the floor, or missing, the queue resumes at the floor and the
  floor is committed again. That is checking a still-owned queue after its broker
  connection was lost (``committer.verify_offset``), and starting a queue again that had
  left the route while ours (``rebalance``: its broker died; no member can consume or
  commit it until it is back, so its floor is kept in ``ResumeFloors`` meanwhile). A
  stored offset at or above the floor wins: another member moved on.
* The floor is forgotten whenever the client can no longer vouch for the queue: a reset
  of any kind (``reset``: a seek, the broker's OFFSET_ILLEGAL correction, an operator's
  reset the broker tells the clients about, RESET_CONSUMER_CLIENT_OFFSET), the queue
  allocated to another member (it may have moved it anywhere since), the client missing
  from the group's member list (the others took its queues).
* A pull's answer is never raised to the floor: OFFSET_ILLEGAL/moved names the queue's
  real range, or an operator's server-side reset (the broker refuses older commits
  until a pull has taken it), and both win over what the client remembers.

So a broker crash costs again only the messages being handled when the crash made the
client give its queues up (cached and running): not the seconds of commits the broker
lost. The floors live in memory: a consumer restarted meanwhile starts from the broker's
record, as every client does.
"""

from __future__ import annotations

import bisect
import operator
from collections import deque
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from aiorocket.message import MessageQueue

__all__ = ["OffsetTracker", "ResumeFloors", "resume_offset"]


class OffsetTracker:
    """In-flight offsets of one queue and the offset that is safe to commit.

    Not thread-safe; meant to be driven from one event loop.

    Contract with the pull loop: ``add`` each pull's messages (possibly none) and
    its ``nextBeginOffset``; every offset must be at or above the previous
    ``next_offset`` and batches must be strictly increasing. A violation raises
    ``ValueError`` and leaves the tracker unchanged; the pull loop should then
    ``reset``. (With 5.x inner-batch messages a pull that starts mid-batch may
    return offsets below the requested one; drop those before calling ``add``.)

    Commit flow: when ``dirty``, read ``committable``, store it, and call
    ``mark_committed`` with that value only after the store accepted it, so a commit
    that failed or was cancelled on the way is sent again by the next flush.

    ``reset`` (OFFSET_ILLEGAL, seek, reset-offset request) bumps ``generation`` and
    clears ``floor``. Handlers still running for the old generation should pass the
    generation they were started under to ``done``, so a late completion cannot
    mark a re-pulled message with the same offset as finished.
    """

    __slots__ = (
        "_early", "_low", "_next", "_runs", "_stop", "committed", "floor", "generation",
        "high_commit",
    )  # fmt: skip

    def __init__(self, start_offset: int) -> None:
        _check_offset("start_offset", start_offset)
        # The offsets in flight are runs of consecutive offsets (a pull's answer is one
        # run unless the broker filtered messages out), minus those finished early:
        # [_low, _stop) is the first run, _low its lowest unfinished offset (both -1
        # when nothing is in flight: no offset matches), _runs the later runs as
        # (start, stop) in order, _early the offsets finished while a lower one was
        # not. Finishing the lowest (nearly always: benchmarks/README.md, "Round 5")
        # moves a counter, with no set or deque per offset. Outside readers: the process
        # queue (has_capacity, on_done's common cases) and the puller read ``_low`` and
        # ``_next`` directly on the hot path, and the process queue moves ``_low``
        # (benchmarks/README.md, rounds 13 and 18 under ceiling.py): "-1 when nothing is
        # in flight" and ``_next`` as the idle commit point are their contract too.
        self._low = -1
        self._stop = -1
        self._runs: deque[tuple[int, int]] = deque()
        self._early: set[int] = set()
        self._next = start_offset  # highest next_offset seen: commit point when idle
        #: The value last committed (None: none, or forgotten by ``mark_dirty``); written
        #: only by ``mark_committed`` and ``mark_dirty``. A plain attribute: the pull
        #: compares its committable offset with it, a call less a pull than ``dirty``.
        #: The start offset normally came from the broker (QUERY_CONSUMER_OFFSET), so it
        #: is already committed; call mark_dirty() if it was computed locally instead.
        self.committed: int | None = start_offset
        #: Incremented by every ``reset``. A plain attribute, not a property: every
        #: delivered message compares it (benchmarks/ceiling.py); only ``reset`` writes it.
        self.generation = 0
        #: The highest offset committed for this queue in this generation: the start
        #: offset (read from the store, or computed and committed), then every commit
        #: marked. The resume floor of an application that commits (see the module).
        self.high_commit: int | None = start_offset
        #: The group's stored offset as read when the queue was checked after a lost
        #: connection: an application's commit below it would move the group back over
        #: what it (or another member) had committed. Belongs to one generation: a
        #: ``reset`` (a seek, the application choosing a position) clears it.
        self.floor: int | None = None

    # ----------------------------------------------------------------- pull side

    def add(self, offsets: Iterable[int], next_offset: int) -> None:
        """Record one pull: its (filtered) message offsets and its ``nextBeginOffset``.

        An empty ``offsets`` is normal (NO_MATCHED_MSG, or everything filtered) and
        only advances the idle commit point.
        """
        batch = offsets if isinstance(offsets, (list, tuple)) else tuple(offsets)
        prev = self._next - 1
        if batch:
            # The per-offset check runs in C (map/all); the loop below only finds the
            # culprit for the error message.
            if batch[0] <= prev or not all(map(operator.lt, batch, batch[1:])):
                for offset in batch:
                    if offset <= prev:
                        raise ValueError(
                            f"offset {offset} is not above {prev}: offsets must increase "
                            f"and start at or after the previous next_offset {self._next}"
                        )
                    prev = offset
            prev = batch[-1]
        if next_offset <= prev:
            raise ValueError(
                f"next_offset {next_offset} must be above {prev} "
                f"(the last offset added, and at least the previous next_offset)"
            )
        if batch:
            first = batch[0]
            if prev - first == len(batch) - 1:  # increasing, so consecutive: one run
                self._add_run(first, prev + 1)
            else:  # the broker filtered some out
                start = last = first
                for offset in batch[1:]:
                    if offset != last + 1:
                        self._add_run(start, last + 1)
                        start = offset
                    last = offset
                self._add_run(start, last + 1)
        self._next = next_offset

    def _add_run(self, start: int, stop: int) -> None:
        """Append the offsets [start, stop), all above those in flight."""
        runs = self._runs
        if self._low < 0:
            self._low, self._stop = start, stop
        elif runs:
            last_start, last_stop = runs[-1]
            if last_stop == start:
                runs[-1] = (last_start, stop)
            else:
                runs.append((start, stop))
        elif self._stop == start:
            self._stop = stop
        else:
            runs.append((start, stop))

    def reset(self, offset: int) -> None:
        """Forget everything in flight and restart at ``offset`` (may move backwards).

        The new offset is not marked committed, so the next flush stores it, as the
        Java client does after OFFSET_ILLEGAL.
        """
        _check_offset("offset", offset)
        self._low = self._stop = -1
        self._runs.clear()
        self._early.clear()
        self._next = offset
        self.generation += 1
        self.floor = None
        self.high_commit = None  # the reset's own commit sets it again

    # -------------------------------------------------------------- handler side

    def done(self, offset: int, generation: int | None = None) -> bool:
        """Mark ``offset`` finished; ``True`` if it was in flight.

        Idempotent: an unknown offset, one already done, or one from an older
        ``generation`` is ignored and returns ``False`` (so accounting such as the
        cached-bytes total should only be adjusted on ``True``).
        """
        if generation is not None and generation != self.generation:
            return False
        if offset == self._low:
            self.advance(offset + 1)
            return True
        if offset < self._low or offset in self._early:
            return False  # below the lowest in flight (or none is), or done already
        if offset >= self._stop:  # not in the first run: in a later one?
            runs = self._runs
            i = bisect.bisect_right(runs, offset, key=_run_start) - 1
            if i < 0 or offset >= runs[i][1]:
                return False  # in a gap (filtered out) or above everything pulled
        self._early.add(offset)
        return True

    def advance(self, low: int) -> None:
        """The lowest offset in flight finished: ``low`` is the one after it. For
        ``done`` and ``ProcessQueue.on_done``'s inline common case only."""
        early = self._early
        while True:
            if low == self._stop:  # the first run is done: the next one, if any
                runs = self._runs
                if not runs:
                    self._low = self._stop = -1
                    return
                low, self._stop = runs.popleft()
            if low not in early:
                self._low = low
                return
            early.remove(low)
            low += 1

    # --------------------------------------------------------------------- queries

    def committable(self) -> int:
        """The offset safe to commit now: lowest unfinished, else the last next_offset."""
        low = self._low
        return low if low >= 0 else self._next

    @property
    def in_flight(self) -> int:
        """Messages pulled and not yet done (the pullThresholdForQueue count)."""
        if self._low < 0:
            return 0
        runs = self._stop - self._low + sum(stop - start for start, stop in self._runs)
        return runs - len(self._early)

    @property
    def min_in_flight(self) -> int | None:
        low = self._low
        return low if low >= 0 else None

    @property
    def max_in_flight(self) -> int | None:
        if self._low < 0:
            return None
        early = self._early
        for start, stop in (*reversed(self._runs), (self._low, self._stop)):
            for offset in range(stop - 1, start - 1, -1):
                if offset not in early:
                    return offset
        raise AssertionError("unreachable: the lowest offset in flight is not early")

    def span(self) -> int:
        """How far pulling has run past the oldest unfinished offset (0 when none is),
        for ``consume_concurrently_max_span``.

        A single slow or unsettled message holds back the commit point; the span bounds
        how far pulling may run past it, and so how much is redelivered after a crash.
        (Java measures max minus min *unfinished* offset, which drops to 0 each time the
        messages after a stuck one are all done: pulling then trickles, one pull per
        batch consumed, and runs on without bound. This span only drops when the oldest
        message finishes, so pulling pauses instead.)
        """
        low = self._low
        return self._next - low if low >= 0 else 0

    def finished_after(self, offset: int) -> bool:
        """Whether an offset pulled after ``offset`` is no longer in flight: finished,
        or filtered out by the broker (the tracker cannot tell them apart). O(in flight):
        for the close, not the message path."""
        if self._low < 0:
            above = 0
        else:
            above = sum(
                max(0, stop - max(start, offset + 1))
                for start, stop in ((self._low, self._stop), *self._runs)
            ) - sum(1 for early in self._early if early > offset)
        return above < self._next - offset - 1

    @property
    def next_offset(self) -> int:
        """Where the next pull of this queue starts."""
        return self._next

    # ---------------------------------------------------------------- commit side

    @property
    def dirty(self) -> bool:
        """Whether ``committable`` differs from the last committed value."""
        return self.committable() != self.committed

    def mark_committed(self, offset: int) -> None:
        """Record that ``offset`` is now stored on the broker."""
        self.committed = offset
        high = self.high_commit
        self.high_commit = offset if high is None or offset > high else high

    def resume_floor(self, auto_commit: bool) -> int | None:
        """This client's commit position (see the module): ``committable`` when the
        engine commits, else the application's highest commit of this generation."""
        return self.committable() if auto_commit else self.high_commit

    def mark_dirty(self) -> None:
        """Forget the last committed value so the next flush commits again."""
        self.committed = None

    def __repr__(self) -> str:
        return (
            f"OffsetTracker(committable={self.committable()}, in_flight={self.in_flight}, "
            f"span={self.span()}, next_offset={self._next}, generation={self.generation})"
        )


def resume_offset(stored: int | None, floor: int | None) -> int | None:
    """Where a queue resumes when its ``floor`` must win over the group's ``stored``
    offset (missing, or below it: the broker lost commits), else None (resume at
    ``stored``). The one rule of the module's resume floors; pure."""
    if floor is None or (stored is not None and stored >= floor):
        return None
    return floor


class ResumeFloors:
    """The resume floors of queues that left the route while this client owned them
    (their broker died), until they are assigned again. Pure bookkeeping, no I/O: the
    rebalancer keeps, takes and forgets; the operator's reset notice forgets."""

    __slots__ = ("_floors",)

    def __init__(self) -> None:
        self._floors: dict[MessageQueue, int] = {}

    def keep(self, mq: MessageQueue, floor: int | None) -> None:
        """``mq`` left the route while ours, at ``floor`` (None: nothing to keep)."""
        if floor is None:
            self._floors.pop(mq, None)
        else:
            self._floors[mq] = floor

    def get(self, mq: MessageQueue) -> int | None:
        return self._floors.get(mq)

    def take(self, mq: MessageQueue) -> int | None:
        """``mq`` is ours again: its floor, used once."""
        return self._floors.pop(mq, None)

    def forget(self, mqs: Iterable[MessageQueue]) -> None:
        """A reset, or another member's turn: the floors of ``mqs`` no longer hold."""
        for mq in mqs:
            self._floors.pop(mq, None)

    def __iter__(self) -> Iterator[MessageQueue]:
        return iter(list(self._floors))

    def __len__(self) -> int:
        return len(self._floors)


def _run_start(run: tuple[int, int]) -> int:
    return run[0]


def _check_offset(what: str, offset: int) -> None:
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise ValueError(f"{what} must be a non-negative int, got {offset!r}")
