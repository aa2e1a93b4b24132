"""Orderly consumption: one handler at a time per queue, in offset order, under a lock.

The broker lock (LOCK_BATCH_MQ) makes sure one consumer of the group handles a queue;
this task makes sure that consumer handles its messages one after another. A failed
message is retried in place after a suspension (never skipped, never reordered) and,
after ``max_reconsume_times`` attempts, moved to the dead-letter queue so the queue can
move on.

A handling step (the handler call and what its result does: settle, suspend or
dead-letter) runs under the queue's ``order_lock`` (the Java client's consume lock).
A queue revoked while a step runs keeps its broker lock, renewed, until the step has
finished (:func:`release_when_idle`), so the next owner cannot consume it at the same
time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import anyio

from aiorocket.consumer import locks
from aiorocket.consumer.dispatch import run_handler
from aiorocket.consumer.locks import lock_valid
from aiorocket.consumer.message import ConsumerMessage

if TYPE_CHECKING:
    from aiorocket._log import Logger
    from aiorocket.consumer.consumer import Consumer
    from aiorocket.consumer.process_queue import ProcessQueue

TO_DEAD_LETTER = -1  # send-back delay level that moves a message straight to the DLQ


async def orderly_consume_loop(consumer: Consumer, pq: ProcessQueue) -> None:
    with anyio.CancelScope() as scope:
        pq.consume_scope = scope
        await _consume(consumer, pq)


async def _consume(consumer: Consumer, pq: ProcessQueue) -> None:
    slots = consumer.orderly_slots
    log = consumer.log.bind(topic=pq.mq.topic, broker=pq.mq.broker_name, queue=pq.mq.queue_id)
    while not pq.dropped and not consumer.closing:
        now = anyio.current_time()
        if not pq.buffer or not lock_valid(consumer, pq):
            await pq.wait_changed()
            continue
        if now < pq.suspended_until:
            with anyio.move_on_after(pq.suspended_until - now):
                await pq.wait_changed()
            continue
        msg: ConsumerMessage = pq.buffer[0]
        if msg._settled or msg._generation != pq.tracker.generation:
            pq.buffer.popleft()
            continue
        async with slots:
            try:
                async with pq.order_lock:
                    # Re-check after waiting: a rebalance may have taken the queue.
                    if pq.dropped or consumer.closing or not lock_valid(consumer, pq):
                        continue
                    await _step(consumer, pq, msg, log)
            finally:
                pq.notify()  # a revoke or the close may be waiting for the step's end


async def _step(consumer: Consumer, pq: ProcessQueue, msg: ConsumerMessage, log: Logger) -> None:
    """Handle the message at the head of the buffer and apply the result."""
    cfg = consumer.config
    generation = msg._generation
    level, suspend = await run_handler(consumer, pq, [msg])
    if generation != pq.tracker.generation:
        # The queue was reset (OFFSET_ILLEGAL) while the handler ran: the buffer now
        # holds the new position's messages, and this result concerns none of them.
        log.info("orderly_result_discarded", offset=msg.queue_offset, reason="queue_reset")
        return
    if level is None:
        _take(pq, msg)
        await consumer.settle(msg, None)
        return
    if pq.dropped:
        return  # failed, and no longer ours: the next owner delivers it again
    msg.reconsume_times += 1
    if msg.reconsume_times > cfg.reconsume_limit() and await consumer.send_to_dead_letter(
        pq, msg
    ):
        log.warning("orderly_dead_lettered", offset=msg.queue_offset,
                    attempts=msg.reconsume_times)  # fmt: skip
        if generation == pq.tracker.generation:  # not reset during the send
            _take(pq, msg)
            msg._settled = True
            pq.on_done(msg, generation)
        return
    delay = suspend if suspend is not None else cfg.suspend_current_queue_time
    pq.suspended_until = anyio.current_time() + delay
    log.info("orderly_suspended", offset=msg.queue_offset, seconds=delay,
             attempts=msg.reconsume_times)  # fmt: skip


def _take(pq: ProcessQueue, msg: ConsumerMessage) -> None:
    """Remove the message just handled from the head of the buffer (only that one)."""
    if pq.buffer and pq.buffer[0] is msg:
        pq.buffer.popleft()


def busy(pq: ProcessQueue) -> bool:
    """Whether a handling step of this queue is under way."""
    return pq.order_lock.locked()


async def release_when_idle(consumer: Consumer, pq: ProcessQueue) -> None:
    """Unlock a revoked queue once its running handling step has finished.

    Until then the queue stays in ``consumer.releasing``: its broker lock is renewed
    with the owned queues' and a re-assignment waits for it. The step is bounded by
    ``consume_timeout`` (its handler is cancelled then). Cancelled (the consumer
    closes), the close unlocks it instead.
    """
    try:
        async with pq.order_lock:  # the step has finished; no new one starts (dropped)
            await consumer.persist_offset(pq)
            await locks.unlock_queues(consumer, [pq.mq])
    finally:
        if consumer.releasing.get(pq.mq) is pq:
            del consumer.releasing[pq.mq]
        if pq.mq in consumer.wanted_back:
            consumer.wanted_back.discard(pq.mq)
            if not consumer.closing:
                consumer.request_rebalance()  # assigned to us again meanwhile: start it now


async def stop_loops(consumer: Consumer, pqs: list[ProcessQueue], *, wait: float) -> None:
    """At close: let running steps finish within ``wait`` seconds, then cancel the rest
    and wait for them to end, so no queue is unlocked under a running async handler.

    The consumer is closing, so no loop starts a new step: only those busy now count.
    """
    running = [pq for pq in pqs if busy(pq)]
    if running and wait > 0:
        with anyio.move_on_after(wait) as scope:
            for pq in running:
                async with pq.order_lock:
                    pass
        if scope.cancelled_caught:
            consumer.log.warning("shutdown_timeout", timeout=wait, mode="orderly")
    for pq in pqs:
        if pq.consume_scope is not None:
            pq.consume_scope.cancel()
    running = [pq for pq in running if busy(pq)]
    with anyio.move_on_after(consumer.config.request_timeout):
        for pq in running:
            async with pq.order_lock:
                pass
