"""The source's schema: the columns a read has, and a user's narrower choice of them.

A user may pass a narrower schema (any subset of these columns, same types) with
``.schema(...)``: only those columns are built (``_arrow``), which saves the work for
wide bodies or properties nobody reads.

Planning imports this module (``schema()``, ``reader()`` in Spark's short-lived planner
processes): it needs pyspark's types only, not pyarrow, which ``_arrow`` brings in on
the executors.
"""

from __future__ import annotations

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
