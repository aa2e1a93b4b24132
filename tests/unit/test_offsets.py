"""OffsetTracker against a naive reference model (hypothesis stateful) plus examples."""

from __future__ import annotations

import pytest
from hypothesis import assume, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from aiorocket.consumer.offsets import OffsetTracker


class OffsetTrackerMachine(RuleBasedStateMachine):
    """The model keeps a plain set of unfinished offsets and recomputes min() each time."""

    tracker: OffsetTracker

    @initialize(start=st.integers(0, 10**12))
    def init(self, start: int) -> None:
        self.tracker = OffsetTracker(start)
        self.pending: set[int] = set()
        self.next_offset = start
        self.committed: int | None = start
        self.generation = 0
        self.floor = start  # committable may not drop below this until a reset
        self.finished: list[int] = []
        self.old_generation_offsets: list[int] = []

    def model_committable(self) -> int:
        return min(self.pending) if self.pending else self.next_offset

    # ------------------------------------------------------------------ rules

    @rule(
        gaps=st.lists(st.integers(0, 5), max_size=40),
        lead=st.integers(0, 3),
        tail=st.integers(0, 5),
    )
    def add_batch(self, gaps: list[int], lead: int, tail: int) -> None:
        offsets = []
        offset = self.next_offset + lead - 1
        for gap in gaps:
            offset += 1 + gap  # gap > 0: filtered-out messages
            offsets.append(offset)
        next_offset = (offsets[-1] if offsets else self.next_offset - 1) + 1 + tail
        # Generators must work as well as lists.
        batch = iter(offsets) if len(offsets) % 2 else offsets
        self.tracker.add(batch, next_offset)
        self.pending.update(offsets)
        self.next_offset = next_offset

    @rule(data=st.data())
    def add_invalid_batch(self, data: st.DataObject) -> None:
        kind = data.draw(st.sampled_from(["below", "duplicate", "descending", "next"]))
        n = self.next_offset
        if kind == "below":
            assume(n > 0)
            bad: list[int] = [n - 1, n + 1]
            next_offset = n + 2
        elif kind == "duplicate":
            bad, next_offset = [n, n], n + 1
        elif kind == "descending":
            bad, next_offset = [n + 2, n + 1], n + 3
        else:
            bad, next_offset = [n, n + 3], n + 3
        before = repr(self.tracker)
        with pytest.raises(ValueError):
            self.tracker.add(bad, next_offset)
        assert repr(self.tracker) == before

    @precondition(lambda self: self.pending)
    @rule(data=st.data(), pass_generation=st.booleans())
    def finish_one(self, data: st.DataObject, pass_generation: bool) -> None:
        offset = data.draw(st.sampled_from(sorted(self.pending)))
        generation = self.generation if pass_generation else None
        assert self.tracker.done(offset, generation) is True
        self.pending.discard(offset)
        self.finished.append(offset)

    @precondition(lambda self: self.finished)
    @rule(data=st.data())
    def finish_twice(self, data: st.DataObject) -> None:
        offset = data.draw(st.sampled_from(self.finished))
        assert self.tracker.done(offset) is False

    @rule(offset=st.integers(0, 10**13))
    def finish_unknown(self, offset: int) -> None:
        assume(offset not in self.pending)
        assert self.tracker.done(offset) is False

    @precondition(lambda self: self.old_generation_offsets)
    @rule(data=st.data())
    def finish_stale_generation(self, data: st.DataObject) -> None:
        # A handler started before a reset completes late, possibly for an offset that
        # was pulled again after the reset: it must not count.
        offset = data.draw(st.sampled_from(self.old_generation_offsets))
        assert self.tracker.done(offset, self.generation - 1) is False

    @rule(offset=st.integers(0, 10**12))
    def reset(self, offset: int) -> None:
        self.old_generation_offsets = sorted(self.pending)
        self.tracker.reset(offset)
        self.pending.clear()
        self.finished.clear()
        self.next_offset = offset
        self.generation += 1
        self.floor = offset

    @rule()
    def commit(self) -> None:
        current = self.model_committable()
        assert self.tracker.dirty == (current != self.committed)
        self.tracker.mark_committed(self.tracker.committable())
        self.committed = current
        assert not self.tracker.dirty

    @rule()
    def mark_dirty(self) -> None:
        self.tracker.mark_dirty()
        self.committed = None

    @rule()
    def mark_committed(self) -> None:
        value = self.tracker.committable()
        self.tracker.mark_committed(value)
        self.committed = value

    # ------------------------------------------------------------- invariants

    @invariant()
    def committable_matches_model(self) -> None:
        committable = self.tracker.committable()
        assert committable == self.model_committable()
        assert all(committable <= p for p in self.pending)
        if not self.pending:
            assert committable == self.next_offset

    @invariant()
    def committable_never_decreases_between_resets(self) -> None:
        committable = self.tracker.committable()
        assert committable >= self.floor
        self.floor = committable

    @invariant()
    def counters_match_model(self) -> None:
        t = self.tracker
        assert t.in_flight == len(self.pending)
        assert t.min_in_flight == (min(self.pending) if self.pending else None)
        assert t.max_in_flight == (max(self.pending) if self.pending else None)
        assert t.span() == (self.next_offset - min(self.pending) if self.pending else 0)
        assert t.next_offset == self.next_offset
        assert t.generation == self.generation
        assert t.dirty == (t.committable() != self.committed)

    @invariant()
    def finished_after_matches_model(self) -> None:
        # an offset pulled after o left the flight: fewer in flight above o than pulled
        t = self.tracker
        for o in {t.committable() - 1, t.committable(), *list(self.pending)[:3]}:
            if o < 0:
                continue
            above = sum(1 for p in self.pending if p > o)
            assert t.finished_after(o) == (above < self.next_offset - o - 1)


TestOffsetTrackerStateful = OffsetTrackerMachine.TestCase
TestOffsetTrackerStateful.settings = settings(
    max_examples=300, stateful_step_count=60, deadline=None
)


# ------------------------------------------------------------------ examples


def test_out_of_order_completion() -> None:
    t = OffsetTracker(100)
    t.add(range(100, 104), 104)
    assert t.committable() == 100
    t.done(102)
    t.done(101)
    assert t.committable() == 100
    assert t.span() == 4  # pulled up to 104, the oldest unfinished is 100
    t.done(100)
    assert t.committable() == 103
    assert (t.min_in_flight, t.max_in_flight, t.span()) == (103, 103, 1)
    t.done(103)
    assert t.committable() == 104
    assert t.in_flight == 0
    assert (t.min_in_flight, t.max_in_flight) == (None, None)


def test_gaps_from_filtering() -> None:
    t = OffsetTracker(0)
    t.add([3, 7, 8], 20)  # 0-2, 4-6 and 9-19 were filtered out by the broker
    assert t.committable() == 3
    t.done(3)
    assert t.committable() == 7
    t.done(8)
    assert t.committable() == 7
    assert t.max_in_flight == 7
    t.done(7)
    assert t.committable() == 20
    t.add([], 25)  # NO_MATCHED_MSG: nothing for us, but the commit point still moves
    assert t.committable() == 25


def test_commit_point_with_nothing_in_flight_is_next_offset() -> None:
    t = OffsetTracker(5)
    assert t.committable() == 5
    assert not t.dirty
    t.add([5, 6], 7)
    t.add([9], 12)
    assert t.committable() == 5
    for o in (9, 6, 5):
        t.done(o)
    assert t.committable() == 12


def test_done_is_idempotent() -> None:
    t = OffsetTracker(0)
    t.add([0, 1, 2], 3)
    assert t.done(1) is True
    assert t.done(1) is False
    assert t.done(99) is False
    assert t.in_flight == 2
    assert t.committable() == 0


def test_finished_after_tells_whether_a_later_offset_left_the_flight() -> None:
    t = OffsetTracker(0)
    t.add([0, 1, 2, 3], 4)
    assert not t.finished_after(0)  # 1..3 all in flight
    t.done(2)
    assert t.finished_after(0) and t.finished_after(1)
    assert not t.finished_after(2) and not t.finished_after(3)
    t.add([6], 8)  # 4, 5 and 7 filtered out by the broker: counted as left
    assert t.finished_after(3)


def test_an_offset_counts_as_committed_only_once_marked() -> None:
    t = OffsetTracker(10)
    t.add([10, 11], 12)
    assert not t.dirty
    t.done(10)
    assert t.dirty and t.committable() == 11
    t.mark_committed(11)  # the store accepted 11
    assert not t.dirty
    t.mark_dirty()  # e.g. a seek: commit again even if the value is the same
    assert t.dirty
    t.done(11)
    assert t.committable() == 12
    t.mark_committed(12)
    assert not t.dirty


def test_reset_drops_in_flight_and_rejects_stale_completions() -> None:
    t = OffsetTracker(50)
    t.add([50, 51, 52], 53)
    generation = t.generation
    t.reset(40)  # seek backwards
    assert t.generation == generation + 1
    assert t.committable() == 40
    assert t.in_flight == 0
    assert t.dirty
    t.add([50, 51], 52)  # the same offsets pulled again
    assert t.done(50, generation) is False  # a handler from before the reset
    assert t.committable() == 50
    assert t.done(50, t.generation) is True
    assert t.committable() == 51


def test_add_validation() -> None:
    t = OffsetTracker(10)
    with pytest.raises(ValueError):
        t.add([9], 11)  # below the pull position
    with pytest.raises(ValueError):
        t.add([10, 10], 11)
    with pytest.raises(ValueError):
        t.add([11, 10], 12)
    with pytest.raises(ValueError):
        t.add([10, 11], 11)  # next_offset must pass the last message
    with pytest.raises(ValueError):
        t.add([], 9)  # next_offset may not go backwards
    t.add([10], 11)
    with pytest.raises(ValueError):
        t.add([10], 12)
    assert t.in_flight == 1
    assert t.next_offset == 11


@pytest.mark.parametrize("bad", [-1, 1.5, True, "3"])
def test_bad_start_offsets(bad: object) -> None:
    with pytest.raises(ValueError):
        OffsetTracker(bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        OffsetTracker(0).reset(bad)  # type: ignore[arg-type]


def test_long_run_keeps_memory_bounded() -> None:
    # One slow message pins the front; once it finishes the deque must shrink.
    t = OffsetTracker(0)
    t.add(range(0, 10_000), 10_000)
    for o in range(1, 10_000):
        t.done(o)
    assert t.in_flight == 1
    assert t.span() == 10_000  # everything after it is done, but 0 still holds the commit
    t.done(0)
    assert t.committable() == 10_000
    assert not t._early and not t._runs and t.in_flight == 0


def test_runs_split_by_filtering_finish_in_any_order() -> None:
    # Filtered pulls leave gaps: the offsets in flight are several runs, and pulls that
    # continue the last run join it (OffsetTracker keeps runs, not offsets).
    t = OffsetTracker(0)
    t.add([0, 1, 2, 5, 6, 9], 10)
    t.add([10, 11], 12)
    assert (t.in_flight, t.min_in_flight, t.max_in_flight) == (8, 0, 11)
    assert t.done(3) is False and t.done(7) is False and t.done(12) is False  # gaps, above
    assert t.done(6) is True and t.done(6) is False
    assert t.done(11) is True
    assert (t.in_flight, t.max_in_flight) == (6, 10)
    for o in (0, 1, 2):
        assert t.done(o) is True
    assert t.committable() == 5
    assert t.done(5) is True
    assert t.committable() == 9  # 6 finished early, 7 and 8 filtered out
    assert t.done(9) is True and t.done(10) is True
    assert t.committable() == 12 and t.in_flight == 0 and t.max_in_flight is None
