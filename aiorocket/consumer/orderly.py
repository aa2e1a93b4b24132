"""Orderly consumption: one handler at a time per queue, in order, under a lock.

Over remoting the unit is a locked queue: the broker lock (LOCK_BATCH_MQ) makes sure
one consumer of the group handles a queue, and this task makes sure that consumer
handles its messages one after another. Over gRPC (a FIFO group) the unit is a message
group, and the Proxy keeps the rest of a group back while its messages are unsettled,
so there are no locks (``locks=None``). A failed message is retried in place after a
pause (never skipped, never reordered) and, once the settler says it is out of
attempts, moved to the dead-letter queue so the queue can move on; the settler makes
both decisions (``aiorocket.received.Settler.retry_in_place``).

A handling step (the handler call and what its result does: settle, suspend or
dead-letter) runs under the queue's ``order_lock`` (the Java client's consume lock).
A queue revoked while a step runs keeps its broker lock, renewed, until the step has
finished (``Orderly._release_when_idle``), so the next owner cannot consume it at the same
time; every revoked queue's offset is committed after its last step and before its
unlock, so the next owner starts after it. A commit that fails (an error, or no answer
in ``request_timeout``) is retried under the lock, still renewed, after a growing pause
(``Orderly._commit_for_handover``): for at most ``lock_max_live_time``, and only while
the lock holds (a renewal refused means another member took the queue), so a broker
that takes locks but not commits delays the queue's next owner, never blocks it. Given
up, the queue is unlocked uncommitted (logged): its next owner handles the messages
since the last commit again (at-least-once). The Java client sends its revoke's commit
one-way (``RebalancePushImpl.removeUnnecessaryMessageQueue``) and unlocks whatever
became of it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import anyio
import anyio.abc

from aiorocket.consumer.handler import ConsumeTimeouts
from aiorocket.consumer.process_queue import ProcessQueue

if TYPE_CHECKING:
    from aiorocket._log import Logger
    from aiorocket.consumer.committer import AutoCommit
    from aiorocket.consumer.handler import Handler, TimeoutSlot
    from aiorocket.consumer.locks import QueueLocks
    from aiorocket.consumer.state import ConsumerState
    from aiorocket.received import ConsumerMessage, QueueView, Settler

__all__ = ["HANDOVER_RETRY_DELAY", "HANDOVER_RETRY_MAX", "Orderly"]

#: seconds before a revoked queue's failed commit is tried again, doubled after each
#: failure up to ``HANDOVER_RETRY_MAX``: one failure costs the next owner, who asks for
#: the lock every ``aiorocket.consumer.locks.LOCK_RETRY_DELAY`` (1 s), about a second; a
#: broker down for the whole bound costs a few tries (and warnings), not one a second.
HANDOVER_RETRY_DELAY = 1.0
HANDOVER_RETRY_MAX = 5.0


class Orderly:
    """The orderly delivery strategy: a consume loop per locked queue.

    Parameters
    ----------
    state:
        The consumer's shared state (owned and releasing queues, configuration).
    handler:
        The application's handler.
    settler:
        Settles handled messages and dead-letters those out of attempts.
    locks:
        The queues' broker locks: a loop handles a message only under a valid lock, and
        a revoked queue is unlocked once its running step has finished. None: no locks
        (a gRPC FIFO group).
    commits:
        Commits a revoked queue's offset before its lock is released (remoting).
    """

    def __init__(
        self,
        state: ConsumerState,
        handler: Handler,
        settler: Settler,
        locks: QueueLocks | None,
        commits: AutoCommit | None,
    ) -> None:
        self._state = state
        self._handler = handler
        self._settler = settler
        self._locks = locks
        self._commits = commits
        #: bounds the handler calls running at once over all queues
        self._slots = anyio.Semaphore(state.config.consume_concurrency)
        self._timeouts = ConsumeTimeouts(state.config.consume_timeout)
        self._watchdog_scope = anyio.CancelScope()
        self._tg: anyio.abc.TaskGroup | None = None
        #: the queues with a consume loop (remoting: owned or releasing; gRPC: groups)
        self._loops: dict[int, QueueView] = {}

    # -- Delivery ------------------------------------------------------------------

    def deliver(self, pq: QueueView, messages: list[ConsumerMessage]) -> None:
        if self._state.closing:
            return  # unsettled: never committed, so redelivered
        pq.buffer.extend(messages)
        pq.notify()

    async def start(self, tg: anyio.abc.TaskGroup) -> None:
        self._tg = tg
        tg.start_soon(self._watch)

    async def _watch(self) -> None:
        with self._watchdog_scope:
            await self._timeouts.run()

    def start_queue(self, pq: QueueView) -> None:
        assert self._tg is not None
        self._loops[id(pq)] = pq
        self._tg.start_soon(self._consume_loop, pq)

    async def quiesce(self, pqs: list[ProcessQueue]) -> None:
        pass  # a running step keeps the queue's lock instead (see release)

    async def release(self, pqs: list[ProcessQueue]) -> None:
        """Unlock revoked queues that are idle and committed; the others (a step still
        runs, or the revoke's commit did not store the last offset) are committed and
        unlocked by a task of their own (``_release_when_idle``), in ``state.releasing``
        meanwhile: their locks are renewed and a re-assignment waits for them.

        The revoke committed the queues before this call, but that commit may have
        failed, and a step running then may have ended during it, its offset past the
        one sent: such a queue is dirty now, and is committed before its unlock, or its
        next owner would handle those messages a second time. No step starts after the
        revoke (each re-checks ``dropped`` under the order lock), so an idle queue's
        offset no longer moves. Nothing is awaited before each queue is in
        ``releasing`` or unlocked here: cancelled (the close), the close commits and
        unlocks what it finds in ``releasing``.
        """
        state = self._state
        idle = []
        for pq in pqs:
            if (_busy(pq) or self._dirty(pq)) and self._tg is not None:
                state.releasing[pq.mq] = pq
                self._tg.start_soon(self._release_when_idle, pq)
            else:
                idle.append(pq)
        if self._locks is not None:
            await self._locks.unlock([pq.mq for pq in idle])

    def _dirty(self, pq: ProcessQueue) -> bool:
        """Whether ``pq``'s offset is still to be committed before its unlock."""
        return self._commits is not None and pq.tracker.dirty

    def stop(self) -> list[ConsumerMessage]:
        return []  # each loop sees the closing flag; what its buffer holds stays unsettled

    async def drain(self, *, graceful: bool) -> list[ConsumerMessage]:
        """Let running steps finish within ``shutdown_timeout`` (when graceful), then
        cancel the rest and wait for them to end, so no queue is unlocked under a running
        async handler. The consumer is closing, so no loop starts a new step. A cut
        message stays where it is (returns none): the queue's next owner handles it
        first, in order."""
        state = self._state
        pqs = list(self._loops.values())
        wait = state.config.shutdown_timeout if graceful else 0
        running = [pq for pq in pqs if _busy(pq)]
        if running and wait > 0:
            with anyio.move_on_after(wait) as scope:
                for pq in running:
                    async with pq.order_lock:
                        pass
            if scope.cancelled_caught:
                state.log.warning("shutdown_timeout", timeout=wait, mode="orderly")
        for pq in pqs:
            if pq.consume_scope is not None:
                pq.consume_scope.cancel()
        running = [pq for pq in running if _busy(pq)]
        with anyio.move_on_after(state.config.request_timeout):
            for pq in running:
                async with pq.order_lock:
                    pass
        self._watchdog_scope.cancel()
        return []

    # -- the consume loop ----------------------------------------------------------------

    async def _consume_loop(self, pq: QueueView) -> None:
        slot = self._timeouts.slot()
        try:
            with anyio.CancelScope() as scope:
                pq.consume_scope = scope
                await self._consume(pq, slot)
        finally:
            self._timeouts.release(slot)
            if self._loops.get(id(pq)) is pq:
                del self._loops[id(pq)]

    async def _consume(self, pq: QueueView, slot: TimeoutSlot) -> None:
        state = self._state
        valid = _lock_check(self._locks)
        log = state.log.bind(topic=pq.mq.topic, broker=pq.mq.broker_name, queue=pq.mq.queue_id)
        while not pq.dropped and not state.closing:
            now = anyio.current_time()
            if not pq.buffer or not valid(pq):
                await pq.wait_changed()
                continue
            if now < pq.suspended_until:
                with anyio.move_on_after(pq.suspended_until - now):
                    await pq.wait_changed()
                continue
            msg: ConsumerMessage = pq.buffer[0]
            if not msg.current():
                pq.buffer.popleft()
                continue
            async with self._slots:
                try:
                    async with pq.order_lock:
                        # Re-check after waiting: a rebalance may have taken the queue.
                        if pq.dropped or state.closing or not valid(pq):
                            continue
                        await self._step(pq, msg, slot, log)
                finally:
                    pq.notify()  # a revoke or the close may be waiting for the step's end

    async def _call(
        self, pq: QueueView, msg: ConsumerMessage, slot: TimeoutSlot
    ) -> tuple[int | None, float | None]:
        """The handler call under the consume timeout (an overrun is a failure)."""
        pq.running += 1
        try:
            with anyio.CancelScope() as scope:
                slot.scope = scope
                slot.deadline = time.monotonic() + self._timeouts.timeout
                slot.current = msg
                try:
                    return await self._handler.call(pq, [msg])
                finally:
                    slot.current = None
            # Reached only when the watchdog cancelled the call.
            slot.timed_out = False
            self._handler.log_timeout(pq, msg)
            return self._state.config.retry_delay_level, None
        finally:
            pq.running -= 1
            pq.notify()

    async def _step(
        self, pq: QueueView, msg: ConsumerMessage, slot: TimeoutSlot, log: Logger
    ) -> None:
        """Handle the message at the head of the buffer and apply the result."""
        settler = self._settler
        generation = msg._generation
        level, suspend = await self._call(pq, msg, slot)
        if generation != pq.tracker.generation:
            # The queue was reset (OFFSET_ILLEGAL) while the handler ran: the buffer now
            # holds the new position's messages, and this result concerns none of them.
            log.info("orderly_result_discarded", offset=msg.queue_offset, reason="queue_reset")
            return
        if level is None:
            _take(pq, msg)
            await settler.settle(msg, None)
            return
        if pq.dropped:
            return  # failed, and no longer ours: the next owner delivers it again
        pause = settler.retry_in_place(msg)
        if pause is None and await settler.dead_letter(msg):
            log.warning("orderly_dead_lettered", offset=msg.queue_offset,
                        attempts=msg.reconsume_times)  # fmt: skip
            if generation == pq.tracker.generation:  # not reset during the send
                _take(pq, msg)
                msg._settled = True
                pq.on_done(msg, generation)
            return
        delay = suspend if suspend is not None else pause
        if delay is None:  # out of attempts, and the dead-letter queue failed: again
            delay = self._state.config.suspend_current_queue_time
        pq.suspended_until = anyio.current_time() + delay
        log.info("orderly_suspended", offset=msg.queue_offset, seconds=delay,
                 attempts=msg.reconsume_times)  # fmt: skip

    async def _release_when_idle(self, pq: ProcessQueue) -> None:
        """Commit and unlock a revoked queue once its running handling step has finished.

        Until then the queue stays in ``state.releasing``: its broker lock is renewed
        with the owned queues' and a re-assignment waits for it. The step is bounded by
        ``consume_timeout`` (its handler is cancelled then), the commit's tries by
        ``_commit_for_handover``. At close the queue is left in ``releasing`` for the
        close, which commits and unlocks it (within its bound) before it stops this
        task.
        """
        state = self._state
        try:
            # Not held past the step's end: the close's drain waits for this lock.
            async with pq.order_lock:
                pass  # the step has finished; no new one starts (dropped)
            if not await self._commit_for_handover(pq):
                await anyio.sleep_forever()  # closing: the close takes over (docstring)
            if self._locks is not None:
                await self._locks.unlock([pq.mq])
        finally:
            state.let_go(state.releasing, pq)

    async def _commit_for_handover(self, pq: ProcessQueue) -> bool:
        """Commit a revoked queue's offset, tried again while it fails (after
        ``HANDOVER_RETRY_DELAY``, doubled each time up to ``HANDOVER_RETRY_MAX``), under
        its lock, for at most ``lock_max_live_time``: True once it may be unlocked
        (committed, the group's stored offset past it, or given up), False when the
        consumer closes first.

        Given up once the lock is no longer ours (a renewal refused: another member
        holds the queue, and consumes it from the group's stored offset whatever we
        do now; or not renewed for ``lock_max_live_time``: the broker may have let it
        go), or past the bound: a broker that answers lock requests and fails commits
        must not keep the queue from its next owner for ever.
        """
        state = self._state
        if self._commits is None:
            return True
        deadline = anyio.current_time() + state.config.lock_max_live_time
        valid = _lock_check(self._locks)
        delay = HANDOVER_RETRY_DELAY
        while not await self._commits.commit(pq):
            if state.closing:
                return False
            if not valid(pq) or anyio.current_time() >= deadline:
                state.log.warning(
                    "orderly_handover_uncommitted", queue=str(pq.mq),
                    offset=pq.tracker.committable(), lock_held=valid(pq),
                    hint="the revoked queue's offset could not be committed before its "
                    "unlock: its next owner handles the messages since the last commit "
                    "again",
                )  # fmt: skip
                return True
            await anyio.sleep(delay)
            delay = min(delay * 2, HANDOVER_RETRY_MAX)
        return True


def _always(pq: QueueView) -> bool:
    return True


def _lock_check(locks: QueueLocks | None) -> Callable[[QueueView], bool]:
    """Whether a queue may be handled now: under a valid broker lock (remoting, whose
    queues are ProcessQueues), or always (no locks: a gRPC FIFO group)."""
    if locks is None:
        return _always
    valid = locks.valid

    def check(pq: QueueView) -> bool:
        assert isinstance(pq, ProcessQueue)
        return valid(pq)

    return check


def _take(pq: QueueView, msg: ConsumerMessage) -> None:
    """Remove the message just handled from the head of the buffer (only that one)."""
    if pq.buffer and pq.buffer[0] is msg:
        pq.buffer.popleft()


def _busy(pq: QueueView) -> bool:
    """Whether a handling step of this queue is under way."""
    return pq.order_lock.locked()
