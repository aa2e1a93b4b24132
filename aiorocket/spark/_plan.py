"""Driver-side planning: resolve offset specs against the brokers, build queue ranges
and the Spark partitions (:class:`QueueSplit`) that carry them to the executors."""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql.datasource import InputPartition

from aiorocket.client.instance import ClientInstance
from aiorocket.errors import ConfigError
from aiorocket.message import MessageQueue
from aiorocket.spark import _broker
from aiorocket.spark._offsets import Offsets, Range, split_ranges
from aiorocket.spark._options import EARLIEST, LATEST, OffsetSpec, ReadOptions


@dataclass(frozen=True)
class QueueSplit(InputPartition):
    """One Spark task: offsets ``[start, end)`` of one queue."""

    mq: MessageQueue
    start: int
    end: int

    @classmethod
    def of(cls, r: Range) -> QueueSplit:
        return cls(r.mq, r.start, r.end)


async def resolve(
    client: ClientInstance, spec: OffsetSpec, queues: list[MessageQueue], group: str
) -> Offsets:
    """The offset ``spec`` means for each of ``queues``."""
    named = set(spec.offsets)
    stray = sorted(str(mq) for mq in named - set(queues))
    if stray:
        raise ConfigError(f"option {spec.option} names queues outside the subscription: {stray}")
    if spec.kind == "earliest":
        return await _broker.min_offsets(client, queues)
    if spec.kind == "latest":
        return await _broker.max_offsets(client, queues)
    if spec.kind == "timestamp":
        return await _broker.offsets_for_times(client, {mq: spec.timestamp for mq in queues})
    if spec.kind == "group":
        committed = await _broker.group_offsets(client, group, queues)
        missing = [mq for mq, v in committed.items() if v is None]
        out = {mq: v for mq, v in committed.items() if v is not None}
        out.update(await _broker.min_offsets(client, missing))
        return out
    values = {mq: spec.offsets.get(mq, spec.default) for mq in queues}
    if spec.kind == "timestamps":
        stamped = {mq: v for mq, v in values.items() if v >= 0}
        out = await _broker.offsets_for_times(client, stamped)
    else:
        out = {mq: v for mq, v in values.items() if v >= 0}
    out.update(await _broker.min_offsets(client, [mq for mq, v in values.items() if v == EARLIEST]))
    out.update(await _broker.max_offsets(client, [mq for mq, v in values.items() if v == LATEST]))
    return out


async def batch_ranges(client: ClientInstance, opts: ReadOptions) -> list[Range]:
    """The ranges of a batch read: ``[starting, ending)`` of every subscribed queue."""
    queues = await _broker.resolve_queues(client, opts.subscription)
    start = await resolve(client, opts.starting, queues, opts.group)
    end = await resolve(client, opts.ending, queues, opts.group)
    ranges = [Range(mq, start[mq], end[mq]) for mq in queues]
    backwards = [r for r in ranges if r.end < r.start]
    if backwards:
        # Spark's Kafka source fails the same way rather than read nothing for the queue.
        shown = "; ".join(f"queue {r.mq}: starting offset {r.start} > ending offset {r.end}"
                          for r in backwards[:5])  # fmt: skip
        more = f" (and {len(backwards) - 5} more queues)" if len(backwards) > 5 else ""
        raise ConfigError(
            f"the ending position is before the starting position ({opts.ending.option} "
            f"before {opts.starting.option}): {shown}{more}"
        )
    return split_ranges(
        ranges, min_partitions=opts.min_partitions, max_records=opts.max_records_per_partition
    )
