"""Offsets as Spark stores them, rate limits, and the split of queue ranges into tasks.

A streaming offset is ``{"topic": {"brokerName": {"queueId": next_offset}}}`` (the
layout of the old rocketmq-spark connector): for every queue, the next offset to read.
Spark compares offsets as JSON *strings*, so every offset we hand out is built by
``to_json`` in sorted key order; the same positions in another key order would make
Spark run an empty micro-batch on every trigger.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from aiorocket.errors import ConfigError
from aiorocket.message import MessageQueue

Offsets = dict[MessageQueue, int]


def to_json(offsets: Mapping[MessageQueue, int]) -> dict[str, Any]:
    """The canonical nested dict of ``offsets`` (sorted topics, brokers, queue ids)."""
    out: dict[str, dict[str, dict[str, int]]] = {}
    for mq in sorted(offsets):
        out.setdefault(mq.topic, {}).setdefault(mq.broker_name, {})[str(mq.queue_id)] = int(
            offsets[mq]
        )
    return out


def from_json(obj: Mapping[str, Any]) -> Offsets:
    """Inverse of ``to_json`` (offsets read back from a checkpoint)."""
    out: Offsets = {}
    try:
        for topic, brokers in obj.items():
            for broker, queues in brokers.items():
                for qid, offset in queues.items():
                    out[MessageQueue(topic, broker, int(qid))] = int(offset)
    except (AttributeError, TypeError, ValueError) as exc:
        raise ConfigError(f"offset {obj!r} is not a rocketmq offset: {exc}") from None
    return out


def rate_limit(start: Mapping[MessageQueue, int], latest: Offsets, limit: int) -> Offsets:
    """Advance at most ``limit`` offsets in total, shared in proportion to each backlog.

    Spark's Kafka source rule: a queue's share ``limit * backlog / total`` is rounded
    down, unless it is below one, then up (so a small backlog still moves).
    """
    backlog = {mq: max(0, end - start.get(mq, end)) for mq, end in latest.items()}
    total = sum(backlog.values())
    if total <= limit:
        return dict(latest)
    out: Offsets = {}
    for mq, end in latest.items():
        begin = start.get(mq, end)
        size = backlog[mq]
        share = limit * size / total
        step = math.ceil(share) if share < 1 else math.floor(share)
        out[mq] = min(end, begin + step) if size else end
    return out


@dataclass(frozen=True, slots=True)
class Range:
    """Offsets ``[start, end)`` of one queue, read by one Spark task."""

    mq: MessageQueue
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start


def _split(r: Range, parts: int) -> list[Range]:
    parts = max(1, min(parts, r.size))
    bounds = [r.start + r.size * i // parts for i in range(parts + 1)]
    return [Range(r.mq, a, b) for a, b in itertools.pairwise(bounds) if b > a]


def split_ranges(
    ranges: Iterable[Range], *, min_partitions: int | None, max_records: int | None
) -> list[Range]:
    """One range per queue, split so that no part exceeds ``max_records`` and, when there
    are fewer than ``min_partitions`` parts, large ranges split in proportion to size."""
    out = [r for r in ranges if r.size > 0]
    if max_records:
        out = [p for r in out for p in _split(r, math.ceil(r.size / max_records))]
    if min_partitions and len(out) < min_partitions:
        total = sum(r.size for r in out)
        out = [
            p for r in out for p in _split(r, max(1, math.ceil(r.size * min_partitions / total)))
        ]
    return out
