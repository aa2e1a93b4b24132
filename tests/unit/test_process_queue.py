"""A pull task's wait for cache room: resume at half the limit, not at the first message."""

from __future__ import annotations

import time

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aiorocket.consumer.config import ConsumerConfig
from aiorocket.consumer.process_queue import RUN_BYTES, CacheBudget, ProcessQueue
from aiorocket.message import MessageQueue
from aiorocket.received import ConsumerMessage

pytestmark = pytest.mark.anyio


def pulled(pq: ProcessQueue, count: int, size: int = 1) -> list[ConsumerMessage]:
    start = pq.tracker.next_offset
    msgs = [ConsumerMessage("t", b"x" * size, {}, 0, o, o) for o in range(start, start + count)]
    pq.on_pulled(msgs, start + count)
    return msgs


async def released_after(pq: ProcessQueue, cfg: ConsumerConfig, steps: list[object]) -> int:
    """Run ``wait_room``; apply ``steps`` (messages to finish, or 'drop') one by one and
    return how many were applied when the waiter was released."""
    released = anyio.Event()

    async def waiter() -> None:
        await pq.wait_room(cfg)
        released.set()

    applied = 0
    async with anyio.create_task_group() as tg:
        tg.start_soon(waiter)
        await anyio.wait_all_tasks_blocked()
        for step in steps:
            if released.is_set():
                break
            if step == "drop":
                pq.drop()
            else:
                assert isinstance(step, ConsumerMessage)
                assert pq.on_done(step, pq.tracker.generation)
            applied += 1
            await anyio.wait_all_tasks_blocked()
        with anyio.fail_after(5):
            await released.wait()
    return applied


async def test_over_the_count_limit_the_pull_resumes_at_half() -> None:
    cfg = ConsumerConfig(pull_threshold_for_queue=10)
    pq = ProcessQueue(MessageQueue("t", "b", 0), 0)
    msgs = pulled(pq, 12)
    assert not pq.has_capacity(cfg)
    # 12 cached: below the limit after 3 finish, but the pull waits until 5 are left.
    assert await released_after(pq, cfg, list(msgs)) == 7
    assert pq.cached_count == 5


async def test_over_the_size_limit_the_pull_resumes_at_half() -> None:
    cfg = ConsumerConfig(pull_threshold_size_for_queue=1000)
    pq = ProcessQueue(MessageQueue("t", "b", 0), 0)
    msgs = pulled(pq, 4, size=300)  # 1,200 bytes
    assert not pq.has_capacity(cfg)
    assert await released_after(pq, cfg, list(msgs)) == 3  # 300 bytes <= 500 left
    assert pq.cached_bytes == 300


async def test_a_span_wait_ends_at_the_next_finished_message_for_a_recheck() -> None:
    cfg = ConsumerConfig(consume_concurrently_max_span=5)
    pq = ProcessQueue(MessageQueue("t", "b", 0), 0)
    msgs = pulled(pq, 8)  # span 7, far below the count limit
    assert not pq.has_capacity(cfg)
    assert await released_after(pq, cfg, [msgs[0]]) == 1


async def test_dropping_the_queue_releases_its_waiting_pull() -> None:
    cfg = ConsumerConfig(pull_threshold_for_queue=10)
    pq = ProcessQueue(MessageQueue("t", "b", 0), 0)
    msgs = pulled(pq, 10)
    assert await released_after(pq, cfg, [msgs[0], "drop"]) == 2


async def test_every_change_of_a_queue_cache_reaches_the_global_budget() -> None:
    budget = CacheBudget(4)
    a = ProcessQueue(MessageQueue("t", "a", 0), 0, budget)
    b = ProcessQueue(MessageQueue("t", "b", 0), 0, budget)
    a_msgs, b_msgs = pulled(a, 3), pulled(b, 3)
    assert (budget.count, budget.has_room()) == (6, False)
    assert a.on_done(a_msgs[0], 0)  # finished, or taken by getmany, or dead-lettered
    a.reset(10)  # OFFSET_ILLEGAL or seek: the cached messages are forgotten
    assert budget.count == 3
    b.drop()  # revoked: its cached messages no longer count
    assert budget.count == 0
    assert b.on_done(b_msgs[0], 0)  # a handler of the dropped queue finishing late
    assert budget.count == 0


async def test_a_pull_waiting_on_the_global_budget_wakes_when_any_queue_frees_room() -> None:
    budget = CacheBudget(2)
    a = ProcessQueue(MessageQueue("t", "a", 0), 0, budget)
    msgs = pulled(a, 2)
    woke = anyio.Event()

    async def pull_task() -> None:
        await budget.wait_room()
        woke.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(pull_task)
        await anyio.wait_all_tasks_blocked()
        assert not woke.is_set()
        assert a.on_done(msgs[0], 0)
        with anyio.fail_after(5):
            await woke.wait()


@given(st.data())
@settings(max_examples=100, deadline=None)
def test_on_done_in_any_order_keeps_the_commit_point_and_counts(data: st.DataObject) -> None:
    """``on_done`` does the oldest offset's completion itself (ceiling.py) and leaves the
    rest to ``OffsetTracker.done``: in any completion order, with resets and repeats, the
    commit point is the oldest unfinished offset and the cached count what is pending."""
    pq = ProcessQueue(MessageQueue("t", "b", 0), 0)
    msgs = pulled(pq, data.draw(st.integers(1, 12), "first pull"))
    if data.draw(st.booleans(), "second pull"):
        msgs += pulled(pq, data.draw(st.integers(1, 12), "second pull size"))
    unfinished = {m.queue_offset for m in msgs}
    for m in data.draw(st.permutations(msgs), "order"):
        if data.draw(st.booleans(), "repeat one first"):
            assert not pq.on_done(m, 1)  # another generation: stale
        assert pq.on_done(m, 0)
        assert not pq.on_done(m, 0)  # twice: ignored
        unfinished.discard(m.queue_offset)
        assert pq.tracker.committable() == min(unfinished, default=pq.tracker.next_offset)
        assert pq.cached_count == len(unfinished) == pq.tracker.in_flight
        assert pq.cached_bytes == len(unfinished)


def test_on_done_keeps_the_callers_clock_reading_as_the_last_consumed_time() -> None:
    pq = ProcessQueue(MessageQueue("t", "b", 0), 0)
    a, b = pulled(pq, 2)
    assert pq.on_done(a, 0, 12345.5)
    assert pq.last_consumed == 12345.5  # the worker's reading: one clock read a message
    before = time.monotonic()
    assert pq.on_done(b, 0)
    assert before <= pq.last_consumed <= time.monotonic()  # none given: read here


def _state(pq: ProcessQueue) -> tuple[object, ...]:
    t = pq.tracker
    budget = pq._budget
    return (t.committable(), t.in_flight, t._low, t._stop, list(t._runs), sorted(t._early),
            pq.cached_count, pq.cached_bytes, pq.consumed_total, pq.last_consumed,
            None if budget is None else (budget.count, budget.bytes))  # fmt: skip


@given(st.data())
@settings(max_examples=200, deadline=None)
def test_a_run_marked_done_at_once_ends_as_its_messages_one_by_one(data: st.DataObject) -> None:
    """``on_run_done`` (the worker pool's successes, a run of consecutive offsets at a
    time) leaves the queue as ``on_done`` of each message in turn would: any order of
    runs, runs across pulls and the broker's gaps, runs of a generation a reset made
    stale, offsets finished early, a cache budget."""
    budgets = (CacheBudget(1000), CacheBudget(1000))
    with_budget = data.draw(st.booleans(), "budget")
    one = ProcessQueue(MessageQueue("t", "b", 0), 0, budgets[0] if with_budget else None)
    runs = ProcessQueue(MessageQueue("t", "b", 0), 0, budgets[1] if with_budget else None)
    runs.last_consumed = one.last_consumed
    sizes = data.draw(st.lists(st.integers(0, 9), min_size=1, max_size=30), "sizes")
    msgs: dict[int, list[ConsumerMessage]] = {}  # offset: the message in each queue
    offset = 0
    for pull in data.draw(st.lists(st.integers(1, 10), min_size=1, max_size=3), "pulls"):
        batch = list(range(offset, offset + pull))
        gap = data.draw(st.integers(0, 2), "gap")  # offsets the broker filtered out
        for pq in (one, runs):
            got = [ConsumerMessage("t", b"x" * sizes[o % len(sizes)], {}, 0, o, o) for o in batch]
            pq.on_pulled(got, batch[-1] + 1 + gap)
            for m in got:
                msgs.setdefault(m.queue_offset, []).append(m)
        offset = one.tracker.next_offset
    order = data.draw(st.permutations(sorted(msgs)), "order")
    i = 0
    while i < len(order):
        # the longest run of consecutive offsets from here, cut at a random length
        j = i + 1
        while j < len(order) and order[j] == order[j - 1] + 1:
            j += 1
        j = data.draw(st.integers(i + 1, j), "run end")
        if data.draw(st.integers(0, 9), "reset") == 0:  # a seek while the run was handled
            for pq in (one, runs):  # the messages, of generation 0, are stale from now on
                pq.reset(pq.tracker.committable())
        now = float(i + 1)
        for m in (msgs[o][0] for o in order[i:j]):
            one.on_done(m, 0, now)
        run = [msgs[o][1] for o in order[i:j]]
        runs.on_run_done(run, 0, sum(len(m.body) for m in run), now)
        assert _state(one) == _state(runs)
        i = j


def test_an_answer_of_one_run_is_noted_for_its_delivery_with_its_sizes() -> None:
    # on_pulled notes an answer whose offsets are one run, of at most RUN_BYTES of
    # bodies, for the delivery it is handed to next (benchmarks/README.md, "Round 16"):
    # the list itself, its first offset, the generation, and its bodies' sizes (or the
    # one length the decoder's summary gave, which also counts the cached bytes); an
    # answer with the broker's gaps, an empty or a large one, or one the tracker
    # refuses, is not noted. Fails on the code before it (no note, no body length).
    pq = ProcessQueue(MessageQueue("t", "b", 0), 10)
    msgs = [ConsumerMessage("t", b"x" * (o % 3), {}, 0, o, o) for o in range(10, 14)]
    pq.on_pulled(msgs, 14)
    assert pq.pulled_run is not None and pq.pulled_run[0] is msgs
    assert pq.pulled_run[1:] == (10, 0, [1, 2, 0, 1], -1)
    assert (pq.cached_count, pq.cached_bytes) == (4, 4)
    pq.reset(14)
    alike = [ConsumerMessage("t", b"abc", {}, 0, o, o) for o in range(14, 17)]
    pq.on_pulled(alike, 17, 3)
    assert pq.pulled_run is not None and pq.pulled_run[0] is alike
    assert pq.pulled_run[1:] == (14, 1, None, 3)
    assert (pq.cached_count, pq.cached_bytes) == (3, 9)
    gaps = [ConsumerMessage("t", b"x", {}, 0, o, o) for o in (17, 19)]
    pq.on_pulled(gaps, 20)
    assert pq.pulled_run is None
    pq.on_pulled([], 21)
    assert pq.pulled_run is None
    pulled(pq, 2)
    assert pq.pulled_run is not None
    large = [ConsumerMessage("t", b"x" * (RUN_BYTES // 2 + 1), {}, 0, o, o) for o in (23, 24)]
    pq.on_pulled(large, 25)
    assert pq.pulled_run is None
    pulled(pq, 2)
    with pytest.raises(ValueError):  # below what was pulled: the tracker refuses it
        pq.on_pulled([ConsumerMessage("t", b"x", {}, 0, 3, 3)], 4)
    assert pq.pulled_run is None


class _OffsetReads(ConsumerMessage):
    """A message that counts the reads of its queue offset."""

    __slots__ = ("reads",)

    def __init__(self, offset: int) -> None:
        super().__init__("t", b"ab", {}, 0, offset, offset)
        self.reads = 0

    def __getattribute__(self, name: str) -> object:
        if name == "queue_offset":
            object.__setattr__(self, "reads", object.__getattribute__(self, "reads") + 1)
        return object.__getattribute__(self, name)


def test_an_answer_whose_offsets_the_decoder_gave_is_recorded_without_reading_each() -> None:
    # on_pulled takes the offsets the decoder read with the records (benchmarks/README.md,
    # "Round 17"), a sequence of them, and reads no message's: the tracker, the note of
    # one run and the counts are as when it reads each one. Offsets of another length than
    # the messages are not trusted (each message's is read); offsets that do not increase
    # are refused as before. Fails on the code before it (no offsets parameter).
    for given_offsets in ((10, 11, 12), None, (10, 11)):
        pq = ProcessQueue(MessageQueue("t", "b", 0), 10)
        msgs = [_OffsetReads(o) for o in range(10, 13)]
        pq.on_pulled(msgs, 13, 2, given_offsets)
        reads = sum(m.reads for m in msgs)
        assert reads == (0 if given_offsets == (10, 11, 12) else 3)
        assert pq.pulled_run is not None and pq.pulled_run[0] is msgs
        assert pq.pulled_run[1:] == (10, 0, None, 2)
        assert (pq.cached_count, pq.cached_bytes, pq.tracker.next_offset) == (3, 6, 13)
        assert pq.tracker.min_in_flight == 10
    pq = ProcessQueue(MessageQueue("t", "b", 0), 10)
    with pytest.raises(ValueError):
        pq.on_pulled([_OffsetReads(o) for o in (10, 11)], 12, 2, (11, 10))
    assert (pq.cached_count, pq.pulled_run) == (0, None)
