"""Per-queue consumer statistics for dashboards and tests."""

from __future__ import annotations

import time
from dataclasses import dataclass

from aiorocket.consumer.process_queue import ProcessQueue
from aiorocket.message import MessageQueue

__all__ = [
    "QueueStats",
    "Snapshot",
    "queue_stats",
]

Snapshot = tuple[float, dict[MessageQueue, tuple[int, int]]]


@dataclass(frozen=True, slots=True)
class QueueStats:
    queue: MessageQueue
    cached: int
    cached_bytes: int
    running: int
    committed_offset: int
    next_offset: int
    pulled: int
    consumed: int
    pull_rate: float
    consume_rate: float
    #: records that could not be decoded: dead-lettered or skipped, never delivered
    undecodable: int = 0
    #: seconds since a pull of this queue last completed (since it was assigned, before
    #: the first). A pull completes at least every ``long_poll_timeout`` (plus up to 5 s:
    #: the broker sweeps held pulls every 5 s) unless the queue is paused, e.g. by a
    #: cache full of unfinished messages; health checks read a stuck queue from it.
    pull_idle: float = 0.0


def queue_stats(
    process_queues: dict[MessageQueue, ProcessQueue], previous: Snapshot | None
) -> tuple[list[QueueStats], Snapshot]:
    """Stats of every queue; rates are over the time since ``previous`` was taken."""
    now = time.monotonic()
    prev_t, prev = previous or (now, {})
    dt = now - prev_t
    out = []
    snapshot: dict[MessageQueue, tuple[int, int]] = {}
    for mq, pq in sorted(process_queues.items()):
        pulled0, consumed0 = prev.get(mq, (0, 0))
        snapshot[mq] = (pq.pulled_total, pq.consumed_total)
        out.append(
            QueueStats(
                queue=mq,
                cached=pq.cached_count,
                cached_bytes=pq.cached_bytes,
                running=pq.handler_calls(),
                committed_offset=pq.tracker.committable(),
                next_offset=pq.tracker.next_offset,
                pulled=pq.pulled_total,
                consumed=pq.consumed_total,
                pull_rate=(pq.pulled_total - pulled0) / dt if dt > 0 else 0.0,
                consume_rate=(pq.consumed_total - consumed0) / dt if dt > 0 else 0.0,
                undecodable=pq.undecodable_total,
                pull_idle=now - (pq.last_pull_completed or pq.created_at),
            )
        )
    return out, (now, snapshot)
