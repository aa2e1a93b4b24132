"""Orderly consumption: one handler at a time per queue, in offset order, under a lock.

The broker lock (LOCK_BATCH_MQ) makes sure one consumer of the group handles a queue;
this task makes sure that consumer handles its messages one after another. A failed
message is retried in place after a suspension (never skipped, never reordered) and,
after ``max_reconsume_times`` attempts, moved to the dead-letter queue so the queue can
move on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import anyio

from aiorocket.consumer.dispatch import run_handler
from aiorocket.consumer.locks import lock_valid
from aiorocket.consumer.message import ConsumerMessage

if TYPE_CHECKING:
    from aiorocket.consumer.consumer import Consumer
    from aiorocket.consumer.process_queue import ProcessQueue

TO_DEAD_LETTER = -1  # send-back delay level that moves a message straight to the DLQ


async def orderly_consume_loop(consumer: Consumer, pq: ProcessQueue) -> None:
    cfg = consumer.config
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
            # Re-check after waiting for a slot: a rebalance may have taken the queue.
            if pq.dropped or consumer.closing or not lock_valid(consumer, pq):
                continue
            level, suspend = await run_handler(consumer, pq, [msg])
        if level is None:
            pq.buffer.popleft()
            await consumer.settle(msg, None)
            continue
        msg.reconsume_times += 1
        exhausted = 0 <= cfg.max_reconsume_times < msg.reconsume_times
        if exhausted and await consumer.send_to_dead_letter(pq, msg):
            log.warning("orderly_dead_lettered", offset=msg.queue_offset,
                        attempts=msg.reconsume_times)  # fmt: skip
            pq.buffer.popleft()
            msg._settled = True
            pq.on_done(msg, msg._generation)
            continue
        delay = suspend if suspend is not None else cfg.suspend_current_queue_time
        pq.suspended_until = anyio.current_time() + delay
        log.info("orderly_suspended", offset=msg.queue_offset, seconds=delay,
                 attempts=msg.reconsume_times)  # fmt: skip
