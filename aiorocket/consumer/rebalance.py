"""Rebalance: decide which queues this consumer owns and start or stop their tasks."""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

import anyio

from aiorocket.consumer import locks
from aiorocket.consumer.config import ConsumeFromWhere, MessageModel
from aiorocket.consumer.process_queue import ProcessQueue
from aiorocket.errors import RocketMQError, TopicNotExistError
from aiorocket.message import MessageQueue
from aiorocket.protocol.subscription import Subscription

if TYPE_CHECKING:
    from aiorocket.consumer.consumer import Consumer

RETRY_PREFIX = "%RETRY%"


async def rebalance(consumer: Consumer) -> None:
    """One pass over every subscribed topic (Java: RebalanceImpl.doRebalance)."""
    for topic, sub in list(consumer.subscriptions.items()):
        try:
            await rebalance_topic(consumer, topic, sub)
        except TopicNotExistError:
            # The group's retry topic appears only after the broker has seen the group.
            level = "debug" if topic.startswith(RETRY_PREFIX) else "warning"
            getattr(consumer.log, level)("rebalance_no_route", topic=topic)
        except RocketMQError as exc:
            consumer.log.warning("rebalance_failed", topic=topic, error=str(exc))


async def rebalance_topic(consumer: Consumer, topic: str, sub: Subscription) -> None:
    # The cached route: the NameServer client refreshes it every 30 s (as Java does), so
    # a rebalance pass over many topics costs no route queries.
    route = await consumer.client.namesrv.get_route(topic)
    all_queues = route.read_queues()
    if consumer.manual_assignment is not None:
        mine = {mq for mq in consumer.manual_assignment if mq.topic == topic}
    elif consumer.config.message_model is MessageModel.BROADCASTING:
        mine = set(all_queues)
    else:
        masters = list(route.all_master_addrs().values())
        if not masters:
            consumer.log.warning("rebalance_no_master", topic=topic)
            return
        cids = await consumer.client.broker.get_consumer_ids(random.choice(masters), consumer.group)
        if not cids:
            consumer.log.warning("rebalance_no_consumer_ids", topic=topic)
            return
        if consumer.client_id not in cids:
            # The broker has not registered our heartbeat yet; allocating now could take
            # queues another member also takes. Wait for the next pass.
            consumer.log.info("rebalance_not_registered", topic=topic)
            return
        mine = set(consumer.allocate(consumer.group, consumer.client_id, all_queues, cids))
    await update_process_queues(consumer, topic, mine, sub)


async def update_process_queues(
    consumer: Consumer, topic: str, mine: set[MessageQueue], sub: Subscription
) -> None:
    current = {mq: pq for mq, pq in consumer.process_queues.items() if mq.topic == topic}
    removed = [pq for mq, pq in current.items() if mq not in mine]
    added = sorted(mq for mq in mine if mq not in current)
    if removed:
        await consumer.revoke(removed)
    if added and consumer.config.orderly:
        added = sorted(await locks.lock_queues(consumer, added))
    started = []
    for mq in added:
        try:
            offset, stored = await compute_start_offset(consumer, mq)
        except RocketMQError as exc:
            consumer.log.warning(
                "start_offset_failed",
                topic=mq.topic,
                broker=mq.broker_name,
                queue=mq.queue_id,
                error=str(exc),
            )
            continue
        pq = ProcessQueue(mq, offset)
        if not stored:
            pq.tracker.mark_dirty()  # commit the computed start so a restart resumes here
        if consumer.config.orderly:
            pq.locked = True
            pq.last_lock_time = anyio.current_time()
        consumer.process_queues[mq] = pq
        await consumer.start_pulling(pq, sub)
        started.append(mq)
    if removed or started:
        consumer.log.info(
            "rebalanced",
            topic=topic,
            revoked=[str(p.mq) for p in removed],
            assigned=[str(m) for m in started],
            owned=len(mine),
        )
        await consumer.on_assigned(started)


async def compute_start_offset(consumer: Consumer, mq: MessageQueue) -> tuple[int, bool]:
    """The offset to start at and whether it came from the store (Java: computePullFromWhere)."""
    stored = await consumer.offset_store.read(mq)
    if stored is not None and stored >= 0:
        return stored, True
    addr = await consumer.broker_addr(mq)
    if addr is None:
        raise RocketMQError(f"no master broker for {mq}")
    broker = consumer.client.broker
    where = consumer.config.consume_from_where
    if mq.topic.startswith(RETRY_PREFIX) or where is ConsumeFromWhere.FIRST_OFFSET:
        return await broker.get_min_offset(addr, mq), False
    if where is ConsumeFromWhere.LAST_OFFSET:
        return await broker.get_max_offset(addr, mq), False
    ts = consumer.config.consume_timestamp_ms
    if ts is None:
        ts = consumer.started_at_ms - 30 * 60 * 1000
    return await broker.search_offset(addr, mq, ts), False
