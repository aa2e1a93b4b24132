"""Concurrent dispatch: worker tasks run the handler, each call under the consume timeout.

``consume_concurrency`` workers read work items (one message, or a batch of one queue)
from one channel. A fixed set of workers costs less than a task per message and bounds
concurrency without a semaphore; this replaces the Java consume thread pool.
"""

from __future__ import annotations

import inspect
import time
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc
import anyio.lowlevel

from aiorocket.consumer.message import ConsumerMessage
from aiorocket.consumer.results import HandlerResult, Reconsume, failure_delay_level
from aiorocket.consumer.work_queue import WorkQueue

#: What the work queue carries: one message, or a batch of one queue's messages.
WorkItem = ConsumerMessage | list[ConsumerMessage]

if TYPE_CHECKING:
    from aiorocket.consumer.consumer import Consumer
    from aiorocket.consumer.process_queue import ProcessQueue


def is_async_callable(fn: Any) -> bool:
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)  # noqa: B004 - objects with an async __call__
    )


class WorkerSlot:
    """What one worker is running, for the consume-timeout watchdog."""

    __slots__ = ("current", "deadline", "scope", "timed_out")

    def __init__(self) -> None:
        self.current: WorkItem | None = None
        self.deadline = 0.0
        self.scope: anyio.CancelScope | None = None
        self.timed_out = False


async def run_workers(
    consumer: Consumer, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
) -> None:
    assert consumer.work_queue is not None and consumer.workers_done is not None
    slots = [WorkerSlot() for _ in range(consumer.config.consume_concurrency)]
    try:
        with anyio.CancelScope() as scope:
            consumer.workers_scope = scope
            async with anyio.create_task_group() as outer:
                outer.start_soon(consume_timeout_watchdog, consumer, slots)
                async with anyio.create_task_group() as workers:
                    for slot in slots:
                        workers.start_soon(worker, consumer, consumer.work_queue, slot)
                    task_status.started()
                outer.cancel_scope.cancel()  # every worker returned: stop the watchdog
    finally:
        consumer.workers_done.set()


async def consume_timeout_watchdog(consumer: Consumer, slots: list[WorkerSlot]) -> None:
    """Cancel handler calls that overran ``consume_timeout``.

    One cheap periodic check for all workers replaces a timer-backed cancel scope per
    handler call, which would be the most expensive step of dispatching a message.
    """
    timeout = consumer.config.consume_timeout
    interval = min(max(timeout / 10, 0.05), 1.0)
    while True:
        await anyio.sleep(interval)
        now = time.monotonic()  # the same clock as the deadlines, cheaper than anyio's
        for slot in slots:
            if slot.current is not None and now >= slot.deadline and slot.scope is not None:
                slot.timed_out = True
                slot.scope.cancel()


async def worker(consumer: Consumer, queue: WorkQueue[WorkItem], slot: WorkerSlot) -> None:
    # A single message for an async handler (the common case) is handled inline below;
    # batches and thread-run handlers take consume_batch. The inline path saves the
    # list, two coroutine frames and the settle coroutine per message.
    inline = consumer.handler_is_async and not consumer.batch_mode
    handler = consumer.handler_fn
    timeout = consumer.config.consume_timeout
    retry_level = consumer.config.retry_delay_level
    monotonic = time.monotonic  # the watchdog's clock
    finish = consumer.finish
    pop_nowait = queue.pop_nowait
    countdown = _BURST
    while True:
        # One long-lived cancel scope per worker; the watchdog cancels it only when the
        # running handler times out, and the worker then opens a new one.
        with anyio.CancelScope() as scope:
            slot.scope = scope
            while True:
                try:
                    item = pop_nowait()
                except IndexError:
                    try:
                        item = await queue.get()
                    except anyio.EndOfStream:
                        return
                if isinstance(item, list):
                    await consume_batch(consumer, item, slot)
                elif not inline:
                    await consume_batch(consumer, [item], slot)
                else:
                    assert handler is not None
                    pq = item._pq
                    assert pq is not None
                    if pq.dropped or item._settled or item._generation != pq.tracker.generation:
                        continue
                    pq.running += 1
                    slot.deadline = monotonic() + timeout
                    slot.current = item
                    try:
                        result = await handler(item)
                    except Exception as exc:
                        _log_failure(consumer, pq, item, exc)
                        level: int | None = retry_level
                    else:
                        level = (
                            None
                            if result is None
                            else _level_of(consumer, pq, item, result, retry_level)
                        )
                    slot.current = None  # not reached when cancelled: the worker settles it
                    pq.running -= 1
                    if level is None:
                        # No await: a success needs no broker round trip. finish()
                        # wakes the queue's waiters unless the message was stale or
                        # settled already; they must still see running drop.
                        if not finish(item):
                            pq.notify()
                    else:
                        pq.notify()
                        await consumer.settle(item, level)
                countdown -= 1
                if not countdown:
                    # queue.get() does not yield while work is queued: let pulls and
                    # reads run between bursts of handler calls.
                    countdown = _BURST
                    await anyio.lowlevel.checkpoint()
        if slot.current is not None:  # the handler overran consume_timeout
            current, slot.current = slot.current, None
            slot.timed_out = False
            await _settle_timed_out(consumer, current if isinstance(current, list) else [current])


_BURST = 32  # handler calls between forced checkpoints


async def _settle_timed_out(consumer: Consumer, batch: list[ConsumerMessage]) -> None:
    pq = batch[0]._pq
    assert pq is not None
    pq.running -= 1
    pq.notify()
    consumer.log.warning(
        "consume_timeout",
        topic=pq.mq.topic,
        queue=pq.mq.queue_id,
        offset=batch[0].queue_offset,
        timeout=consumer.config.consume_timeout,
    )
    for m in batch:
        await consumer.settle(m, consumer.config.retry_delay_level)


async def consume_batch(consumer: Consumer, batch: list[ConsumerMessage], slot: WorkerSlot) -> None:
    pq = batch[0]._pq
    assert pq is not None
    if pq.dropped:
        return
    generation = pq.tracker.generation
    live = [m for m in batch if not m._settled and m._generation == generation]
    if not live:
        return
    pq.running += 1
    slot.deadline = time.monotonic() + consumer.config.consume_timeout
    slot.current = live
    level, _ = await _call(consumer, pq, live)
    slot.current = None  # not reached when cancelled: the worker settles the timeout
    pq.running -= 1
    pq.notify()
    for m in live:
        await consumer.settle(m, level)


def _log_failure(
    consumer: Consumer, pq: ProcessQueue, first: ConsumerMessage, exc: Exception
) -> None:
    consumer.log.warning(
        "handler_failed",
        topic=pq.mq.topic,
        broker=pq.mq.broker_name,
        queue=pq.mq.queue_id,
        offset=first.queue_offset,
        error=repr(exc),
    )


async def _call(
    consumer: Consumer, pq: ProcessQueue, live: list[ConsumerMessage]
) -> tuple[int | None, float | None]:
    """One handler call: (failure delay level or None on success, orderly suspend)."""
    cfg = consumer.config
    try:
        result = await invoke(consumer, live)
    except Exception as exc:
        _log_failure(consumer, pq, live[0], exc)
        return cfg.retry_delay_level, None
    suspend = result.suspend if isinstance(result, Reconsume) else None
    return _level_of(consumer, pq, live[0], result, cfg.retry_delay_level), suspend


def _level_of(
    consumer: Consumer,
    pq: ProcessQueue,
    first: ConsumerMessage,
    result: HandlerResult,
    default: int,
) -> int | None:
    """The failure delay level of a handler's result; a result of the wrong type is a
    failure of that handler call (logged), not of the worker and the other messages."""
    try:
        return failure_delay_level(result, default)
    except TypeError as exc:
        _log_failure(consumer, pq, first, exc)
        return default


async def run_handler(
    consumer: Consumer, pq: ProcessQueue, live: list[ConsumerMessage]
) -> tuple[int | None, float | None]:
    """Run the handler under the consume timeout: (failure delay level, suspend)."""
    cfg = consumer.config
    level: int | None = None
    suspend: float | None = None
    pq.running += 1
    try:
        with anyio.move_on_after(cfg.consume_timeout) as scope:
            level, suspend = await _call(consumer, pq, live)
        if scope.cancelled_caught:
            level = cfg.retry_delay_level
            consumer.log.warning(
                "consume_timeout",
                topic=pq.mq.topic,
                queue=pq.mq.queue_id,
                offset=live[0].queue_offset,
                timeout=cfg.consume_timeout,
            )
    finally:
        pq.running -= 1
        pq.notify()
    return level, suspend


async def invoke(consumer: Consumer, live: list[ConsumerMessage]) -> HandlerResult:
    handler = consumer.handler_fn
    assert handler is not None
    arg: Any = live if consumer.batch_mode else live[0]
    if consumer.handler_is_async:
        return await handler(arg)  # type: ignore[no-any-return]
    assert consumer.handler_threads is not None
    result = await consumer.handler_threads.run(handler, arg)
    if inspect.isawaitable(result):
        return await result  # type: ignore[no-any-return]
    return result  # type: ignore[no-any-return]
