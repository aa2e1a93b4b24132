"""The source's schema and the conversion of pulled messages into Arrow record batches.

A user may pass a narrower schema (any subset of these columns, same types) with
``.schema(...)``: only those columns are built, which saves the work for wide bodies
or properties nobody reads.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    BinaryType,
    DataType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from aiorocket.errors import ConfigError
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

_STRING, _INT, _LONG = StringType(), IntegerType(), LongType()
_TS, _BINARY = TimestampType(), BinaryType()

SCHEMA = StructType([
    StructField("topic", _STRING, False),
    StructField("brokerName", _STRING, False),
    StructField("queueId", _INT, False),
    StructField("queueOffset", _LONG, False),
    StructField("msgId", _STRING, False),
    StructField("tags", _STRING, True),
    StructField("keys", _STRING, True),
    StructField("body", _BINARY, False),
    StructField("properties", MapType(_STRING, _STRING, False), False),
    StructField("bornTimestamp", _TS, False),
    StructField("storeTimestamp", _TS, False),
    StructField("bornHost", _STRING, False),
    StructField("storeHost", _STRING, False),
    StructField("reconsumeTimes", _INT, False),
    StructField("flag", _INT, False),
])  # fmt: skip


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


def _same_type(a: DataType, b: DataType) -> bool:
    if isinstance(a, MapType) and isinstance(b, MapType):
        return a.keyType == b.keyType and a.valueType == b.valueType
    return type(a) is type(b)


def check_schema(schema: StructType) -> StructType:
    """``schema`` if every column is one of ours with our type; else a clear error."""
    ours = {f.name: f for f in SCHEMA.fields}
    for f in schema.fields:
        known = ours.get(f.name)
        if known is None:
            raise ConfigError(
                f"column {f.name!r} is not provided by the rocketmq source; it has "
                + ", ".join(ours)
            )
        if not _same_type(f.dataType, known.dataType):
            raise ConfigError(f"column {f.name!r} has type {known.dataType.simpleString()}, "
                              f"not {f.dataType.simpleString()}")  # fmt: skip
    return schema


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
