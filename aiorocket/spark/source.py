"""``spark.read.format("rocketmq")`` and ``spark.readStream.format("rocketmq")``.

Spark plans in Python processes of their own on the driver, one for each kind of
planning call (its lookup of ``pyspark_*`` sources, ``schema()``, the writer, the
stream reader, the commit), and each imports this module afresh. So it imports what planning needs
and no more: the executors' reading (``_read``: pyarrow) and the sink (``sink``: the
producer) are imported where they are used, not here.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from aiorocket._log import get_logger
from aiorocket.client.instance import ClientInstance
from aiorocket.errors import DataLossError
from aiorocket.message import MessageQueue
from aiorocket.spark import _broker
from aiorocket.spark._offsets import Offsets, Range, from_json, rate_limit, split_ranges, to_json
from aiorocket.spark._options import ReadOptions, parse_read, parse_write
from aiorocket.spark._plan import QueueSplit, batch_ranges, resolve
from aiorocket.spark._runtime import call
from aiorocket.spark._schema import SCHEMA, check_schema

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "RocketMQBatchReader",
    "RocketMQDataSource",
    "RocketMQStreamReader",
    "T",
    "log",
]

log = get_logger("spark")
T = TypeVar("T")


class RocketMQDataSource(DataSource):
    """The ``rocketmq`` format: batch and streaming reads, batch and streaming writes.

    Options are documented in ``docs/spark.md``; they are checked when the reader or
    writer is created, so a mistake fails ``load()``, ``save()`` or ``start()``.
    """

    @classmethod
    def name(cls) -> str:
        return "rocketmq"

    def schema(self) -> StructType:
        # Called by load() (not for writes, nor with a user schema): the first chance to
        # report bad options, an unreachable NameServer or unknown topics. What depends
        # on batch vs. stream is checked when the reader is made.
        opts = parse_read(self.options, stream=None)

        async def check(client: ClientInstance) -> None:
            await _broker.resolve_queues(client, opts.subscription)

        call(check, opts.client)
        return SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return RocketMQBatchReader(parse_read(self.options, stream=False), check_schema(schema))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return RocketMQStreamReader(parse_read(self.options, stream=True), check_schema(schema))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from aiorocket.spark.sink import RocketMQWriter

        return RocketMQWriter(parse_write(self.options, stream=False), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from aiorocket.spark.sink import RocketMQStreamWriter

        return RocketMQStreamWriter(parse_write(self.options), schema)


class RocketMQBatchReader(DataSourceReader):
    """Plans on creation (the driver), so bad topics or offsets fail ``load()``."""

    def __init__(self, opts: ReadOptions, schema: StructType) -> None:
        self.opts = opts
        self.schema = schema

        async def plan(client: ClientInstance) -> list[Range]:
            return await batch_ranges(client, opts)

        self.ranges = call(plan, opts.client)

    def partitions(self) -> Sequence[InputPartition]:
        return [QueueSplit.of(r) for r in self.ranges]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        from aiorocket.spark._read import read_split

        return read_split(self.opts, self.schema, partition)


class RocketMQStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reads. Offsets: ``{"topic": {"broker": {"queueId": next_offset}}}``.

    The driver-side methods run in one long-lived process per query, so ``self`` keeps
    the AvailableNow target and the latest offsets seen between calls.
    """

    def __init__(self, opts: ReadOptions, schema: StructType) -> None:
        self.opts = opts
        self.schema = schema
        self._target: Offsets | None = None
        self._latest: Offsets | None = None
        self._committed: dict[str, Any] | None = None
        # A bad subscription or start fails start(), not the first trigger.
        self._initial: dict[str, Any] = self._call(self._resolve_initial)

    def _call(self, fn: Callable[[ClientInstance], Awaitable[T]]) -> T:
        return call(fn, self.opts.client)

    async def _queues(self, client: ClientInstance) -> list[MessageQueue]:
        return await _broker.resolve_queues(client, self.opts.subscription)

    async def _resolve_initial(self, client: ClientInstance) -> dict[str, Any]:
        queues = await self._queues(client)
        return to_json(await resolve(client, self.opts.starting, queues, self.opts.group))

    async def _max(self, client: ClientInstance) -> Offsets:
        return await _broker.max_offsets(client, await self._queues(client))

    def initialOffset(self) -> dict[str, Any]:
        return self._initial

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.opts.max_offsets_per_trigger
        return ReadMaxRows(n) if n else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._call(self._max)

    def latestOffset(self, start: dict[str, Any] | None = None,
                     limit: ReadLimit | None = None) -> dict[str, Any]:  # fmt: skip
        if start:
            # Spark asks for the next batch's end only once the previous batch committed,
            # so ``start`` is processed: the group shows it even when no batch follows
            # (the last one of an AvailableNow run, an idle stream), where commit() is
            # not called.
            self.commit(start)
        begin = from_json(start) if start else from_json(self._initial)
        latest: Offsets = self._call(self._max)
        self._latest = dict(latest)
        if self._target is not None:
            # AvailableNow: nothing beyond what existed when the query started.
            cap = self._target
            latest = {mq: min(v, cap[mq]) for mq, v in latest.items() if mq in cap}
        for mq, offset in begin.items():
            latest.setdefault(mq, offset)  # a queue gone from the route waits where it was
        if isinstance(limit, ReadMaxRows):
            base = {mq: begin.get(mq, 0) for mq in latest}  # new queues start at 0
            latest = rate_limit(base, latest, limit.max_rows)
        return to_json(latest)

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return None if self._latest is None else to_json(self._latest)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        begin, until = from_json(start), from_json(end)
        ranges = []
        for mq, stop in until.items():
            first = begin.get(mq, 0)
            if stop < first:
                what = (f"queue {mq} went back from offset {first} to {stop}: the topic was "
                        "deleted and re-created, or the queue was reset")  # fmt: skip
                if self.opts.fail_on_data_loss:
                    raise DataLossError(
                        f"{what}. Some data may have been lost. If you want the query to go "
                        "on (reading the queue again from its start), set the option "
                        "failOnDataLoss to false."
                    )
                log.warning("spark_data_loss", queue=str(mq), previous=first, now=stop)
                first = 0
            ranges.append(Range(mq, first, stop))
        parts = split_ranges(
            ranges,
            min_partitions=self.opts.min_partitions,
            max_records=self.opts.max_records_per_partition,
        )
        return [QueueSplit.of(r) for r in parts]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        from aiorocket.spark._read import read_split

        return read_split(self.opts, self.schema, partition)

    def commit(self, end: dict[str, Any]) -> None:
        group = self.opts.commit_group
        if group is None or end == self._committed:
            return
        offsets = from_json(end)

        async def commit(client: ClientInstance) -> None:
            await _broker.commit_offsets(client, group, offsets)

        try:
            self._call(commit)
            self._committed = end
        except Exception as exc:  # monitoring only: the checkpoint is the truth
            log.warning("spark_group_commit_failed", group=group, error=str(exc))

    def stop(self) -> None:
        pass
