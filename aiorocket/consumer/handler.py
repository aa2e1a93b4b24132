"""The application's handler: how it is called and what its result means.

One ``Handler`` wraps the function given as ``handler=`` or ``batch_handler=``:
async functions are awaited on the loop, plain ones run in a worker thread
([`HandlerThreads`][aiorocket.consumer.threads.HandlerThreads]). The worker pool, orderly
consumption and the operators' CONSUME_MESSAGE_DIRECTLY all call it through here.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import anyio

from aiorocket._failure_log import handler_failed, message_dead_lettered, msg_id_of
from aiorocket._trace import CONSUME_EXCEPTION, CONSUME_FAILED, CONSUME_SUCCESS, CONSUME_TIME_OUT
from aiorocket.consumer.dedup import Deduplicator
from aiorocket.results import HandlerResult, Reconsume, failure_delay_level, retry_delay_of

if TYPE_CHECKING:
    from aiorocket.consumer.state import ConsumerState
    from aiorocket.consumer.threads import HandlerThreads
    from aiorocket.received import ConsumerMessage, QueueView

__all__ = ["ConsumeTimeouts", "Handler", "TimeoutSlot", "is_async_callable"]


def is_async_callable(fn: Any) -> bool:
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)  # noqa: B004 - objects with an async __call__
    )


class Handler:
    """Calls the application's handler and turns its outcome into a settle decision.

    Parameters
    ----------
    fn:
        The handler: one message (``batch=False``) or a list of one queue's messages.
    batch:
        ``fn`` takes a list (``batch_handler=``).
    threads:
        Where a synchronous ``fn`` runs.
    state:
        The consumer's shared state: its configuration (consume timeout, retry delay
        level) and logger (failures are logged with their queue).
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        batch: bool,
        threads: HandlerThreads,
        state: ConsumerState,
    ) -> None:
        self.fn = fn
        self.batch = batch
        self.is_async = is_async_callable(fn)
        self.threads = threads
        self._state = state
        dedup = state.config.dedup
        #: idempotent consumption (``dedup=``): claims keys around each call
        self.dedup = None if dedup is None else Deduplicator(
            dedup, group=state.group, consume_timeout=state.config.consume_timeout,
            log=state.log)  # fmt: skip

    async def invoke(self, live: list[ConsumerMessage]) -> HandlerResult:
        """Call the handler once with ``live`` (or its first message) and return its result."""
        arg: Any = live if self.batch else live[0]
        if self.is_async:
            return await self.fn(arg)  # type: ignore[no-any-return]
        result = await self.threads.run(self.fn, arg)
        if inspect.isawaitable(result):
            return await result  # type: ignore[no-any-return]
        return result  # type: ignore[no-any-return]

    async def call(
        self, pq: QueueView, live: list[ConsumerMessage]
    ) -> tuple[int | None, float | None]:
        """One handler call: (failure delay level or None on success, orderly suspend).

        With ``dedup=`` the keys of ``live`` are claimed first: the handler gets the
        messages not handled yet (none: a success without a call); a key another call
        holds fails the whole call to the transport's retry. The outcome settles every
        message of ``live`` (a copy already done and failed with the others is done the
        next time). Cancelled (consume timeout, close), the claims are released."""
        dedup = self.dedup
        if dedup is None:
            return await self._call(pq, live)
        claims = await dedup.claim(live)
        if claims.busy:
            await dedup.release(claims)
            await dedup.checkpoint()
            first = live[0]
            self._state.log.info("dedup_in_progress", topic=first.topic, msg_id=msg_id_of(first),
                                 attempt=first.reconsume_times + 1)  # fmt: skip
            for m in live:
                m._retry_delay = None  # the transport's backoff
            return self._state.config.retry_delay_level, None
        if not claims.todo:
            return None, None  # every key handled already
        try:
            if dedup.renews:
                async with anyio.create_task_group() as keeping:
                    keeping.start_soon(dedup.keep, claims)  # the call may outlast them
                    level, suspend = await self._call(pq, claims.todo)
                    keeping.cancel_scope.cancel()
            else:
                level, suspend = await self._call(pq, claims.todo)
        except BaseException:
            await dedup.release(claims)
            raise
        if level is None:
            await dedup.done(claims)
        else:
            await dedup.release(claims)
        await dedup.checkpoint()
        delay = claims.todo[0]._retry_delay
        for m in live:
            m._retry_delay = delay
        return level, suspend

    async def _call(
        self, pq: QueueView, live: list[ConsumerMessage]
    ) -> tuple[int | None, float | None]:
        retry_level = self._state.config.retry_delay_level
        trace = self._state.trace
        call = None if trace is None else trace.before(live)
        try:
            result = await self.invoke(live)
        except Exception as exc:
            for m in live:
                m._retry_delay = None  # a raised failure takes the transport's backoff
            self.log_failure(pq, live[0], exc)
            if trace is not None and call is not None:
                trace.after(call, CONSUME_EXCEPTION)
            return retry_level, None
        except BaseException:
            # Cancelled: by the consume timeout (a failure), or by a close (no outcome:
            # the message is handed back).
            if trace is not None and call is not None and live[0]._timed_out:
                trace.after(call, CONSUME_TIME_OUT)
            raise
        suspend = None
        if isinstance(result, Reconsume):  # orderly: a delay in seconds is a suspend
            suspend = result.suspend if result.suspend is not None else result.delay
        level = self.level_of(pq, live[0], result)
        for m in live[1:]:
            m._retry_delay = live[0]._retry_delay
        if trace is not None and call is not None:
            trace.after(call, CONSUME_SUCCESS if level is None else CONSUME_FAILED)
        return level, suspend

    def level_of(self, pq: QueueView, first: ConsumerMessage, result: HandlerResult) -> int | None:
        """The failure delay level of a handler's result; a result of the wrong type is a
        failure of that handler call (logged), not of the worker and the other messages.
        Notes on ``first`` the seconds it asks the message back after (settlers read it)."""
        default = self._state.config.retry_delay_level
        first._retry_delay = None
        try:
            level = failure_delay_level(result, default)
        except TypeError as exc:
            self.log_failure(pq, first, exc)
            return default
        first._retry_delay = retry_delay_of(result)
        if level is not None:
            cause = first._failure  # the exception a wrapper turned into this result
            self.log_if_last(first, f"handler returned {result!r}" if cause is None
                             else repr(cause), level)  # fmt: skip
        return level

    def log_failure(self, pq: QueueView, first: ConsumerMessage, exc: Exception) -> None:
        first._retry_delay = None  # raised: the transport's backoff
        handler_failed(self._state.log, exc, attempt=first.reconsume_times + 1,
                       topic=first.topic, broker=pq.mq.broker_name, queue=pq.mq.queue_id,
                       offset=first.queue_offset, msg_id=msg_id_of(first))  # fmt: skip
        self.log_if_last(first, repr(exc), self._state.config.retry_delay_level)

    def log_if_last(self, msg: ConsumerMessage, error: str, level: int) -> None:
        """``message_dead_lettered`` if this failure sends ``msg`` to the DLQ; the
        message's settler decides (each transport's rule lives there)."""
        settler = msg._settler
        if settler is not None and settler.dead_letters(msg, level):
            message_dead_lettered(self._state.log, topic=msg.topic, msg_id=msg_id_of(msg),
                                  attempts=msg.reconsume_times + 1, error=error)  # fmt: skip

    def log_timeout(self, pq: QueueView, first: ConsumerMessage) -> None:
        first._retry_delay = None
        self._state.log.warning(
            "consume_timeout",
            topic=pq.mq.topic,
            queue=pq.mq.queue_id,
            offset=first.queue_offset,
            timeout=self._state.config.consume_timeout,
        )
        self.log_if_last(first, "consume_timeout", self._state.config.retry_delay_level)


class TimeoutSlot:
    """One handler call site (a worker, an orderly loop) the watchdog keeps an eye on.

    The caller runs each handler call inside ``scope`` with ``current`` set and a
    ``deadline``; the watchdog cancels ``scope`` (and sets ``timed_out``) once the
    deadline has passed with ``current`` still set. A ``deadline`` of 0.0 is stamped by
    the watchdog when it first sees the call (``ConsumeTimeouts.check``): the worker pool
    writes that, a store a message where its own clock read cost a call.
    """

    __slots__ = ("current", "deadline", "scope", "timed_out")

    def __init__(self) -> None:
        self.current: ConsumerMessage | list[ConsumerMessage] | None = None
        self.deadline = 0.0
        self.scope: anyio.CancelScope | None = None
        self.timed_out = False


class ConsumeTimeouts:
    """The consume timeout: one watchdog task for every handler call of a consumer.

    One cheap periodic check over all call sites replaces a timer-backed cancel scope
    per handler call, which would be the most expensive step of dispatching a message
    (benchmarks/micro.py and ceiling.py measure the dispatch path). Deadlines use
    ``time.monotonic``, cheaper than anyio's clock.

    A call site may leave its deadline unstamped (0.0): the check that first sees the
    call stamps it ``timeout`` from then, so the worker pool reads no clock a message
    (benchmarks/README.md, "Round 14"). Such a call started at most one interval before
    that check, so it may run up to ``timeout`` + 2 intervals before it is cancelled,
    never less than ``timeout``; checking twice as often as a caller-stamped deadline
    needs keeps that bound where it was: ``timeout`` + 10% (at least 50 ms, at most 1 s).

    Parameters
    ----------
    timeout:
        ``consume_timeout``: seconds a handler call may run before it is cancelled.
    """

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self._slots: list[TimeoutSlot] = []

    def slot(self) -> TimeoutSlot:
        """A new call site to watch (give it back with ``release``)."""
        slot = TimeoutSlot()
        self._slots.append(slot)
        return slot

    def release(self, slot: TimeoutSlot) -> None:
        self._slots.remove(slot)

    async def run(self) -> None:
        """Cancel overrunning calls until cancelled; checks 20 times per timeout (at
        least every 25 ms, at most every half second: the class)."""
        interval = min(max(self.timeout / 20, 0.025), 0.5)
        while True:
            await anyio.sleep(interval)
            self.check(time.monotonic())

    def check(self, now: float) -> None:
        """One check at ``now``: stamp the calls not stamped yet, cancel the overrun."""
        for slot in self._slots:
            current = slot.current
            if current is None or slot.scope is None:
                continue
            if not slot.deadline:  # first seen: it started since the last check
                slot.deadline = now + self.timeout
            elif now >= slot.deadline:
                slot.timed_out = True
                for msg in current if isinstance(current, list) else [current]:
                    msg._timed_out = True  # the handler's wrappers tell it from a close
                slot.scope.cancel()
