"""Concurrent dispatch: worker tasks run the handler, each call under the consume timeout.

``consume_concurrency`` workers read work items (one message, or a batch of one queue)
from one channel. A fixed set of workers costs less than a task per message and bounds
concurrency without a semaphore; this replaces the Java consume thread pool.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc
from anyio.streams.memory import MemoryObjectReceiveStream

from aiorocket.consumer.message import ConsumerMessage
from aiorocket.consumer.results import HandlerResult, Reconsume, failure_delay_level

if TYPE_CHECKING:
    from aiorocket.consumer.consumer import Consumer
    from aiorocket.consumer.process_queue import ProcessQueue


def is_async_callable(fn: Any) -> bool:
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)  # noqa: B004 - objects with an async __call__
    )


async def run_workers(
    consumer: Consumer, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
) -> None:
    assert consumer.work_recv is not None and consumer.workers_done is not None
    try:
        with anyio.CancelScope() as scope:
            consumer.workers_scope = scope
            async with anyio.create_task_group() as tg:
                for _ in range(consumer.config.consume_concurrency):
                    tg.start_soon(worker, consumer, consumer.work_recv)
                task_status.started()
    finally:
        consumer.workers_done.set()


async def worker(
    consumer: Consumer, recv: MemoryObjectReceiveStream[list[ConsumerMessage]]
) -> None:
    async for batch in recv:
        await consume_batch(consumer, batch)


async def consume_batch(consumer: Consumer, batch: list[ConsumerMessage]) -> None:
    pq = batch[0]._pq
    assert pq is not None
    if pq.dropped:
        return
    live = [m for m in batch if not m._settled and m._generation == pq.tracker.generation]
    if not live:
        return
    level, _ = await run_handler(consumer, pq, live)
    for m in live:
        await consumer.settle(m, level)


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
            try:
                result = await invoke(consumer, live)
                level = failure_delay_level(result, cfg.retry_delay_level)
                if isinstance(result, Reconsume):
                    suspend = result.suspend
            except Exception as exc:
                level = cfg.retry_delay_level
                consumer.log.warning(
                    "handler_failed",
                    topic=pq.mq.topic,
                    broker=pq.mq.broker_name,
                    queue=pq.mq.queue_id,
                    offset=live[0].queue_offset,
                    error=repr(exc),
                )
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
    if is_async_callable(handler):
        return await handler(arg)  # type: ignore[no-any-return]
    result = await anyio.to_thread.run_sync(
        handler, arg, abandon_on_cancel=True, limiter=consumer.thread_limiter
    )
    if inspect.isawaitable(result):
        return await result  # type: ignore[no-any-return]
    return result  # type: ignore[no-any-return]
