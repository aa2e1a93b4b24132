"""Broker-side queue locks for orderly consumption (LOCK_BATCH_MQ / UNLOCK_BATCH_MQ).

The locks of the queues a consumer owns, and of revoked queues whose handler is still
running (``consumer.releasing``), are renewed every ``lock_renew_interval``. A queue
whose lock is refused (another consumer still holds it) or could not be renewed (the
broker did not answer) is asked for again after :data:`LOCK_RETRY_DELAY`, not a whole
interval later: one request per broker for all such queues, so waiting queues cost a
small request per second, not a storm. A broker that does not answer changes nothing
locally: its queues stay locked until the lock's age passes ``lock_max_live_time``, as
the Java client's ``isLockExpired`` has it.
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

import anyio

from aiorocket.errors import RocketMQError
from aiorocket.message import MessageQueue

if TYPE_CHECKING:
    from aiorocket.consumer.consumer import Consumer
    from aiorocket.consumer.process_queue import ProcessQueue

#: seconds before a refused or failed lock is asked for again (Java retries a refused
#: queue's rebalance after 0.5 s and delays its pulls by a few seconds).
LOCK_RETRY_DELAY = 1.0


async def by_broker(consumer: Consumer, mqs: list[MessageQueue]) -> dict[str, list[MessageQueue]]:
    grouped: dict[str, list[MessageQueue]] = defaultdict(list)
    for mq in mqs:
        addr = await consumer.broker_addr(mq)
        if addr is not None:
            grouped[addr].append(mq)
    return grouped


async def try_lock(
    consumer: Consumer, mqs: list[MessageQueue]
) -> tuple[set[MessageQueue], set[MessageQueue]]:
    """LOCK_BATCH_MQ on each broker: (the queues we now hold, the queues whose broker
    could not be asked). The others were refused: another consumer holds them."""
    locked: set[MessageQueue] = set()
    unknown = set(mqs)
    for addr, group in (await by_broker(consumer, mqs)).items():
        try:
            got = await consumer.client.broker.lock_batch(
                addr, consumer.group, consumer.client_id, group
            )
        except RocketMQError as exc:
            consumer.log.warning("lock_failed", broker=addr, queues=len(group), error=str(exc))
            continue
        locked |= got
        unknown.difference_update(group)
    return locked & set(mqs), unknown


async def lock_queues(consumer: Consumer, mqs: list[MessageQueue]) -> set[MessageQueue]:
    """LOCK_BATCH_MQ on each broker; the queues this consumer now holds."""
    locked, _ = await try_lock(consumer, mqs)
    return locked


async def unlock_queues(consumer: Consumer, mqs: list[MessageQueue]) -> None:
    if not mqs:
        return
    for addr, group in (await by_broker(consumer, mqs)).items():
        try:
            await consumer.client.broker.unlock_batch(
                addr, consumer.group, consumer.client_id, group
            )
        except RocketMQError as exc:
            consumer.log.warning("unlock_failed", broker=addr, error=str(exc))


def _held(consumer: Consumer) -> list[ProcessQueue]:
    """The queues whose locks we keep: owned ones and revoked ones still finishing."""
    pqs = [pq for pq in consumer.process_queues.values() if not pq.dropped]
    pqs.extend(consumer.releasing.values())
    return pqs


def _needs_retry(consumer: Consumer, pq: ProcessQueue, now: float) -> bool:
    """Refused, or its last renewal failed (the lock is older than one interval)."""
    return not pq.locked or now - pq.last_lock_time >= consumer.config.lock_renew_interval


async def renew_locks(consumer: Consumer, *, retry_only: bool = False) -> None:
    """Lock every held queue again (``retry_only``: those refused or not renewed)."""
    now = anyio.current_time()
    pqs = _held(consumer)
    if retry_only:
        pqs = [pq for pq in pqs if _needs_retry(consumer, pq, now)]
    if not pqs:
        return
    locked, unknown = await try_lock(consumer, [pq.mq for pq in pqs])
    now = anyio.current_time()
    for pq in pqs:
        if pq.mq in unknown:
            continue  # no answer: unchanged, the lock's age decides (lock_valid)
        was = pq.locked
        pq.locked = pq.mq in locked
        if pq.locked:
            pq.last_lock_time = now
        if was != pq.locked:
            consumer.log.warning("queue_lock_changed", queue=str(pq.mq), locked=pq.locked)
            if was:
                consumer.lock_lost.notify()  # keep_locks asks again soon
        pq.notify()


async def keep_locks(consumer: Consumer) -> None:
    """Renew the locks every ``lock_renew_interval``; retry refused or failed ones after
    :data:`LOCK_RETRY_DELAY` in between."""
    interval = consumer.config.lock_renew_interval
    next_renewal = anyio.current_time() + interval
    while True:
        now = anyio.current_time()
        wait = next_renewal - now
        if any(_needs_retry(consumer, pq, now) for pq in _held(consumer)):
            wait = min(wait, LOCK_RETRY_DELAY)
        with anyio.move_on_after(max(wait, 0.0)) as scope:
            await consumer.lock_lost.wait()
        if not scope.cancelled_caught:
            continue  # a lock was refused just now: ask again after the retry delay
        if anyio.current_time() >= next_renewal:
            next_renewal = anyio.current_time() + interval
            await renew_locks(consumer)
        else:
            await renew_locks(consumer, retry_only=True)


def lock_valid(consumer: Consumer, pq: ProcessQueue) -> bool:
    return (
        pq.locked and anyio.current_time() - pq.last_lock_time <= consumer.config.lock_max_live_time
    )
