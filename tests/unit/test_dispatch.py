"""Handler workers, the work queue and settling, without a broker.

A real :class:`WorkerPool` with a real settler: messages are fed the way a pull task
does (``on_pulled`` then ``deliver``); the settler's send-back goes to a recording
broker.
"""

from __future__ import annotations

import sys
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, cast

import anyio
import anyio.lowlevel
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aiorocket._log import get_logger
from aiorocket._settings import apply_settings
from aiorocket.client.broker import BrokerClient
from aiorocket.consumer.brokers import BrokerFinder
from aiorocket.consumer.config import ConsumerConfig
from aiorocket.consumer.dispatch import _BURST as BURST
from aiorocket.consumer.dispatch import _NOTED_RUNS as NOTED_RUNS
from aiorocket.consumer.dispatch import WorkerPool
from aiorocket.consumer.handler import ConsumeTimeouts, Handler
from aiorocket.consumer.process_queue import ProcessQueue
from aiorocket.consumer.settle import RemotingSettler
from aiorocket.consumer.state import ConsumerState
from aiorocket.consumer.threads import HandlerThreads
from aiorocket.consumer.work_queue import WorkQueue
from aiorocket.errors import BrokerResponseError
from aiorocket.message import MessageExt, MessageQueue
from aiorocket.received import ConsumerMessage
from aiorocket.results import ConsumeStatus, Reconsume
from aiorocket.testing.logs import capture_logs

pytestmark = pytest.mark.anyio

MQ = MessageQueue("t", "broker-a", 0)


class Masters:
    """The one part of BrokerFinder the settler uses."""

    async def master(self, mq: MessageQueue) -> str | None:
        return "127.0.0.1:10911"


class Harness:
    """Records send-backs (the broker side of the settler)."""

    def __init__(self, state: ConsumerState) -> None:
        self.state = state
        self.pq = ProcessQueue(MQ, 0)
        state.process_queues[MQ] = self.pq
        self.sent_back: list[tuple[int, int]] = []
        self.sent = anyio.Event()
        self.settler = RemotingSettler(
            state, cast(BrokerClient, self), cast(BrokerFinder, Masters()), self.retry_later
        )
        self.pool: WorkerPool
        self.released: list[ConsumerMessage] = []
        self.cut: list[ConsumerMessage] = []  # what the close's drain cancelled
        #: the next send-backs that fail; ``yields``: after a checkpoint, else at once
        self.failing_sends = 0
        self.failure_yields = False
        #: messages given to ``retry_later`` (None: a failed send-back is a test's error)
        self.retried: list[ConsumerMessage] | None = None
        self.retried_after: list[float] = []  # each local retry's wait, in seconds
        self.retried_one = anyio.Event()

    async def send_back(
        self, addr: str, msg: MessageExt, group: str, *, delay_level: int,
        max_reconsume_times: int, origin_topic: str | None = None,
    ) -> None:  # fmt: skip
        if self.failing_sends:
            self.failing_sends -= 1
            if self.failure_yields:
                await anyio.lowlevel.checkpoint()
            raise BrokerResponseError(1, "refused")
        self.sent_back.append((msg.queue_offset, delay_level))
        self.sent.set()

    def retry_later(self, msg: ConsumerMessage, after: float) -> None:
        if self.retried is None:
            raise AssertionError("no send-back fails here")
        self.retried.append(msg)
        self.retried_after.append(after)
        self.retried_one.set()

    async def consumed(self, n: int) -> None:
        """Wait until ``n`` messages of the queue were settled as consumed."""
        with anyio.fail_after(10):
            while self.pq.consumed_total < n:
                await self.pq.wait_changed()

    def feed(self, count: int) -> list[ConsumerMessage]:
        start = self.pq.tracker.next_offset
        msgs = [ConsumerMessage("t", b"x", {}, 0, o, o) for o in range(start, start + count)]
        for m in msgs:
            m._pq, m._generation, m._settler = self.pq, self.pq.tracker.generation, self.settler
        self.pq.on_pulled(msgs, start + count)
        self.pool.deliver(self.pq, msgs)
        return msgs


@asynccontextmanager
async def workers(
    handler: Callable[..., Awaitable[Any]] | None, **settings: Any
) -> AsyncIterator[Harness]:
    batch = "batch_handler" in settings
    fn = settings.pop("batch_handler") if batch else handler
    assert fn is not None
    cfg = apply_settings(ConsumerConfig(), settings, "consumer")
    log = get_logger("test")
    state = ConsumerState("g", cfg, log)
    h = Harness(state)
    threads = HandlerThreads(concurrency=cfg.consume_concurrency, max_abandoned=4, log=log)
    h.pool = WorkerPool(state, Handler(fn, batch=batch, threads=threads, state=state), h.settler)
    async with anyio.create_task_group() as tg:
        await h.pool.start(tg)
        yield h
        h.released = h.pool.stop()  # as on close: what never started is handed back
        with anyio.fail_after(10):
            h.cut = await h.pool.drain(graceful=True)


async def test_every_message_is_handled_once_and_committed() -> None:
    seen: list[int] = []
    done = anyio.Event()

    async def handle(msg: ConsumerMessage) -> None:
        seen.append(msg.queue_offset)
        if len(seen) == 100:
            done.set()

    async with workers(handle) as h:
        for _ in range(5):
            h.feed(20)
        with anyio.fail_after(10):
            await done.wait()
    assert sorted(seen) == list(range(100))
    assert h.pq.tracker.committable() == 100
    assert (h.pq.cached_count, h.pq.cached_bytes, h.pq.handler_calls()) == (0, 0, 0)
    assert h.pq.consumed_total == 100


@pytest.mark.parametrize(
    ("outcome", "level"),
    [
        ("raise", 0),
        (False, 0),
        (ConsumeStatus.RECONSUME_LATER, 0),
        (Reconsume(7), 7),
        ("not a handler result", 0),  # a failure of this call, not of the worker
    ],
)
async def test_failures_are_sent_back_before_the_offset_moves(outcome: object, level: int) -> None:
    async def handle(msg: ConsumerMessage) -> object:
        if msg.queue_offset == 1:
            if outcome == "raise":
                raise RuntimeError("boom")
            return outcome
        return None

    async with workers(handle, consume_concurrency=1) as h:
        msgs = h.feed(3)
        with anyio.fail_after(10):
            await h.sent.wait()
    assert h.sent_back == [(1, level)]
    assert all(m.settled for m in msgs)
    assert h.pq.tracker.committable() == 3


@pytest.mark.parametrize(
    ("outcome", "after"),
    [
        ("raise", 5.0),  # local_retry_delay (Java's 5 s)
        (Reconsume(2), 5.0),  # level 2: 5 s
        (Reconsume(4), 30.0),  # level 4: 30 s, longer than local_retry_delay
        (Reconsume(delay=7), 10.0),  # sent back with level 3 (10 s): not before
        (Reconsume(delay=3601), 7200.0),  # past 1 h: level 18 (2 h)
    ],
)
async def test_a_failed_send_back_retries_locally_no_earlier_than_asked(
    outcome: object, after: float
) -> None:
    """A send-back that fails leaves the message to a local retry: after
    ``local_retry_delay``, or after the delay the send-back was asked for when that is
    longer, so ``Reconsume(delay=30)`` never comes back after 5 s (docs/consumer.md)."""

    async def handle(msg: ConsumerMessage) -> object:
        if outcome == "raise":
            raise RuntimeError("boom")
        return outcome

    async with workers(handle, consume_concurrency=1) as h:
        h.retried = []
        h.failing_sends = 1
        h.feed(1)
        with anyio.fail_after(10):
            await h.retried_one.wait()
    assert h.retried_after == [after]
    assert h.sent_back == [] and not h.retried[0].settled


async def test_a_batch_handler_returning_a_wrong_type_fails_only_its_batch() -> None:
    async with workers(None, batch_handler=lambda msgs: "bogus") as h:
        msgs = h.feed(2)
        with anyio.fail_after(10):
            while len(h.sent_back) < 2:
                await h.sent.wait()
                h.sent = anyio.Event()
    assert sorted(h.sent_back) == [(0, 0), (1, 0)]
    assert all(m.settled for m in msgs)


async def test_a_handler_may_settle_its_message_itself() -> None:
    async def handle(msg: ConsumerMessage) -> None:
        await msg.ack()

    async with workers(handle) as h:
        h.feed(10)
        await h.consumed(10)
    assert h.pq.consumed_total == 10
    assert h.pq.tracker.committable() == 10


async def test_slow_handlers_spread_over_all_workers_and_no_more() -> None:
    gate = anyio.Event()
    running = peak = 0
    all_busy = anyio.Event()

    async def handle(msg: ConsumerMessage) -> None:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        if running == 4:
            all_busy.set()
        await gate.wait()
        running -= 1

    async with workers(handle, consume_concurrency=4) as h:
        h.feed(10)  # one put wakes one worker; each taker wakes the next
        with anyio.fail_after(10):
            await all_busy.wait()
        assert h.pq.handler_calls() == 4
        assert h.pq.tracker.committable() == 0  # nothing finished: nothing committable
        gate.set()
        await h.consumed(10)
    assert peak == 4
    assert h.pq.tracker.committable() == 10


async def test_close_finishes_running_handlers_and_hands_back_the_unstarted() -> None:
    """A closing consumer handles no new message: the queued ones are handed back (left
    uncommitted, so the next owner has them), the running ones finish; a rolling restart
    then duplicates no more than the handlers running at the signal."""
    gate, busy = anyio.Event(), anyio.Event()
    seen: list[int] = []

    async def handle(msg: ConsumerMessage) -> None:
        seen.append(msg.queue_offset)
        if len(seen) == 2:
            busy.set()
        await gate.wait()

    async with workers(handle, consume_concurrency=2) as h:
        h.feed(10)
        with anyio.fail_after(10):
            await busy.wait()
        gate.set()  # the two running ones may finish during the drain
    assert sorted(seen) == [0, 1]
    assert sorted(m.queue_offset for m in h.released) == list(range(2, 10))
    assert not any(m.settled for m in h.released)
    assert h.pq.tracker.committable() == 2  # past the handled ones, not the released


async def test_close_hands_back_a_cut_handler_only_when_a_later_message_finished() -> None:
    """Issue 30, item 5: a handler cut by shutdown_timeout holds its queue's commit
    point. Offset 0 is cut while 1..5 finished: it is sent back for a retry and the
    close commits past it, so the next owner handles only it again (before, 1..5 too)."""

    async def handle(msg: ConsumerMessage) -> None:
        if msg.queue_offset == 0:
            await anyio.sleep_forever()

    async with workers(handle, consume_concurrency=2, shutdown_timeout=0.2) as h:
        h.feed(6)
        await h.consumed(5)
    assert [m.queue_offset for m in h.cut] == [0]
    assert h.pq.tracker.committable() == 0
    assert await h.settler.hand_back(h.cut, 5) == 1
    assert h.sent_back == [(0, h.state.config.retry_delay_level)]
    assert h.pq.tracker.committable() == 6


async def test_close_leaves_a_cut_handler_uncommitted_when_nothing_after_it_finished() -> None:
    """Cut with only unstarted messages after them: nothing would be consumed twice, so
    they are not sent back (no attempt counted, no retry delay): the next owner pulls
    them at once."""
    started = anyio.Event()
    running = 0

    async def handle(msg: ConsumerMessage) -> None:
        nonlocal running
        running += 1
        if running == 2:
            started.set()
        await anyio.sleep_forever()

    async with workers(handle, consume_concurrency=2, shutdown_timeout=0.2) as h:
        h.feed(6)
        with anyio.fail_after(10):
            await started.wait()
    assert sorted(m.queue_offset for m in h.cut) == [0, 1]
    assert sorted(m.queue_offset for m in h.released) == [2, 3, 4, 5]
    assert await h.settler.hand_back(h.cut, 5) == 0
    assert h.sent_back == []
    assert h.pq.tracker.committable() == 0


async def test_consume_timeout_cancels_the_handler_and_sends_it_back() -> None:
    async def handle(msg: ConsumerMessage) -> None:
        if msg.queue_offset == 0:
            await anyio.sleep_forever()

    async with workers(handle, consume_concurrency=1, consume_timeout=0.2) as h:
        h.feed(3)
        with anyio.fail_after(10):
            await h.sent.wait()
        assert h.sent_back == [(0, h.state.config.retry_delay_level)]
    assert h.pq.tracker.committable() == 3
    assert h.pq.handler_calls() == 0


async def test_each_call_gets_the_whole_consume_timeout_after_slow_ones() -> None:
    # The worker reads the clock once a message: a call's deadline starts from the
    # reading taken when the call before it finished, while nothing waited since
    # (benchmarks/README.md, "Round 5"), never from an older one: message 1 fails
    # (its send-back is not that reading's path), message 2 starts 0.6 s after message
    # 0 finished and runs 0.3 s of its 0.5 s.
    async def handle(msg: ConsumerMessage) -> None:
        await anyio.sleep(0.3)
        if msg.queue_offset == 1:
            raise RuntimeError("fails")

    async with workers(handle, consume_concurrency=1, consume_timeout=0.5) as h:
        h.feed(3)  # all queued: each is taken without a wait
        await h.consumed(3)
    assert h.sent_back == [(1, h.state.config.retry_delay_level)]
    assert h.pq.tracker.committable() == 3


async def test_the_watchdog_stamps_each_call_when_it_first_sees_it_and_cuts_it_a_timeout_later(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The worker reads no clock a message: a call's deadline is stamped by the watchdog's
    # check that first sees it (ConsumeTimeouts.check; benchmarks/README.md, "Round 14").
    # The checks are driven here with times of the test's choosing (the watchdog's own
    # loop does not run): a call is cut a whole consume_timeout after it was first seen,
    # and a call that follows a stamped one on the same worker is not cut by that one's
    # deadline.
    async def no_watchdog(self: ConsumeTimeouts) -> None:
        await anyio.sleep_forever()

    monkeypatch.setattr(ConsumeTimeouts, "run", no_watchdog)
    go = anyio.Event()
    started: list[int] = []

    async def handle(msg: ConsumerMessage) -> None:
        started.append(msg.queue_offset)
        if msg.queue_offset == 0:
            await go.wait()
        else:
            await anyio.sleep_forever()  # only the watchdog ends it

    async with workers(handle, consume_concurrency=1, consume_timeout=100.0) as h:
        check = h.pool._timeouts.check
        t = time.monotonic() + 10_000.0  # later than any deadline the real clock gives
        h.feed(2)
        await anyio.wait_all_tasks_blocked()
        assert started == [0]
        check(t)  # first sees call 0: its deadline is t + 100
        go.set()
        await anyio.wait_all_tasks_blocked()
        assert started == [0, 1]
        check(t + 100.0)  # call 0's deadline: call 1 is first seen here, not cut
        await anyio.wait_all_tasks_blocked()
        check(t + 199.0)
        await anyio.wait_all_tasks_blocked()
        assert h.sent_back == []
        check(t + 200.0)  # a whole timeout after call 1 was first seen
        with anyio.fail_after(10):
            await h.sent.wait()
        assert h.sent_back == [(1, h.state.config.retry_delay_level)]
    assert h.pq.tracker.committable() == 2
    assert h.pq.handler_calls() == 0


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # trio: on_done a message
async def test_a_failure_marking_a_run_is_loud_and_stalls_neither_its_queue_nor_others(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The successes are marked in their queues by a loop callback (_mark_finished). An
    # exception there (a bug: it only counts) used to end the callback: the runs after
    # the failing one stayed unmarked, and the handled messages' offsets in flight for
    # ever (no commit past them, pulls held by the span limit). Now it is logged as an
    # error, the other runs are marked, and the failing queue starts again from its
    # commit point: its handled messages come again, nothing is committed past them.
    on_run_done = ProcessQueue.on_run_done
    raised: list[ProcessQueue] = []

    def run_done(self: ProcessQueue, run: Any, generation: int, size: int, now: float) -> None:
        if self.mq.queue_id == 0 and not raised:
            raised.append(self)
            raise RuntimeError("a bug")
        on_run_done(self, run, generation, size, now)

    monkeypatch.setattr(ProcessQueue, "on_run_done", run_done)

    async def handle(msg: ConsumerMessage) -> None:
        pass

    with capture_logs() as events:
        async with workers(handle, consume_concurrency=1) as h:
            other = ProcessQueue(MessageQueue("t", "broker-a", 1), 0)
            msgs = [ConsumerMessage("t", b"xy", {}, 1, o, o) for o in range(4)]
            for m in msgs:
                m._pq, m._generation, m._settler = other, 0, h.settler
            other.on_pulled(msgs, 4)
            h.feed(4)  # queue 0's run first: both are marked by one callback
            h.pool.deliver(other, msgs)
            with anyio.fail_after(10):
                while other.consumed_total < 4:
                    await other.wait_changed()
            assert other.tracker.committable() == 4
            assert (other.cached_count, other.cached_bytes) == (0, 0)
            assert raised == [h.pq]
            # queue 0: nothing committed past its handled messages, nothing left holding
            # its pulls, pulled again from its commit point
            tracker = h.pq.tracker
            assert (tracker.committable(), tracker.next_offset, tracker.in_flight) == (0, 0, 0)
            assert (h.pq.cached_count, h.pq.cached_bytes) == (0, 0)
            again = h.feed(4)
            assert [m.queue_offset for m in again] == [0, 1, 2, 3]
            await h.consumed(4)
            assert tracker.committable() == 4
    (failed,) = [e for e in events if e["event"] == "mark_finished_failed"]
    assert failed["log_level"] == "error"
    assert (failed["queue"], failed["offsets"]) == (0, [0, 3])


@given(st.data())
@settings(max_examples=300, deadline=None)
def test_the_successes_pending_are_cut_into_runs_that_end_as_their_messages_one_by_one(
    data: st.DataObject,
) -> None:
    # _mark_finished cuts the successes settled since its last call into runs of
    # consecutive offsets of one queue and generation (benchmarks/README.md, "Round 14":
    # the cut without a counter of its own), and finds those of an answer noted as one
    # run (ProcessQueue.pulled_run, kept as delivered) in it by identity, a slice at a
    # time ("Round 16"): whatever the order, the calls, the queues, the broker's gaps,
    # the answers noted or not (or pushed out), the bodies' sizes known or not, and a
    # reset's stale generation, each queue ends as on_done of each message in turn
    # leaves it. (An equivalence guard: it passes on the code before the noted answers;
    # it fails when a slice is taken without its identity check, or sized one off.)
    pool = WorkerPool.__new__(WorkerPool)  # only what _mark_finished reads: no loop
    pool._state = ConsumerState("g", ConsumerConfig(), get_logger("test"))
    pool._finished = []
    noting = data.draw(st.booleans(), "noting")
    pool._runs = deque(maxlen=NOTED_RUNS) if noting else None
    # each queue twice: one marked by _mark_finished, one by on_done (the reference)
    pairs = [tuple(ProcessQueue(MessageQueue("t", "b", q), 0) for _ in "ab") for q in range(2)]
    pending: list[ConsumerMessage] = []
    reference: list[tuple[ProcessQueue, ConsumerMessage]] = []
    for _ in range(data.draw(st.integers(1, 6), "pulls")):
        marked, one = pairs[data.draw(st.integers(0, 1), "queue")]
        one.last_consumed = marked.last_consumed = 0.0
        if data.draw(st.integers(0, 6), "reset") == 0:  # a seek: what is pulled is stale
            back = data.draw(st.integers(0, marked.tracker.next_offset), "to")
            marked.reset(back)
            one.reset(back)
        start = marked.tracker.next_offset
        n = data.draw(st.integers(1, 8), "n")
        # the broker's gaps inside an answer (filtered out): not one run, not noted
        skips = data.draw(st.lists(st.integers(0, 2), min_size=n, max_size=n), "skips")
        inner = data.draw(st.booleans(), "gaps inside") and noting
        offsets = [start + i + (sum(skips[: i + 1]) if inner else 0) for i in range(n)]
        gap = data.draw(st.integers(0, 2), "gap")
        alike = data.draw(st.booleans(), "bodies alike")  # the decoder's summary
        for pq, out in ((marked, pending), (one, None)):
            got = [ConsumerMessage("t", b"x" * (3 if alike else o % 5), {}, 0, o, o)
                   for o in offsets]  # fmt: skip
            for m in got:
                m._pq, m._generation = pq, pq.tracker.generation
            pq.on_pulled(got, offsets[-1] + 1 + gap, 3 if alike else -1)
            if out is not None:
                out.extend(got)
                noted = pq.pulled_run
                if pool._runs is not None and noted is not None and noted[0] is got:
                    pool._runs.append(noted)  # as deliver does
            else:
                reference.extend((pq, m) for m in got)
    # the successes in the order delivered (quick handlers), some missing (failed,
    # skipped, still running) or two swapped (one ran late), or in any order
    if data.draw(st.booleans(), "in order"):
        order = [i for i in range(len(pending)) if data.draw(st.integers(0, 5), "kept")]
        for _ in range(data.draw(st.integers(0, 2), "swaps")):
            if len(order) > 1:
                j = data.draw(st.integers(0, len(order) - 2), "swap")
                order[j], order[j + 1] = order[j + 1], order[j]
    else:
        order = list(data.draw(st.permutations(range(len(pending))), "order"))
        order = order[: data.draw(st.integers(0, len(order)), "finished")]
    done = 0
    while done < len(order):  # over one call or more (the worker yields between)
        upto = data.draw(st.integers(done + 1, len(order)), "call")
        pool._finished.extend(pending[i] for i in order[done:upto])
        pool._mark_finished()
        assert pool._finished == []
        done = upto
    for i in order:
        pq, m = reference[i]
        pq.on_done(m, m._generation, pq.last_consumed)
    for marked, one in pairs:
        t, r = marked.tracker, one.tracker
        assert (t.committable(), t.in_flight, t._low, t._stop, list(t._runs), sorted(t._early),
                marked.cached_count, marked.cached_bytes) == (
                r.committable(), r.in_flight, r._low, r._stop, list(r._runs), sorted(r._early),
                one.cached_count, one.cached_bytes)  # fmt: skip


async def test_a_burst_that_empties_the_queue_does_not_yield_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A worker yields between bursts of handler calls while work is still queued (the
    # pulls and reads run), not after a burst that emptied the queue: its next get()
    # waits, so yields, anyway (one loop round trip a pull answer less).
    yields: list[str] = []
    checkpoint = anyio.lowlevel.checkpoint

    async def counted() -> None:
        # the workers' loops: _worker's, and over remoting on asyncio _worker_remoting's
        name = sys._getframe(1).f_code.co_name
        yields.append("_worker" if name == "_worker_remoting" else name)
        await checkpoint()

    monkeypatch.setattr(anyio.lowlevel, "checkpoint", counted)

    async def handle(msg: ConsumerMessage) -> None:
        pass

    async with workers(handle, consume_concurrency=1) as h:
        h.feed(2 * BURST)  # two bursts in one put
        await h.consumed(2 * BURST)
        assert yields.count("_worker") == 1  # between the two, none after the second
        h.feed(BURST // 2)
        await h.consumed(2 * BURST + BURST // 2)
        h.feed(BURST // 2)  # a new burst after the wait: it empties the queue again
        await h.consumed(3 * BURST)
    assert yields.count("_worker") == 1


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # trio: on_done a message
async def test_a_burst_of_successes_is_marked_in_its_queue_as_one_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Successes are settled at once and marked in their queue once the worker yields, a
    # run of consecutive offsets at a time (on_run_done), not by on_done a message: the
    # queue ends as on_done would leave it (test_process_queue's property test).
    calls: list[tuple[str, int]] = []
    on_done, on_run_done = ProcessQueue.on_done, ProcessQueue.on_run_done

    def done(self: ProcessQueue, msg: MessageExt, generation: int, now: float = 0.0) -> bool:
        calls.append(("on_done", 1))
        return on_done(self, msg, generation, now)

    def run_done(self: ProcessQueue, run: Any, generation: int, size: int, now: float) -> None:
        calls.append(("on_run_done", len(run)))
        on_run_done(self, run, generation, size, now)

    monkeypatch.setattr(ProcessQueue, "on_done", done)
    monkeypatch.setattr(ProcessQueue, "on_run_done", run_done)

    async def handle(msg: ConsumerMessage) -> None:
        pass

    async with workers(handle, consume_concurrency=1) as h:
        msgs = h.feed(BURST)
        await h.consumed(BURST)
        assert calls == [("on_run_done", BURST)]
        assert all(m.settled for m in msgs)
        assert h.pq.tracker.committable() == BURST
        assert (h.pq.cached_count, h.pq.cached_bytes, h.pq.handler_calls()) == (0, 0, 0)


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_the_successes_of_answers_noted_as_one_run_are_marked_with_no_look_at_each(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The successes of answers on_pulled noted as one run, in the order delivered, are
    # found in them by identity and marked a slice at a time (benchmarks/README.md,
    # "Round 16"), never cut a message at a time (_mark_each), also when a burst spans
    # two answers; a failure among them sends those successes the old way, and the
    # queue still ends committed past all. Fails on the code before it (no noted runs).
    calls: list[int] = []
    each: list[int] = []
    on_run_done, mark_each = ProcessQueue.on_run_done, WorkerPool._mark_each

    def run_done(self: ProcessQueue, run: Any, generation: int, size: int, now: float) -> None:
        calls.append(len(run))
        on_run_done(self, run, generation, size, now)

    def marked_each(self: WorkerPool, finished: list[ConsumerMessage], now: float) -> None:
        each.append(len(finished))
        mark_each(self, finished, now)

    monkeypatch.setattr(ProcessQueue, "on_run_done", run_done)
    monkeypatch.setattr(WorkerPool, "_mark_each", marked_each)
    failing: set[int] = set()

    async def handle(msg: ConsumerMessage) -> ConsumeStatus | None:
        return ConsumeStatus.RECONSUME_LATER if msg.queue_offset in failing else None

    async with workers(handle, consume_concurrency=1) as h:
        h.feed(BURST // 2)
        h.feed(BURST)  # the first burst spans both answers
        await h.consumed(BURST + BURST // 2)
        assert (each, sum(calls)) == ([], BURST + BURST // 2)
        assert len(h.pool._runs or ()) == 0  # each answer's last message done with it
        assert (h.pq.cached_count, h.pq.cached_bytes) == (0, 0)
        assert h.pq.tracker.committable() == BURST + BURST // 2
        failing.add(BURST * 2)
        h.feed(BURST)
        await h.consumed(BURST * 2 + BURST // 2)
        assert each and h.sent_back == [(BURST * 2, 0)]
        assert h.pq.tracker.committable() == BURST * 2 + BURST // 2
        assert (h.pq.cached_count, h.pq.cached_bytes) == (0, 0)


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_revoked_queues_quiesce_marks_the_successes_not_marked_yet() -> None:
    # A success is marked in its queue when its worker yields (a loop callback): a
    # revoke's quiesce run before that callback marks it itself, so the revoke's commit
    # that follows passes it (else its next owner would handle it again).
    handled = anyio.Event()

    async def handle(msg: ConsumerMessage) -> None:
        handled.set()  # this task runs before the worker's callback

    async with workers(handle, consume_concurrency=1) as h:
        (msg,) = h.feed(1)
        with anyio.fail_after(10):
            await handled.wait()
        assert msg.settled and h.pq.handler_calls() == 0
        assert h.pq.tracker.committable() == 0  # not marked yet: the callback comes next
        h.pq.drop()
        await h.pool.quiesce([h.pq])
        assert h.pq.tracker.committable() == 1
        assert h.pq.consumed_total == 1


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_revoked_queues_quiesce_marks_a_success_that_ended_while_it_waited() -> None:
    # Two handlers of a revoked queue end in one loop round, a failure (offset 1) first:
    # its notify wakes the quiesce, which then sees nothing running, before the callback
    # that marks the success (offset 0) has run. The revoke's commit reads the queue at
    # once after the quiesce: the success must be marked by then (else the commit stays
    # at 0 and its next owner handles offset 0 again).
    go = {0: anyio.Event(), 1: anyio.Event()}

    async def handle(msg: ConsumerMessage) -> None:
        await go[msg.queue_offset].wait()
        if msg.queue_offset == 1:
            raise RuntimeError("fails")

    async with workers(handle, consume_concurrency=2) as h:
        h.feed(2)
        with anyio.fail_after(10):
            while h.pq.handler_calls() < 2:  # both handlers started (the pool has no event)
                await anyio.lowlevel.checkpoint()
        h.pq.drop()
        committable: list[int] = []

        async def revoke() -> None:
            await h.pool.quiesce([h.pq])
            committable.append(h.pq.tracker.committable())  # what the commit reads

        async with anyio.create_task_group() as tg:
            tg.start_soon(revoke)
            await anyio.wait_all_tasks_blocked()
            go[1].set()  # the failure's handler resumes first, in the same round
            go[0].set()
        assert committable == [1]  # offset 0 done, 1 (failed, not sent back) in flight


async def test_stale_and_dropped_messages_are_skipped() -> None:
    seen: list[int] = []

    async def handle(msg: ConsumerMessage) -> None:
        seen.append(msg.queue_offset)

    async with workers(handle) as h:
        # Queued but not run: the queue was reset (seek / OFFSET_ILLEGAL) meanwhile.
        queue = h.pool.queue
        stale = [ConsumerMessage("t", b"x", {}, 0, o, o) for o in range(3)]
        for m in stale:
            m._pq, m._generation, m._settler = h.pq, h.pq.tracker.generation, h.settler
        h.pq.on_pulled(stale, 3)
        h.pq.reset(0)
        queue.put_many(stale)
        h.feed(2)
        await h.consumed(2)
    assert seen == [0, 1]  # only the re-pulled generation
    assert h.pq.consumed_total == 2


# --------------------------------------------------------------------- work queue


async def test_work_queue_chain_wakes_idle_getters_one_at_a_time() -> None:
    queue: WorkQueue[int] = WorkQueue()
    got: dict[int, int] = {}

    async def getter(n: int) -> None:
        got[n] = await queue.get()
        await anyio.sleep_forever()  # stays busy, like a slow handler

    async with anyio.create_task_group() as tg:
        for n in range(5):
            tg.start_soon(getter, n)
        while queue.idle_getters < 5:
            await anyio.lowlevel.checkpoint()
        queue.put_many([10, 11, 12])
        assert queue.idle_getters == 4  # a put wakes one getter, not all of them
        while len(got) < 3:
            await anyio.lowlevel.checkpoint()
        assert sorted(got.values()) == [10, 11, 12]
        assert queue.idle_getters == 2 and len(queue) == 0
        tg.cancel_scope.cancel()


class CountedSet:
    """A waiter's event whose wake-ups are counted."""

    def __init__(self, event: Any, sets: list[int]) -> None:
        self._event, self._sets = event, sets

    def set(self) -> None:
        self._sets.append(1)
        self._event.set()

    def is_set(self) -> bool:
        return bool(self._event.is_set())

    def wait(self) -> Any:
        return self._event.wait()


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # trio: woken at the take
async def test_work_queue_a_getter_that_drains_the_queue_without_yielding_wakes_no_other() -> None:
    # A worker whose handlers do not wait takes a whole pull answer without yielding:
    # the idle worker after it is woken only if something is still queued once it
    # yields, not at its take (to find the queue empty: a round trip a pull answer).
    queue: WorkQueue[int] = WorkQueue()
    taken: list[list[int]] = []
    sets: list[int] = []

    async def getter() -> None:
        while True:
            try:
                got = [await queue.get()]
            except anyio.EndOfStream:
                return
            while len(queue):
                got.append(queue.pop_nowait())
            taken.append(got)

    async with anyio.create_task_group() as tg:
        tg.start_soon(getter)
        tg.start_soon(getter)
        await anyio.wait_all_tasks_blocked()
        queue._waiters = type(queue._waiters)(CountedSet(e, sets) for e in queue._waiters)
        queue.put_many([1, 2, 3])
        await anyio.wait_all_tasks_blocked()
        assert taken == [[1, 2, 3]]
        assert len(sets) == 1  # the put's: the other getter slept on
        assert queue.idle_getters == 2
        queue.close()


async def test_work_queue_cancelled_getters_strand_nothing() -> None:
    queue: WorkQueue[int] = WorkQueue()
    got: list[int] = []

    async def getter(scope_out: list[anyio.CancelScope]) -> None:
        with anyio.CancelScope() as scope:
            scope_out.append(scope)
            got.append(await queue.get())

    async with anyio.create_task_group() as tg:
        scopes: list[anyio.CancelScope] = []
        tg.start_soon(getter, scopes)
        tg.start_soon(getter, scopes)
        while queue.idle_getters < 2:
            await anyio.lowlevel.checkpoint()
        queue.put_many([1])  # wakes the first getter ...
        scopes[0].cancel()  # ... which is cancelled before it runs
        with anyio.fail_after(5):
            while not got:
                await anyio.lowlevel.checkpoint()
        assert got == [1]
        scopes[1].cancel()  # a waiting getter leaves the waiter list when cancelled
        while queue.idle_getters:
            await anyio.lowlevel.checkpoint()


async def test_work_queue_close_drains_then_ends() -> None:
    queue: WorkQueue[int] = WorkQueue()
    queue.put_many([1, 2])
    queue.close()
    assert [await queue.get(), await queue.get()] == [1, 2]
    with pytest.raises(anyio.EndOfStream):
        await queue.get()
    with pytest.raises(anyio.ClosedResourceError):
        queue.put_many([3])


async def test_a_failure_on_a_dropped_queue_is_not_sent_back() -> None:
    """A message whose handler fails after its queue was dropped (revoked, or its broker
    left the route) is neither sent back nor retried here: its offset was not committed
    past, so the queue's owner pulls it again; a copy in the retry topic would be a
    second delivery, handled at the same time (the simulator's pull_remoting seed 68: a
    broker crash while a handler hung)."""
    failing = anyio.Event()
    go_on = anyio.Event()

    async def handle(msg: ConsumerMessage) -> None:
        failing.set()
        await go_on.wait()
        raise RuntimeError("fails after the drop")

    async with workers(handle) as h:
        h.feed(1)
        with anyio.fail_after(10):
            await failing.wait()
        h.pq.dropped = True  # the queue left while the handler ran
        go_on.set()
        with anyio.fail_after(10):
            while h.pq.handler_calls():
                await h.pq.wait_changed()
    assert h.sent_back == []


async def test_a_revoked_queue_waits_for_its_running_handler_before_it_is_taken_again() -> None:
    """A queue revoked while a handler runs past the revoke's quiesce is not started
    again by this member until that call ends: pulled again at once, its message would
    be handled a second time beside the first call (the simulator's pull_remoting seed
    68: a broker crash while a handler hung, the broker back before consume_timeout).
    The rebalance then starts it (wanted back meanwhile)."""
    started = anyio.Event()
    go_on = anyio.Event()

    async def handle(msg: ConsumerMessage) -> None:
        started.set()
        await go_on.wait()

    async with workers(handle, shutdown_timeout=0.05) as h:
        h.feed(1)
        with anyio.fail_after(10):
            await started.wait()
        h.pq.drop()
        await h.pool.quiesce([h.pq])  # gives up after shutdown_timeout: the call runs on
        del h.state.process_queues[MQ]
        await h.pool.release([h.pq])
        assert h.pq.handler_calls() == 1
        assert h.state.waits_for(MQ)  # a rebalance leaves it out (_not_releasing)
        h.state.wanted_back.add(MQ)  # assigned to us again meanwhile
        go_on.set()
        with anyio.fail_after(10):
            await h.state.rebalance_wanted.wait()  # the pass that starts it again
        assert not h.state.waits_for(MQ)
        assert MQ not in h.state.wanted_back


# -- a retry-topic copy of a message in a handler call (aiorocket.consumer.in_hand) ------

RETRY_MQ = MessageQueue("%RETRY%g", "broker-a", 0)


def message(topic: str, offset: int, uniq: str, reconsume: int = 0) -> ConsumerMessage:
    body = f"body-{uniq}".encode()
    props = {"UNIQ_KEY": uniq, "KEYS": uniq}
    if reconsume:
        props["ORIGIN_MESSAGE_ID"] = "an offset id"
    return ConsumerMessage(topic, body, props, 0, offset, offset, reconsume_times=reconsume,
                           store_host="127.0.0.1:10911")  # fmt: skip


def feed_retry(h: Harness, uniqs: list[str]) -> list[ConsumerMessage]:
    """Messages of the group's retry queue (pulled: their topic restored to ``t``)."""
    pq = h.state.process_queues.get(RETRY_MQ)
    if pq is None:
        pq = h.state.process_queues[RETRY_MQ] = ProcessQueue(RETRY_MQ, 0)
    start = pq.tracker.next_offset
    msgs = [message("t", start + i, u, reconsume=1) for i, u in enumerate(uniqs)]
    for m in msgs:
        m._pq, m._generation, m._settler = pq, pq.tracker.generation, h.settler
    pq.on_pulled(msgs, start + len(msgs))
    h.pool.deliver(pq, msgs)
    return msgs


def feed_first(h: Harness, uniq: str) -> ConsumerMessage:
    start = h.pq.tracker.next_offset
    msg = message("t", start, uniq)
    msg._pq, msg._generation, msg._settler = h.pq, h.pq.tracker.generation, h.settler
    h.pq.on_pulled([msg], start + 1)
    h.pool.deliver(h.pq, [msg])
    return msg


class Calls:
    """A handler that records its calls; the message "a" waits for ``gate``, then
    ends as ``outcome`` says (None: success; "raise"; "hang": until cancelled)."""

    def __init__(self, outcome: str | None = None) -> None:
        self.outcome = outcome
        self.seen: list[tuple[str, int]] = []  # (id, reconsume_times)
        self.first_running = anyio.Event()
        self.gate = anyio.Event()
        self.marker = anyio.Event()

    async def __call__(self, msg: ConsumerMessage) -> None:
        self.seen.append((msg.msg_id, msg.reconsume_times))
        if msg.msg_id == "marker":
            self.marker.set()
        if msg.msg_id != "a" or msg.reconsume_times:
            return
        self.first_running.set()
        if self.outcome == "hang":
            await anyio.sleep_forever()
        await self.gate.wait()
        if self.outcome == "raise":
            raise RuntimeError("fails")


async def copy_fed_while_a_runs(h: Harness, calls: Calls) -> list[ConsumerMessage]:
    """The message "a" in a call; then its retry-topic copy and a marker behind it, on the retry
    queue, the marker handled (the idle worker would have taken the copy first)."""
    feed_first(h, "a")
    with anyio.fail_after(10):
        await calls.first_running.wait()
    copies = feed_retry(h, ["a", "marker"])
    with anyio.fail_after(10):
        await calls.marker.wait()
    assert calls.seen == [("a", 0), ("marker", 1)]  # the copy was not handed on
    return copies


async def retry_consumed(h: Harness, n: int) -> None:
    pq = h.state.process_queues[RETRY_MQ]
    with anyio.fail_after(10):
        while pq.consumed_total < n:
            await pq.wait_changed()


async def test_a_retry_copy_of_a_message_in_a_call_is_not_handled_and_follows_its_success() -> None:
    """The simulator's pull_remoting seed 7017: a member's hung call of a message
    outlived its queue; the queue's next owner failed it, and its retry-topic copy came
    to the first member while that call ran. The copy waits for the call; its success
    settles the copy too (its retry offset committed), with no second handler call."""
    calls = Calls()
    async with workers(calls, consume_concurrency=2) as h:
        copies = await copy_fed_while_a_runs(h, calls)
        calls.gate.set()
        await retry_consumed(h, 2)
        assert copies[0].settled
    assert calls.seen == [("a", 0), ("marker", 1)]
    assert h.sent_back == []
    assert h.state.process_queues[RETRY_MQ].tracker.committable() == 2


@pytest.mark.parametrize("dropped", [False, True])
async def test_a_retry_copy_of_a_message_in_a_call_follows_its_failure(dropped: bool) -> None:
    """A failed call sends its copy down the retry path too (one more attempt of its
    own), unhandled here; the first's queue revoked meanwhile (seed 7017's case), the
    first is not sent back (its queue's owner has it) and the copy still is."""
    calls = Calls("raise")
    async with workers(calls, consume_concurrency=2) as h:
        copies = await copy_fed_while_a_runs(h, calls)
        if dropped:
            h.pq.dropped = True
        calls.gate.set()
        await retry_consumed(h, 2)
    assert calls.seen == [("a", 0), ("marker", 1)]
    level = h.state.config.retry_delay_level
    # (queue offset, level): the copy at offset 0 of the retry queue, the first at 0 of t
    assert h.sent_back == [(0, level)] * (1 if dropped else 2)
    assert copies[0].settled


async def test_a_retry_copy_follows_a_consume_timeout_of_its_message() -> None:
    calls = Calls("hang")
    async with workers(calls, consume_concurrency=2, consume_timeout=0.3) as h:
        copies = await copy_fed_while_a_runs(h, calls)
        await retry_consumed(h, 2)
    assert calls.seen == [("a", 0), ("marker", 1)]
    assert h.sent_back == [(0, h.state.config.retry_delay_level)] * 2
    assert copies[0].settled


async def test_a_close_hands_back_a_waiting_copy_with_the_cut_call() -> None:
    """Closed while the copy waits (the call cut by shutdown_timeout): the copy is
    neither handled nor settled, and the drain returns it with the cut call (handed
    back or left uncommitted like it: delivered again, never dropped)."""
    calls = Calls("hang")
    async with workers(calls, consume_concurrency=2, shutdown_timeout=0.2) as h:
        copies = await copy_fed_while_a_runs(h, calls)
    assert calls.seen == [("a", 0), ("marker", 1)]
    cut = {(m.topic, m.msg_id, m.reconsume_times) for m in h.cut}
    assert cut == {("t", "a", 0), ("t", "a", 1)}
    assert copies[0] in h.cut and not copies[0].settled
    assert h.state.process_queues[RETRY_MQ].tracker.committable() == 0


async def test_a_retry_message_with_no_call_of_it_running_is_handled() -> None:
    """Only a call in progress holds a copy back: another message's call does not, nor
    a finished one."""
    calls = Calls()
    async with workers(calls, consume_concurrency=2) as h:
        feed_first(h, "a")
        with anyio.fail_after(10):
            await calls.first_running.wait()
        feed_retry(h, ["b", "marker"])  # "a" runs: "b" is not it
        await retry_consumed(h, 2)
        calls.gate.set()
        await h.consumed(1)
        feed_retry(h, ["a"])  # a copy of "a", its call over
        await retry_consumed(h, 3)
    assert calls.seen == [("a", 0), ("b", 1), ("marker", 1), ("a", 1)]


class FailsOnce(Calls):
    """Calls whose first call of "a" fails after ``gate``; its local retry succeeds."""

    async def __call__(self, msg: ConsumerMessage) -> None:
        if msg.msg_id == "a" and not msg.reconsume_times and ("a", 0) in self.seen:
            self.seen.append(("a", 0))  # the local retry
            return
        await super().__call__(msg)


async def first_in_local_retry(h: Harness, calls: Calls) -> ConsumerMessage:
    """The message "a" fails in its call while its copy waits; its send-back fails
    (``h.failing_sends``), so it waits for a local retry (``retry_later``, recorded:
    not run)."""
    h.retried = []
    h.failing_sends = 1
    calls.gate.set()
    with anyio.fail_after(10):
        await h.retried_one.wait()
    (first,) = h.retried
    assert not first.settled
    return first


async def test_a_close_does_not_wait_for_a_copy_of_a_message_waiting_for_its_local_retry() -> None:
    """A copy waits for its message's call; the call fails and its send-back fails, so
    the message waits for a local retry, which the close stops. A graceful close ends
    when nothing runs, not at its whole ``shutdown_timeout`` (a guard of 10 s stands
    for it here: 600 s). The copy comes back in the drain's cut (handed back or left
    uncommitted at the close), the message stays uncommitted in its queue (its next
    owner pulls it); neither is handled again nor settled here."""
    calls = FailsOnce("raise")
    async with workers(calls, consume_concurrency=2, shutdown_timeout=600) as h:
        copies = await copy_fed_while_a_runs(h, calls)
        first = await first_in_local_retry(h, calls)
    assert calls.seen == [("a", 0), ("marker", 1)]
    assert h.cut == [copies[0]] and not copies[0].settled
    assert not first.settled and h.pq.tracker.committable() == 0
    assert h.state.process_queues[RETRY_MQ].tracker.committable() == 0
    assert h.sent_back == []


@pytest.mark.parametrize("yields", [False, True])
async def test_a_copy_follows_the_local_retry_after_a_failed_send_back(yields: bool) -> None:
    """The message's call fails and its send-back fails (with or without yielding
    first): the outcome is not decided yet. Its local retry succeeds, so the copy is
    finished, not sent back (it would be delivered once more for nothing)."""
    calls = FailsOnce("raise")
    async with workers(calls, consume_concurrency=2) as h:
        h.failure_yields = yields
        copies = await copy_fed_while_a_runs(h, calls)
        first = await first_in_local_retry(h, calls)
        h.pool.deliver(h.pq, [first])  # the local retry
        await h.consumed(1)
        await retry_consumed(h, 2)
    assert calls.seen == [("a", 0), ("marker", 1), ("a", 0)]
    assert h.sent_back == []
    assert copies[0].settled and first.settled


class BehindBusy:
    """A handler whose messages "busy-N" hold their workers until ``free`` (``busy``:
    ``n`` of them run); it passes the others to ``calls``."""

    def __init__(self, calls: Calls, n: int) -> None:
        self.calls = calls
        self.n = n
        self.running = 0
        self.busy = anyio.Event()
        self.free = anyio.Event()

    async def __call__(self, msg: ConsumerMessage) -> None:
        if not msg.msg_id.startswith("busy"):
            return await self.calls(msg)
        self.running += 1
        if self.running == self.n:
            self.busy.set()
        await self.free.wait()

    async def queue_first(self, h: Harness) -> None:
        """Every worker busy, then "a" fed: queued, in no call."""
        for i in range(self.n):
            feed_first(h, f"busy-{i}")
        with anyio.fail_after(10):
            await self.busy.wait()
        feed_first(h, "a")


@pytest.mark.parametrize("outcome", [None, "raise"])
async def test_a_copy_of_a_queued_message_waits_for_its_call(outcome: str | None) -> None:
    """The copy arrives while its message is queued behind busy workers, not in a call
    yet: the copy is not handed on (the two calls would overlap, once both workers are
    free), it waits for the call and follows its outcome."""
    calls = Calls(outcome)
    handler = BehindBusy(calls, 2)
    async with workers(handler, consume_concurrency=2) as h:
        await handler.queue_first(h)
        copies = feed_retry(h, ["a", "marker"])
        handler.free.set()
        with anyio.fail_after(10):
            await calls.marker.wait()
            await calls.first_running.wait()
        assert ("a", 1) not in calls.seen
        calls.gate.set()
        await retry_consumed(h, 2)
    assert ("a", 1) not in calls.seen
    level = h.state.config.retry_delay_level
    # the first "a" at offset 2 of t, its copy at 0 of the retry queue
    assert sorted(h.sent_back) == ([] if outcome is None else [(0, level), (2, level)])
    assert copies[0].settled


async def test_a_copy_of_a_queued_message_of_a_dropped_queue_is_handled() -> None:
    """The queued message's queue is revoked: no call of it will run here (a worker
    skips it), so its copy is handed on and handled (as with no first in hand)."""
    calls = Calls()
    handler = BehindBusy(calls, 1)
    async with workers(handler, consume_concurrency=1) as h:
        await handler.queue_first(h)
        copies = feed_retry(h, ["a"])
        h.pq.drop()
        handler.free.set()
        await retry_consumed(h, 1)
    assert calls.seen == [("a", 1)]  # the copy; the dropped first skipped
    assert copies[0].settled


async def test_a_close_hands_back_a_copy_of_a_queued_message_with_it() -> None:
    """Closed while the copy's message is queued: the close takes the message (never
    started, left uncommitted) and, once the running calls end, the copy's wait ends
    too; the drain returns the copy, unsettled (handed back or left uncommitted)."""
    calls = Calls()
    handler = BehindBusy(calls, 1)
    async with workers(handler, consume_concurrency=1, shutdown_timeout=600) as h:
        await handler.queue_first(h)
        copies = feed_retry(h, ["a"])
        handler.free.set()  # the busy call ends after the close took "a"
    assert calls.seen == []
    assert [m.msg_id for m in h.released] == ["a"] and h.cut == copies
    assert not copies[0].settled


async def test_a_copy_of_a_message_whose_local_retry_is_dropped_with_its_queue_is_handled() -> None:
    """The message's send-back failed, and its queue is revoked before the local retry:
    no call of it will run here again, so the copy is handed on and handled."""
    calls = FailsOnce("raise")
    async with workers(calls, consume_concurrency=2) as h:
        copies = await copy_fed_while_a_runs(h, calls)
        await first_in_local_retry(h, calls)
        h.pq.drop()  # the engine's local retry then delivers nothing
        await retry_consumed(h, 2)
    assert calls.seen == [("a", 0), ("marker", 1), ("a", 1)]
    assert copies[0].settled and h.sent_back == []


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # trio: _worker's loop
async def test_the_remoting_loop_settles_every_kind_of_result_as_the_general_one() -> None:
    # Over remoting on asyncio an inline handler runs in _worker_remoting (benchmarks/
    # README.md, "Round 17"), which asks a result's level only when it is not None, after
    # the call's running drop: None, True and ConsumeStatus.SUCCESS are successes,
    # marked and committed; a raise, False, RECONSUME_LATER and Reconsume(n) are sent
    # back with their level before the offset moves past them; a success the handler
    # settled itself is not settled again. Each queue ends with nothing cached or
    # running, as _worker leaves it (test_failures_are_sent_back_before_the_offset_moves
    # runs it on trio).
    outcomes: list[object] = [None, True, ConsumeStatus.SUCCESS, "raise", False,
                              ConsumeStatus.RECONSUME_LATER, Reconsume(5), "settle"]  # fmt: skip
    loops: set[str] = set()

    async def handle(msg: ConsumerMessage) -> object:
        loops.add(sys._getframe(1).f_code.co_name)  # the worker's loop awaiting the call
        outcome = outcomes[msg.queue_offset % len(outcomes)]
        if outcome == "raise":
            raise RuntimeError("boom")
        if outcome == "settle":
            await msg.ack()
            return None
        return outcome

    n = 3 * len(outcomes)
    async with workers(handle, consume_concurrency=2) as h:
        msgs = h.feed(n)
        with anyio.fail_after(10):
            while h.pq.tracker.committable() < n:
                await h.pq.wait_changed()
    assert loops == {"_worker_remoting"}
    failed = {3: 0, 4: 0, 5: 0, 6: 5}  # the place among outcomes -> its level
    assert sorted(h.sent_back) == sorted(
        (o, failed[o % len(outcomes)]) for o in range(n) if o % len(outcomes) in failed
    )
    assert all(m.settled for m in msgs)
    assert (h.pq.cached_count, h.pq.cached_bytes, h.pq.handler_calls()) == (0, 0, 0)
    assert h.pq.consumed_total == n


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # trio: _worker counts its calls
async def test_the_remoting_loop_counts_its_calls_in_running_from_their_slots() -> None:
    # _worker_remoting counts no call up and down (benchmarks/README.md, "Round 17"): a
    # queue's handler_calls() is its callers' own count (running) plus its calls in the
    # workers' slots, so it reads the calls in progress, another caller's += and -= move
    # running only, a revoked queue's quiesce waits for the calls, and a call cut by the
    # consume timeout leaves both at 0 (never below). Fails without the slots' part (0
    # while calls run: quiesce would not wait for them before the revoke's commit).
    started = anyio.Event()
    release = anyio.Event()
    calls = 0

    async def handle(msg: ConsumerMessage) -> None:
        nonlocal calls
        calls += 1
        if calls == 3:
            started.set()
        if msg.queue_offset < 3:
            await release.wait()
        else:
            await anyio.sleep(10)  # overruns the consume timeout

    async with workers(handle, consume_concurrency=4, consume_timeout=1.5) as h:
        h.feed(3)
        with anyio.fail_after(10):
            await started.wait()
        assert (h.pq.handler_calls(), h.pq.running) == (3, 0)
        h.pq.running += 1  # another caller's call (an orderly step, a batch)
        assert (h.pq.handler_calls(), h.pq.running) == (4, 1)
        h.pq.running -= 1
        quiesced = anyio.Event()

        async def quiesce() -> None:
            await h.pool.quiesce([h.pq])
            quiesced.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(quiesce)
            await anyio.sleep(0.05)
            assert not quiesced.is_set()  # the three calls run
            release.set()
            with anyio.fail_after(10):
                await quiesced.wait()
        assert h.pq.handler_calls() == 0 and h.pq.tracker.committable() == 3
        h.feed(1)  # offset 3: cut by the consume timeout, sent back
        with anyio.fail_after(10):
            await h.sent.wait()
        assert (h.pq.handler_calls(), h.pq.running) == (0, 0)
        assert h.sent_back == [(3, 0)]
