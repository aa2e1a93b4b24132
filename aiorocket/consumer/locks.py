"""Broker-side queue locks for orderly consumption (LOCK_BATCH_MQ / UNLOCK_BATCH_MQ)."""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

import anyio

from aiorocket.errors import RocketMQError
from aiorocket.message import MessageQueue

if TYPE_CHECKING:
    from aiorocket.consumer.consumer import Consumer
    from aiorocket.consumer.process_queue import ProcessQueue


async def by_broker(consumer: Consumer, mqs: list[MessageQueue]) -> dict[str, list[MessageQueue]]:
    grouped: dict[str, list[MessageQueue]] = defaultdict(list)
    for mq in mqs:
        addr = await consumer.broker_addr(mq)
        if addr is not None:
            grouped[addr].append(mq)
    return grouped


async def lock_queues(consumer: Consumer, mqs: list[MessageQueue]) -> set[MessageQueue]:
    """LOCK_BATCH_MQ on each broker; the queues this consumer now holds."""
    locked: set[MessageQueue] = set()
    for addr, group in (await by_broker(consumer, mqs)).items():
        try:
            locked |= await consumer.client.broker.lock_batch(
                addr, consumer.group, consumer.client_id, group
            )
        except RocketMQError as exc:
            consumer.log.warning("lock_failed", broker=addr, error=str(exc))
    consumer.pending_locks = len(locked) < len(mqs)
    return locked & set(mqs)


async def unlock_queues(consumer: Consumer, mqs: list[MessageQueue]) -> None:
    for addr, group in (await by_broker(consumer, mqs)).items():
        try:
            await consumer.client.broker.unlock_batch(
                addr, consumer.group, consumer.client_id, group
            )
        except RocketMQError as exc:
            consumer.log.warning("unlock_failed", broker=addr, error=str(exc))


async def renew_locks(consumer: Consumer) -> None:
    pqs = [pq for pq in consumer.process_queues.values() if not pq.dropped]
    if not pqs:
        return
    locked = await lock_queues(consumer, [pq.mq for pq in pqs])
    now = anyio.current_time()
    for pq in pqs:
        was = pq.locked
        pq.locked = pq.mq in locked
        if pq.locked:
            pq.last_lock_time = now
        if was != pq.locked:
            consumer.log.warning("queue_lock_changed", queue=str(pq.mq), locked=pq.locked)
        pq.notify()


def lock_valid(consumer: Consumer, pq: ProcessQueue) -> bool:
    return (
        pq.locked and anyio.current_time() - pq.last_lock_time <= consumer.config.lock_max_live_time
    )
