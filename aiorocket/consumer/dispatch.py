"""Concurrent dispatch: worker tasks run the handler, each call under the consume timeout.

``consume_concurrency`` workers read work items (one message, or a batch of one queue)
from one queue. A fixed set of workers costs less than a task per message and bounds
concurrency without a semaphore; this replaces the Java consume thread pool.

Over remoting, a retry-topic message that is a copy of a message in hand here (in a
handler call, or queued) is not queued: it waits for that message's call and is settled
by its outcome (``aiorocket.consumer.in_hand``; checked once per pull answer of a retry
queue).

A handler's success over remoting (asyncio) settles its message at once (``settled``),
and its queue's accounting (the offset that may be committed, the cached counts, the
waiters' wake-up) follows when the worker yields to the event loop: the successes
finished since are marked a run of consecutive offsets at a time
(``ProcessQueue.on_run_done``), by a loop callback, where each cost a call of
``on_done`` (benchmarks/README.md, "Round 13"). So the accounting lags only while no
other task runs, or by one loop round at most; the steps that act on it without waiting
first (a revoked queue's quiesce, the close's drain, the workers' end) mark what is
pending before they read it. Until it is marked a finished message counts as in flight:
never committed past too early, only (within that round) not yet committed past.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import anyio
import anyio.abc
import anyio.lowlevel

from aiorocket._loop import capture
from aiorocket.consumer.handler import ConsumeTimeouts
from aiorocket.consumer.settle import RemotingSettler
from aiorocket.consumer.work_queue import WorkQueue
from aiorocket.message import RETRY_TOPIC_PREFIX
from aiorocket.received import ConsumerMessage

if TYPE_CHECKING:
    from aiorocket.consumer.handler import Handler, TimeoutSlot
    from aiorocket.consumer.in_hand import CallCopies
    from aiorocket.consumer.process_queue import ProcessQueue, PulledRun
    from aiorocket.consumer.state import ConsumerState
    from aiorocket.received import QueueView, Settler

__all__ = ["WorkItem", "WorkerPool", "close_and_take"]

#: What the work queue carries: one message, or a batch of one queue's messages.
WorkItem = ConsumerMessage | list[ConsumerMessage]

_BURST = 32  # handler calls between forced checkpoints
_RAISED = object()  # _worker_remoting: the handler raised (its failure logged)
#: noted answers kept for ``_mark_finished`` at most (``WorkerPool._runs``): enough for
#: a work queue some answers deep; the finished messages they may keep alive are at most
#: this many times ``process_queue.RUN_BYTES`` of bodies
_NOTED_RUNS = 64
#: the noted answers after the oldest that a success not in the oldest is looked for in
_LOOK_AHEAD = 4


def close_and_take(queue: WorkQueue[WorkItem]) -> list[ConsumerMessage]:
    """Close ``queue`` (no more puts) and take every message still queued in it: what
    a closing strategy hands back, never given to a handler or loop."""
    queue.close()
    unstarted: list[ConsumerMessage] = []
    for item in queue.take_all():
        unstarted.extend(item if isinstance(item, list) else [item])
    return unstarted


class WorkerPool:
    """The handler delivery strategy: ``consume_concurrency`` workers share one queue.

    Parameters
    ----------
    state:
        The consumer's shared state (configuration, closing flag, logger).
    handler:
        The application's handler.
    settler:
        Settles each message after its handler call.
    """

    def __init__(self, state: ConsumerState, handler: Handler, settler: Settler) -> None:
        self._state = state
        self._handler = handler
        self._settler = settler
        cfg = state.config
        #: messages (or batches) waiting for a worker
        self.queue: WorkQueue[WorkItem] = WorkQueue()
        self._batch_size = cfg.consume_batch_size if handler.batch else 1
        self._timeouts = ConsumeTimeouts(cfg.consume_timeout)
        self._scope: anyio.CancelScope | None = None
        self._done: anyio.Event | None = None
        self._slots: list[TimeoutSlot] = []  # one per worker (its handler call)
        self._outer: anyio.abc.TaskGroup | None = None  # the watchdog's, while running
        self._waits: anyio.abc.TaskGroup | None = None  # the copies' waits, while running
        #: remoting: retry-topic copies of messages in hand (``aiorocket.consumer.in_hand``)
        self._copies: CallCopies | None = (
            settler.in_hand if isinstance(settler, RemotingSettler) else None
        )
        #: remoting on asyncio: successes settled and not yet marked in their queues
        #: (the module); non-empty exactly while ``_mark_finished`` is scheduled
        self._finished: list[ConsumerMessage] = []
        self._call_soon: Callable[[Callable[[], None]], object] | None = None
        #: with ``_finished``: the answers delivered that ``on_pulled`` noted as one run,
        #: oldest first, until their last message is marked (``_mark_finished``); a few
        #: only (a noted answer whose last message never succeeds stays until pushed
        #: out), so the finished messages they keep alive stay few
        self._runs: deque[PulledRun] | None = None

    # -- Delivery ------------------------------------------------------------------

    def deliver(self, pq: QueueView, messages: list[ConsumerMessage]) -> None:
        queue = self.queue
        if self._state.closing or queue.closed:
            return  # unsettled: never committed, so redelivered
        if self._copies is not None and pq.mq.topic.startswith(RETRY_TOPIC_PREFIX):
            messages = self._attach(pq, messages)
            if not messages:
                return
        runs = self._runs
        if runs is not None:
            # the answer on_pulled just noted as one run, if it is this very list (a
            # retry queue's copies in hand taken out make another); once a pull
            noted: PulledRun | None = pq.pulled_run  # type: ignore[attr-defined]  # remoting's
            if noted is not None and noted[0] is messages:
                runs.append(noted)
            if pq._calls is None:  # type: ignore[attr-defined]  # a ProcessQueue, its calls
                pq._calls = self._running_calls  # type: ignore[attr-defined]  # counted here
        size = self._batch_size
        if size == 1:
            queue.put_many(messages)  # unwrapped: most handlers take one message
        else:
            queue.put_many(messages[i : i + size] for i in range(0, len(messages), size))

    def _attach(self, pq: QueueView, messages: list[ConsumerMessage]) -> list[ConsumerMessage]:
        """A retry queue's messages: those not copies of a message in hand (in a handler
        call, or queued). Each copy waits for that message's outcome in a task of the
        pool (so a graceful close waits for it too, while a worker runs), settled by it."""
        waits, copies = self._waits, self._copies
        assert copies is not None
        if waits is None:
            return messages  # not running: nothing in hand
        calls = list(self._in_calls())
        if not calls and not len(self.queue):
            return messages
        out, new = copies.attach(messages, calls, _queued(self.queue))
        for waiting in new:
            waits.start_soon(copies.settle_by_outcome, waiting, self._settler, self)
        if len(out) < len(messages):
            held = [m for m in messages if m not in out]
            self._state.log.info("redelivered_in_hand", topic=pq.mq.topic, n=len(held),
                                 offsets=[m.queue_offset for m in held][:8])  # fmt: skip
        return out

    def in_call(self, msg: ConsumerMessage) -> bool:
        """``msg`` is in a handler call (``aiorocket.consumer.in_hand.CallHost``)."""
        return any(m is msg for m in self._in_calls())

    def _in_calls(self) -> Iterator[ConsumerMessage]:
        """The messages in the workers' handler calls now."""
        for slot in self._slots:
            current = slot.current
            if isinstance(current, list):
                yield from current
            elif current is not None:
                yield current

    def hand_on(self, copies: list[ConsumerMessage]) -> bool:
        """Queue copies whose first delivery no call here will settle (``CallHost``);
        False when closing: then they stay unsettled, never committed."""
        if self._state.closing or self.queue.closed:
            return False
        for copy in copies:
            assert copy._pq is not None
            self.deliver(copy._pq, [copy])
        return True

    async def start(self, tg: anyio.abc.TaskGroup) -> None:
        self._done = anyio.Event()
        await tg.start(self.run)

    def start_queue(self, pq: QueueView) -> None:
        pass

    def _running_calls(self, pq: ProcessQueue) -> int:
        """``pq``'s handler calls in this pool's workers now, for
        ``ProcessQueue.handler_calls`` (``_worker_remoting`` counts none up and down: its
        slot says it)."""
        n = 0
        for slot in self._slots:
            current = slot.current
            if current is not None and not isinstance(current, list) and current._pq is pq:
                n += 1
        return n

    def _mark_finished(self) -> None:
        """Mark the successes settled since the last call in their queues, a run of
        consecutive offsets of one queue and generation at a time (the module).

        Once a burst of handler calls (benchmarks/ceiling.py): the successes that came in
        the order of an answer noted as one run (``ProcessQueue.pulled_run``, kept in
        ``_runs`` as it was delivered) are found in it by identity, a slice of it at a
        time, and marked as that slice, with no look at each message; the rest a message
        at a time (``_mark_each``; benchmarks/README.md, "Round 16")."""
        if not self._finished:
            return
        # taken first: the next success schedules the next call, whatever happens here
        finished = self._finished[:]
        self._finished.clear()
        now = time.monotonic()  # the queues' last_consumed
        runs = self._runs
        i = 0
        n = len(finished)
        while runs:
            msg = finished[i]
            msgs, first, generation, sizes, body_len = runs[0]
            p = msg.queue_offset - first  # its place in the answer, if it is that one's
            if not (0 <= p < len(msgs) and msgs[p] is msg):
                if not _to_run_of(runs, msg):
                    break  # in no noted answer: the rest a message at a time
                msgs, first, generation, sizes, body_len = runs[0]
                p = msg.queue_offset - first
            k = len(msgs) - p  # the rest of the answer, or of the successes
            if k > n - i:
                k = n - i
            run = finished if k == n else finished[i : i + k]
            # Compared by identity (messages have no other equality): the same messages
            # in the same order are the answer's offsets [first + p, first + p + k) of
            # its queue and generation, one run (on_pulled checked them increasing).
            if run == (msgs if k == len(msgs) else msgs[p : p + k]):
                size = k * body_len if sizes is None else sum(sizes[p : p + k])
                self._mark_run(msg._pq, run, generation, size, now)  # type: ignore[arg-type]
            else:  # one of them failed, was skipped or ran late: a message at a time
                self._mark_each(run, now)
            if p + k == len(msgs):
                runs.popleft()  # its last message: done with it
            i += k
            if i == n:
                return
        self._mark_each(finished[i:] if i else finished, now)

    def _mark_each(self, finished: list[ConsumerMessage], now: float) -> None:
        """``_mark_finished`` for successes not found in a noted answer: cut into runs
        of consecutive offsets of one queue and generation by a look at each message."""
        first = finished[0]
        pq: ProcessQueue = first._pq  # type: ignore[assignment]  # remoting's only
        generation = first._generation
        start = 0  # the run: finished[start:], up to the message that breaks it
        base = stop = first.queue_offset  # its first offset, the one that continues it
        size = 0
        for msg in finished:
            if msg.queue_offset != stop or msg._pq is not pq or msg._generation != generation:
                end = start + stop - base
                self._mark_run(pq, finished[start:end], generation, size, now)
                pq = msg._pq  # type: ignore[assignment]
                generation = msg._generation
                start, base, stop, size = end, msg.queue_offset, msg.queue_offset, 0
            stop += 1
            size += len(msg.body)
        self._mark_run(pq, finished[start:] if start else finished, generation, size, now)

    def _mark_run(
        self, pq: ProcessQueue, run: list[ConsumerMessage], generation: int, size: int,
        now: float,
    ) -> None:  # fmt: skip
        """``ProcessQueue.on_run_done``, whose failure (a bug: it only counts) must not
        stall the queue nor the runs marked after it in the same call."""
        try:
            pq.on_run_done(run, generation, size, now)
        except Exception:
            # Handled messages, settled, whose offsets would stay in flight for ever: the
            # queue's commit point and pulls would stop there. Said loudly, and the queue
            # starts again from its commit point (nothing past it committed: what was
            # handled since comes again), as an answer that breaks the tracker does.
            self._state.log.error(
                "mark_finished_failed", topic=pq.mq.topic, broker=pq.mq.broker_name,
                queue=pq.mq.queue_id, offsets=[run[0].queue_offset, run[-1].queue_offset],
                exc_info=True,
            )  # fmt: skip
            if generation == pq.tracker.generation:
                pq.reset(pq.tracker.committable())

    async def quiesce(self, pqs: list[ProcessQueue]) -> None:
        """Wait (``shutdown_timeout`` at most) for the revoked queues' running handlers."""
        self._mark_finished()  # their commit follows: nothing finished may stay pending
        with anyio.move_on_after(self._state.config.shutdown_timeout):
            for pq in pqs:
                while pq.handler_calls():
                    await pq.wait_changed()
        # and those that ended while it waited: a wake-up (another handler's failure)
        # can run before the callback that marks them, and the commit reads them next
        self._mark_finished()

    async def release(self, pqs: list[ProcessQueue]) -> None:
        """Revoked queues whose handlers outlived ``quiesce``: until those calls end
        (``consume_timeout`` bounds them) the queue is not started again here, else
        its messages would be pulled again and handled beside the running calls."""
        outer = self._outer
        for pq in pqs:
            if pq.handler_calls() and outer is not None:
                self._state.finishing[pq.mq] = pq
                outer.start_soon(self._finish_revoked, pq)

    async def _finish_revoked(self, pq: ProcessQueue) -> None:
        try:
            while pq.handler_calls():
                await pq.wait_changed()
        finally:  # cancelled too (the consumer closes): nothing is started then
            self._state.let_go(self._state.finishing, pq)

    def stop(self) -> list[ConsumerMessage]:
        return close_and_take(self.queue)

    async def drain(self, *, graceful: bool) -> list[ConsumerMessage]:
        """Running handlers finish (bounded), then the workers are cancelled and waited
        for (bounded); returns the messages of the handler calls cut here, and the
        copies left waiting for a message's outcome (``aiorocket.consumer.in_hand``)."""
        cfg = self._state.config
        if graceful and self._done is not None:
            with anyio.move_on_after(cfg.shutdown_timeout):
                await self._done.wait()
        self._mark_finished()  # the close's commit follows
        if self._scope is None or self._done is None or self._done.is_set():
            # every worker returned: copies whose first delivery stayed unsettled (a
            # local retry to come) end their wait then, unsettled (in_hand's close)
            return [] if self._copies is None else self._copies.unsettled()
        self._scope.cancel()
        # Then wait for the workers to end (bounded, as the orderly strategy does): a
        # handler shielded from the cancellation finishes and settles its message here,
        # rather than running on while the caller hands that message back (remoting) or
        # makes it visible (pop) for another member to handle at the same time. The
        # calls still unsettled then are the cut ones; no worker takes another message.
        with anyio.move_on_after(cfg.request_timeout):
            await self._done.wait()
        self._mark_finished()
        # copies that waited for a call's outcome, or were being settled by it
        cut: list[ConsumerMessage] = [] if self._copies is None else self._copies.unsettled()
        cut.extend(m for m in self._in_calls() if not m.settled)
        if graceful:
            self._state.log.warning("shutdown_timeout", timeout=cfg.shutdown_timeout,
                                    cut=len(cut))  # fmt: skip
        return cut

    # -- workers -----------------------------------------------------------------------

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Run the workers until the queue closes and drains (or they are cancelled)."""
        slots = self._slots = [
            self._timeouts.slot() for _ in range(self._state.config.consume_concurrency)
        ]
        copies = self._copies
        if copies is not None:
            copies.open()
        self._call_soon = capture().call_soon
        direct = type(self._settler) is RemotingSettler
        if direct and self._call_soon is not None and self._inline():
            self._runs = deque(maxlen=_NOTED_RUNS)  # the workers fill _finished
            # _worker_remoting's calls are counted from their slots: the queues of any
            # messages queued already (deliver sets it for the others)
            for pq in self._state.process_queues.values():
                pq._calls = self._running_calls
        try:
            with anyio.CancelScope() as scope:
                self._scope = scope
                async with anyio.create_task_group() as outer:
                    self._outer = outer
                    outer.start_soon(self._timeouts.run)
                    async with anyio.create_task_group() as waits:
                        self._waits = waits
                        async with anyio.create_task_group() as workers:
                            for slot in slots:
                                workers.start_soon(self._worker, slot)
                            task_status.started()
                        # Every worker returned (the close): no call will settle a
                        # message a copy waits for; the waits end now, not at the
                        # graceful close's shutdown_timeout.
                        if copies is not None:
                            copies.close()
                    outer.cancel_scope.cancel()  # every worker returned: stop the watchdog
        finally:
            self._outer = self._waits = None
            self._mark_finished()
            self._runs = None
            if self._done is not None:
                self._done.set()

    def _inline(self) -> bool:
        """Whether the workers call the handler a message at a time inline (an async
        handler of one message): a traced or deduplicated call takes the general path
        (``Handler.call`` does both)."""
        handler = self._handler
        return (handler.is_async and not handler.batch and self._state.trace is None
                and handler.dedup is None)  # fmt: skip

    async def _worker(self, slot: TimeoutSlot) -> None:
        # A single message for an async handler (the common case) is handled inline below;
        # batches and thread-run handlers take _consume_batch. The inline path saves the
        # list, two coroutine frames and the settle coroutine per message. Its inline
        # steps have a twin in _worker_remoting: a change to one is a change to both
        # (test_dispatch's "settles every kind of result as the general one" compares them).
        if self._runs is not None:  # remoting on asyncio, inline: the commonest case
            await self._worker_remoting(slot)
            return
        handler = self._handler
        inline = self._inline()
        fn = handler.fn
        retry_level = self._state.config.retry_delay_level
        settler = self._settler
        finish = settler.finish
        direct = type(settler) is RemotingSettler  # its finish is inlined below
        # remoting on asyncio: a success's accounting follows when the worker yields
        # (the module; once per message: benchmarks/README.md, "Round 13")
        call_soon = self._call_soon if direct else None
        finished = self._finished
        mark_finished = self._mark_finished
        queue = self.queue
        pop_nowait = queue.pop_nowait
        queued = queue.queued
        countdown = _BURST
        while True:
            # One long-lived cancel scope per worker; the watchdog cancels it only when the
            # running handler times out, and the worker then opens a new one.
            with anyio.CancelScope() as scope:
                slot.scope = scope
                while True:
                    if queued:
                        item = pop_nowait()
                    else:
                        countdown = _BURST  # waiting yields: a new burst starts
                        try:
                            item = await queue.get()
                        except anyio.EndOfStream:
                            return
                    if not inline:  # an inline worker's queue holds single messages only
                        await self._consume_batch(item if isinstance(item, list) else [item], slot)
                    else:
                        # a single message (above), without the isinstance check
                        msg: ConsumerMessage = item  # type: ignore[assignment]
                        # msg.current(), without the call (once per message:
                        # benchmarks/ceiling.py)
                        pq = msg._pq
                        if (pq is None or msg._settled or pq.dropped
                                or msg._generation != pq.tracker.generation):  # fmt: skip
                            continue
                        pq.running += 1
                        # stamped by the watchdog when it first sees the call: no clock
                        # read a message (benchmarks/README.md, "Round 14")
                        slot.deadline = 0.0
                        slot.current = msg
                        try:
                            result = await fn(msg)
                        except Exception as exc:
                            handler.log_failure(pq, msg, exc)
                            level: int | None = retry_level
                        else:
                            level = None if result is None else handler.level_of(pq, msg, result)
                        slot.current = None  # not reached when cancelled: the worker settles it
                        pq.running -= 1
                        if level is None:
                            # No await: a success needs no broker round trip. finish()
                            # wakes the queue's waiters unless the message was stale or
                            # settled already; they must still see running drop.
                            # RemotingSettler.finish without the call (once per
                            # message: benchmarks/README.md, "Round 4 (issue 43,
                            # goal 1)"), its commonest case (asyncio) tested first
                            # ("Round 14").
                            if call_soon is not None and not msg._settled:
                                msg._settled = True
                                if not finished:
                                    call_soon(mark_finished)
                                finished.append(msg)
                            elif not direct:
                                if not finish(msg):
                                    pq.notify()
                            elif msg._settled:
                                pq.notify()
                            else:  # trio: no loop callback
                                msg._settled = True
                                if not pq.on_done(msg, msg._generation):
                                    pq.notify()
                        else:
                            pq.notify()
                            await settler.settle(msg, level)
                    countdown -= 1
                    if not countdown:
                        # queue.get() does not yield while work is queued: let pulls and
                        # reads run between bursts of handler calls. With nothing queued
                        # the next get() waits, and so yields, anyway: a burst that
                        # empties the queue (a pull answer of pull_batch_size messages
                        # taken in one go, benchmarks/ceiling.py) costs no round trip of
                        # its own (benchmarks/README.md, "Round 13").
                        countdown = _BURST
                        if queue:
                            await anyio.lowlevel.checkpoint()
            await self._settle_overrun(slot)

    async def _worker_remoting(self, slot: TimeoutSlot) -> None:
        """``_worker`` over remoting on asyncio with an inline handler (``run`` then keeps
        ``_runs``): its loop with only that case's steps, so that a message costs no test
        of which case it is (inline, the settler, the loop), no second name for the item
        and, for a success, no failure level (once per message: benchmarks/ceiling.py;
        benchmarks/README.md, "Round 17"). The steps, their order and every await are
        ``_worker``'s inline ones, but a result's level is asked for after the call's
        ``running`` drop (no await between them), and ``running`` counts the call from
        its slot (``slot.current``, which the call sets and clears anyway: the queue's
        ``_calls``, set by ``deliver``; ``ProcessQueue.handler_calls``), not by a count up
        and down."""
        handler = self._handler
        fn = handler.fn
        retry_level = self._state.config.retry_delay_level
        settler = self._settler
        call_soon = self._call_soon
        assert call_soon is not None  # asyncio (run)
        finished = self._finished
        mark_finished = self._mark_finished
        queue = self.queue
        pop_nowait = queue.pop_nowait
        queued = queue.queued
        countdown = _BURST
        while True:
            with anyio.CancelScope() as scope:
                slot.scope = scope
                while True:
                    # an inline worker's queue holds single messages only
                    msg: ConsumerMessage
                    if queued:
                        msg = pop_nowait()  # type: ignore[assignment]
                    else:
                        countdown = _BURST  # waiting yields: a new burst starts
                        try:
                            msg = await queue.get()  # type: ignore[assignment]
                        except anyio.EndOfStream:
                            return
                    pq = msg._pq  # msg.current(), without the call
                    if (pq is None or msg._settled or pq.dropped
                            or msg._generation != pq.tracker.generation):  # fmt: skip
                        continue
                    slot.deadline = 0.0  # stamped by the watchdog ("Round 14")
                    slot.current = msg  # running (ProcessQueue.handler_calls)
                    try:
                        result = await fn(msg)
                    except Exception as exc:
                        handler.log_failure(pq, msg, exc)
                        result = _RAISED
                    # not reached when cancelled: the worker settles it; running drops
                    slot.current = None
                    # a success (None, or a result whose level is None) is settled at once
                    # and marked in its queue when the worker yields (the module); unless
                    # the handler settled it: then its waiters must still see running drop
                    if result is None or (
                        level := retry_level if result is _RAISED
                        else handler.level_of(pq, msg, result)
                    ) is None:  # fmt: skip
                        if msg._settled:
                            pq.notify()
                        else:
                            msg._settled = True
                            if not finished:
                                call_soon(mark_finished)
                            finished.append(msg)
                    else:
                        pq.notify()
                        await settler.settle(msg, level)
                    countdown -= 1
                    if not countdown:
                        countdown = _BURST  # as _worker's burst checkpoint
                        if queue:
                            await anyio.lowlevel.checkpoint()
            await self._settle_overrun(slot, counted=False)

    async def _settle_overrun(self, slot: TimeoutSlot, *, counted: bool = True) -> None:
        """After a worker's scope ended: if its handler call overran consume_timeout (the
        watchdog cancelled the scope with the call's messages in ``slot``), settle them.
        ``counted``: the call counted itself in ``running`` (``_worker``); else its slot
        did (``ProcessQueue.handler_calls``), and clearing it was its drop
        (``_worker_remoting``)."""
        if slot.current is not None:
            current, slot.current = slot.current, None
            slot.timed_out = False
            batch = current if isinstance(current, list) else [current]
            await self._settle_timed_out(batch, counted=counted)

    async def _settle_timed_out(
        self, batch: list[ConsumerMessage], *, counted: bool = True
    ) -> None:
        pq = batch[0]._pq
        assert pq is not None
        if counted:
            pq.running -= 1
        pq.notify()
        self._handler.log_timeout(pq, batch[0])
        for m in batch:
            await self._settler.settle(m, self._state.config.retry_delay_level)

    async def _consume_batch(self, batch: list[ConsumerMessage], slot: TimeoutSlot) -> None:
        pq = batch[0]._pq
        assert pq is not None
        live = [m for m in batch if m.current()]
        if not live:
            return
        pq.running += 1
        slot.deadline = 0.0  # stamped by the watchdog (ConsumeTimeouts.check)
        slot.current = live
        level, _ = await self._handler.call(pq, live)
        slot.current = None  # not reached when cancelled: the worker settles the timeout
        pq.running -= 1
        pq.notify()
        for m in live:
            await self._settler.settle(m, level)


def _to_run_of(runs: deque[PulledRun], msg: ConsumerMessage) -> bool:
    """Whether one of the few noted answers after the oldest holds ``msg``; if one does,
    the answers before it are dropped (their other messages failed, were skipped or are
    still running: marked a message at a time when they finish). If none does, the
    oldest answers whose last message is settled are dropped (done with, or nearly), so
    that a few answers whose last message never came this way do not keep the next
    successes from their answers. A bounded look: a success in no noted answer (a local
    retry, an answer with the broker's gaps) costs a few steps a call, not a message."""
    offset = msg.queue_offset
    for r in range(1, min(len(runs), 1 + _LOOK_AHEAD)):
        msgs, first = runs[r][:2]
        p = offset - first
        if 0 <= p < len(msgs) and msgs[p] is msg:
            for _ in range(r):
                runs.popleft()
            return True
    while runs and runs[0][0][-1]._settled:  # type: ignore[attr-defined]  # ConsumerMessage
        runs.popleft()
    return False


def _queued(queue: WorkQueue[WorkItem]) -> Iterator[ConsumerMessage]:
    """The messages queued for the workers (taken by nobody yet)."""
    for item in queue:
        if isinstance(item, list):
            yield from item
        else:
            yield item
