"""Pulled messages into Arrow record batches of the read's schema (executors only).

The source's pyarrow (and pyspark's Arrow types) comes in here, imported by ``_read``
on the executors that run ``read()``: Spark's planner processes on the driver, which
only plan, never import it (a cold pyarrow with numpy costs them 0.3-1.5 s of CPU each).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from aiorocket.message import (
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    MessageExt,
)

#: properties the client or broker set on every message, or that have their own column:
#: left out of ``properties`` unless ``includeSystemProperties`` is true.
SYSTEM_PROPERTIES = frozenset({
    PROPERTY_TAGS, PROPERTY_KEYS, PROPERTY_UNIQ_KEY, "WAIT", "CLUSTER", "MIN_OFFSET",
    "MAX_OFFSET", "TRACE_ON", "MSG_REGION", "CONSUME_START_TIME", "__BORNHOST",
})  # fmt: skip


def _props(include_system: bool) -> Callable[[MessageExt], Any]:
    if include_system:
        return lambda m: list(m.properties.items())
    return lambda m: [(k, v) for k, v in m.properties.items() if k not in SYSTEM_PROPERTIES]


def _keys(m: MessageExt) -> str | None:
    return m.properties.get(PROPERTY_KEYS)


_GETTERS: dict[str, Callable[[MessageExt], Any]] = {
    "topic": lambda m: m.topic,
    "brokerName": lambda m: m.broker_name,
    "queueId": lambda m: m.queue_id,
    "queueOffset": lambda m: m.queue_offset,
    "msgId": lambda m: m.msg_id,
    "tags": lambda m: m.tags,
    "keys": _keys,
    "body": lambda m: m.body,
    "bornTimestamp": lambda m: m.born_timestamp * 1000,
    "storeTimestamp": lambda m: m.store_timestamp * 1000,
    "bornHost": lambda m: m.born_host,
    "storeHost": lambda m: m.store_host,
    "reconsumeTimes": lambda m: m.reconsume_times,
    "flag": lambda m: m.flag,
}


class BatchBuilder:
    """Builds record batches of ``schema`` from messages (on executors; no JVM needed)."""

    def __init__(self, schema: StructType, include_system_properties: bool) -> None:
        self.arrow_schema = to_arrow_schema(schema, timezone="UTC")
        getters = dict(_GETTERS, properties=_props(include_system_properties))
        self._columns = [(getters[f.name], self.arrow_schema.field(f.name).type)
                         for f in schema.fields]  # fmt: skip

    def build(self, messages: Sequence[MessageExt]) -> pa.RecordBatch:
        arrays = [pa.array([get(m) for m in messages], type=t) for get, t in self._columns]
        return pa.RecordBatch.from_arrays(arrays, schema=self.arrow_schema)
