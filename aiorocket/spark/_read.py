"""The executor side of reading: pull one queue range, yield Arrow record batches.

Imported by ``read()`` only (``source`` imports it there): it brings pyarrow in.
"""

from __future__ import annotations

import concurrent.futures
from collections import deque
from collections.abc import Iterator
from typing import TYPE_CHECKING

from pyspark.sql.datasource import InputPartition
from pyspark.sql.types import StructType

from aiorocket.message import MessageExt
from aiorocket.spark._arrow import BatchBuilder
from aiorocket.spark._broker import Segment, pull_segment
from aiorocket.spark._options import ReadOptions
from aiorocket.spark._plan import QueueSplit
from aiorocket.spark._runtime import runtime

if TYPE_CHECKING:
    import pyarrow as pa

#: rows per record batch handed to Spark (pulls bring 32 at a time).
ROWS_PER_BATCH = 4096


def read_split(
    opts: ReadOptions, schema: StructType, split: InputPartition
) -> Iterator[pa.RecordBatch]:
    """Record batches of every message of ``split`` passing the filter, in offset order.

    When a read plans no partitions (nothing to read: an empty topic, an empty range,
    a trigger without new messages) Spark still runs one task and hands it a
    placeholder partition of its own: that task reads nothing.

    ``opts.pull_depth`` pulls of ``opts.pull_batch_size`` offsets each are in flight on
    the process's event loop while Spark consumes the batches built so far.
    """
    if not isinstance(split, QueueSplit):
        return
    rt = runtime()
    client = rt.client(opts.client)
    builder = BatchBuilder(schema, opts.include_system_properties)
    step = opts.pull_batch_size
    bounds = iter(range(split.start, split.end, step))
    pending: deque[concurrent.futures.Future[Segment]] = deque()

    def submit_next() -> None:
        for lo in bounds:
            pending.append(rt.submit(pull_segment(
                client, opts.group, split.mq, lo, min(lo + step, split.end), opts.filter,
                fail_on_data_loss=opts.fail_on_data_loss, batch=step,
            )))  # fmt: skip
            return

    try:
        for _ in range(opts.pull_depth):
            submit_next()
        rows: list[MessageExt] = []
        while pending:
            segment = pending.popleft().result()
            submit_next()
            rows.extend(segment.messages)
            if len(rows) >= ROWS_PER_BATCH:
                yield builder.build(rows)
                rows = []
        if rows:
            yield builder.build(rows)
    finally:
        for fut in pending:
            fut.cancel()
