"""Health of a service's consumers: readiness, liveness, and a JSON-ready report with lag.

Readiness is per consumer [`has_joined`][aiorocket.consumer.Consumer.has_joined] (a member of
its group with its first assignment); liveness notices an assigned queue whose pulls
stopped completing (``QueueStats.pull_idle``).
The lag of a queue is the broker's max offset minus the committed offset (the offset the
consumer commits: every message before it is finished).
"""

from __future__ import annotations

from typing import Any

import anyio

from aiorocket.consumer import Consumer
from aiorocket.consumer.stats import QueueStats
from aiorocket.errors import RocketMQError
from aiorocket.message import RETRY_TOPIC_PREFIX, MessageQueue
from aiorocket.namespace import wrap_queue

__all__ = ["consumer_health", "is_live"]


def is_live(consumer: Consumer, stuck_after: float) -> bool:
    """False when a queue assigned to ``consumer`` has had no pull completed for
    ``stuck_after`` seconds (``QueueStats.pull_idle``).

    A pull completes at least every ``long_poll_timeout`` plus 5 s on a healthy queue
    that is not paused; one paused because its cache is full of unfinished messages
    (stuck handlers) completes none, so it counts as stuck.
    """
    if not consumer.started or consumer.consume_mode != "pull":
        return True  # a pop consumer is handed messages: no queue to be stuck on
    assigned = consumer.assignment()
    return all(
        s.pull_idle <= stuck_after for s in consumer.stats(advance=False) if s.queue in assigned
    )


async def _max_offset(consumer: Consumer, mq: MessageQueue, timeout: float) -> int | None:
    with anyio.move_on_after(timeout):
        try:
            addr = await consumer.read_addr(mq)
            if addr is not None:  # the broker's name of the queue (namespace)
                wire = wrap_queue(consumer.config.namespace, mq)
                return await consumer.client.broker.get_max_offset(addr, wire)
        except RocketMQError:
            pass
    return None


async def consumer_health(
    consumer: Consumer,
    *,
    stuck_after: float,
    with_lag: bool = True,
    timeout: float = 3.0,
) -> dict[str, Any]:
    """A JSON-ready report of one consumer.

    ``{"group", "topics", "joined", "live", "assigned_queues", "cached", "in_flight",
    "lag", "queues": [{"topic", "broker", "queue_id", "cached", "in_flight",
    "committed_offset", "max_offset", "lag", "pull_idle"}, ...]}``; the broker's max
    offsets are asked concurrently, each within ``timeout`` seconds (``max_offset`` and
    ``lag`` are None for a queue whose broker did not answer; the total counts the others).

    ``assigned_queues`` is what the ``aiorocket.consumer.assigned_queues`` gauge reports
    (``Consumer.receivable_queues``): the queues assigned to this member (pull, its
    retry queue not counted), the readable queues of the topics' routes (POP over
    remoting), the Proxy's assignments (gRPC: one per broker). ``queues`` lists a pull
    consumer's only: a POP or gRPC consumer owns no queue, its offsets are the server's.
    """
    # A pop consumer (gRPC, or consume_mode="pop") has no queues of its own to report.
    per_queue = consumer.started and consumer.consume_mode == "pull"
    stats: list[QueueStats] = consumer.stats(advance=False) if per_queue else []
    assigned = consumer.assignment() if per_queue else set()
    stats = [s for s in stats if s.queue in assigned]
    max_offsets: dict[MessageQueue, int | None] = {}
    if with_lag and stats:

        async def one(mq: MessageQueue) -> None:
            max_offsets[mq] = await _max_offset(consumer, mq, timeout)

        async with anyio.create_task_group() as tg:
            for s in stats:
                tg.start_soon(one, s.queue)
    queues = []
    total_lag = 0
    for s in stats:
        top = max_offsets.get(s.queue)
        lag = max(top - s.committed_offset, 0) if top is not None else None
        total_lag += lag or 0
        queues.append(
            {
                "topic": s.queue.topic,
                "broker": s.queue.broker_name,
                "queue_id": s.queue.queue_id,
                "cached": s.cached,
                "in_flight": s.running,
                "committed_offset": s.committed_offset,
                "max_offset": top,
                "lag": lag,
                "pull_idle": round(s.pull_idle, 3),
            }
        )
    return {
        "group": consumer.group,
        "topics": sorted(t for t in consumer.subscriptions if not t.startswith(RETRY_TOPIC_PREFIX)),
        "joined": consumer.started and consumer.has_joined,
        "live": all(s.pull_idle <= stuck_after for s in stats),
        "assigned_queues": consumer.receivable_queues(),
        "cached": sum(s.cached for s in stats),
        "in_flight": sum(s.running for s in stats),
        "lag": total_lag if with_lag else None,
        "queues": queues,
    }
