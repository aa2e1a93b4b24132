"""``df.write.format("rocketmq")`` and ``df.writeStream.format("rocketmq")``.

At-least-once: a failed task is retried by Spark and may send its rows again. Each
message carries a deterministic id, ``<query>-<batch>-<partition>-<row>``, in the
property named by ``dedupKeyProperty`` (default ``sparkDedupKey``), so consumers can
drop the copies: a retried task, or a micro-batch replayed after a restart from the
checkpoint, produces the same ids for the same rows.

Making a writer (``writer()``, ``streamWriter()``: a planner process of Spark's on the
driver) checks the columns and the topic and sends nothing: the producer and the
exactly-once machinery (``_txn``) are imported by the tasks and the commit that use them.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterable, Awaitable, Callable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

import anyio
from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructType,
)

from aiorocket._log import get_logger
from aiorocket.client.instance import ClientInstance
from aiorocket.errors import ConfigError, TopicNotExistError
from aiorocket.message import Message
from aiorocket.spark._flow import hand_over
from aiorocket.spark._options import WriteOptions
from aiorocket.spark._runtime import call, runtime

if TYPE_CHECKING:
    import pyarrow as pa

    from aiorocket.producer.producer import Producer
    from aiorocket.producer.transaction import HalfMessage

__all__ = [
    "RocketMQStreamWriter",
    "RocketMQWriter",
    "SinkCommit",
    "check_columns",
    "log",
]

log = get_logger("spark")
#: how long past ``transactionTimeoutSeconds`` a commit waits for the broker's
#: check-backs to commit rows whose end failed (it checks every 30 s by default).
_CHECK_BACK_WAIT = 300.0

_STR = StringType()
#: accepted column -> accepted types (a description for errors).
_COLUMNS: dict[str, tuple[tuple[DataType, ...], str]] = {
    "body": ((BinaryType(), StringType()), "binary or string"),
    "topic": ((_STR,), "string"),
    "tags": ((_STR,), "string"),
    "keys": ((_STR, ArrayType(_STR)), "string or array<string>"),
    "properties": ((MapType(_STR, _STR),), "map<string,string>"),
    "delayLevel": ((IntegerType(), LongType()), "int or bigint"),
    "deliverTimeMs": ((IntegerType(), LongType()), "int or bigint (epoch milliseconds)"),
}


def _accepts(have: DataType, want: DataType) -> bool:
    if isinstance(have, MapType) and isinstance(want, MapType):
        return have.keyType == want.keyType and have.valueType == want.valueType
    if isinstance(have, ArrayType) and isinstance(want, ArrayType):
        return have.elementType == want.elementType
    return type(have) is type(want)


def check_columns(schema: StructType, opts: WriteOptions) -> None:
    """A clear error for a missing body, an unknown column or a wrong type."""
    names = [f.name for f in schema.fields]
    if "body" not in names:
        raise ConfigError(f"the rocketmq sink needs a 'body' column (binary or string); "
                          f"the DataFrame has {names}")  # fmt: skip
    if opts.topic is None and "topic" not in names:
        raise ConfigError("the rocketmq sink needs the option topic or a 'topic' column")
    delayed = [n for n in ("delayLevel", "deliverTimeMs") if n in names]
    if opts.proxy is not None and "delayLevel" in names:
        raise ConfigError("column delayLevel: delay levels exist only on the brokers' own "
                          "protocol (nameServer); through a Proxy use deliverTimeMs")  # fmt: skip
    if opts.exactly_once and delayed:
        raise ConfigError(f"column(s) {', '.join(delayed)}: RocketMQ cannot delay transactional "
                          "messages (deliveryGuarantee=exactly-once)")  # fmt: skip
    for f in schema.fields:
        spec = _COLUMNS.get(f.name)
        if spec is None:
            raise ConfigError(f"column {f.name!r} is not understood by the rocketmq sink; "
                              f"it takes {', '.join(_COLUMNS)}")  # fmt: skip
        types, described = spec
        if not any(_accepts(f.dataType, t) for t in types):
            raise ConfigError(f"column {f.name!r} must be {described}, "
                              f"not {f.dataType.simpleString()}")  # fmt: skip


def _check_topic(opts: WriteOptions) -> None:
    topic = opts.topic
    if topic is None:
        return

    if opts.proxy is not None:
        from aiorocket.spark._grpc import topic_types

        types = runtime().submit(topic_types(opts, topic)).result()
        exists = types is not None
        # The Proxy refuses a message whose type its topic does not accept.
        kind, want = ("TRANSACTION", 4) if opts.exactly_once else ("NORMAL", 1)
        if types and want not in types:
            raise ConfigError(
                f"topic {topic!r} does not take {kind} messages, which the sink sends through "
                f"the Proxy with deliveryGuarantee={'exactly' if opts.exactly_once else 'at-least'}"
                f"-once (create it with message.type={kind})"
            )
    else:

        async def route(client: ClientInstance) -> None:
            await client.namesrv.query_route(topic)

        try:
            call(route, opts.client)
            exists = True
        except TopicNotExistError:
            exists = False
    if not exists:
        raise ConfigError(f"topic {topic!r} does not exist (option topic)")


@dataclass(frozen=True)
class SinkCommit(WriterCommitMessage):
    partition: int
    count: int
    #: exactly-once: the task attempt's transaction and its half messages.
    txn: str | None = None
    halves: tuple[HalfMessage, ...] = ()
    #: exactly-once: the streaming query's id (the driver knows it only from here).
    query: str | None = None


def _messages(batch: pa.RecordBatch, opts: WriteOptions, prefix: str, first: int) -> list[Message]:
    cols = {name: batch.column(name).to_pylist() for name in batch.schema.names}
    n = batch.num_rows
    none = [None] * n
    bodies = cols["body"]
    topics = [opts.topic] * n if opts.topic else cols["topic"]
    tags, keys = cols.get("tags", none), cols.get("keys", none)
    props, delays, deliver = (
        cols.get("properties", none),
        cols.get("delayLevel", none),
        cols.get("deliverTimeMs", none),
    )
    out = []
    for i in range(n):
        body = bodies[i]
        if body is None:
            raise ConfigError(f"row {first + i} has a null body")
        topic = topics[i]
        if not topic:
            raise ConfigError(f"row {first + i} has no topic (null topic column, no option)")
        key = keys[i]
        properties = dict(props[i] or ())
        if opts.dedup_property:
            properties[opts.dedup_property] = f"{prefix}{first + i}"
        out.append(Message(
            topic,
            body.encode() if isinstance(body, str) else body,
            tags=tags[i],
            keys=(key.split() if isinstance(key, str) else [k for k in key if k]) if key else (),
            properties=properties,
            delay_level=delays[i] or 0,
            deliver_time_ms=deliver[i],
        ))  # fmt: skip
    return out


async def _send_all(producer: Producer, lists: AsyncIterable[list[Message]]) -> None:
    """Every row of a task through the producer's auto-batcher as its lists arrive: the
    batcher's requests stay full across Spark's Arrow batches."""
    async with anyio.create_task_group() as tg:
        async for messages in lists:
            for msg in messages:
                await producer.start_send(tg, msg)


async def _send_halves(
    producer: Producer, lists: AsyncIterable[list[Message]], opts: WriteOptions
) -> list[HalfMessage]:
    from aiorocket.producer.transaction import HalfMessage
    from aiorocket.spark import _txn

    async def send(msg: Message) -> HalfMessage:
        result = await producer.send_prepared(
            msg, producer_group=opts.producer_group, check_immunity=opts.txn_timeout
        )
        return HalfMessage.of(result)

    in_flight = min(producer.config.max_in_flight, _txn.HALVES_IN_FLIGHT)
    return await _txn.send_halves(lists, in_flight, send)


@dataclass(frozen=True)
class _Txn:
    """Where a task attempt's transaction belongs."""

    query: str
    batch: str
    partition: int
    attempt: int


class _Sender:
    """The executor half shared by the batch and the streaming writer."""

    def __init__(self, opts: WriteOptions, schema: StructType, write_id: str) -> None:
        check_columns(schema, opts)
        _check_topic(opts)
        self.opts = opts
        self.write_id = write_id

    def send(self, batches: Iterator[pa.RecordBatch]) -> SinkCommit:
        ctx = TaskContext.get()
        partition = ctx.partitionId() if ctx is not None else 0
        query = (ctx.getLocalProperty("sql.streaming.queryId") if ctx else None) or self.write_id
        batch_id = (ctx.getLocalProperty("streaming.sql.batchId") if ctx else None) or "0"
        prefix = f"{query}-{batch_id}-{partition}-"
        rt = runtime()
        if self.opts.exactly_once:
            attempt = ctx.taskAttemptId() if ctx is not None else 0
            txn = _Txn(query, batch_id, partition, attempt)
            return self._send_exactly_once(rt, batches, prefix, txn)
        producer = rt.producer(self.opts)
        count = 0

        def lists() -> Iterator[list[Message]]:
            nonlocal count
            for batch in batches:
                messages = _messages(batch, self.opts, prefix, count)
                count += len(messages)
                yield messages

        hand_over(rt, lists(), partial(_send_all, producer))
        return SinkCommit(partition, count)

    def _send_exactly_once(
        self, rt: Any, batches: Iterator[pa.RecordBatch], prefix: str, task: _Txn
    ) -> SinkCommit:
        from aiorocket.spark import _txn

        # Unique per task attempt: a retried task is another transaction.
        txn = f"{self.write_id}.{task.partition}.{task.attempt}"
        tag = _txn.tag(task.batch, task.query, txn)
        count = 0

        def lists() -> Iterator[list[Message]]:
            nonlocal count
            for batch in batches:
                messages = _messages(batch, self.opts, prefix, count)
                for msg in messages:
                    msg.properties[_txn.TXN_PROPERTY] = tag
                count += len(messages)
                yield messages

        send: Callable[[AsyncIterable[list[Message]]], Awaitable[list[HalfMessage]]]
        if self.opts.proxy is not None:
            from aiorocket.spark import _grpc

            send = partial(_grpc.send_halves, rt.grpc_sender(self.opts), opts=self.opts)
        else:
            send = partial(_send_halves, rt.sender(self.opts), opts=self.opts)
        halves = hand_over(rt, lists(), send)
        return SinkCommit(task.partition, len(halves), txn, tuple(halves), task.query)


class RocketMQWriter(DataSourceArrowWriter):
    def __init__(self, opts: WriteOptions, schema: StructType) -> None:
        self._sender = _Sender(opts, schema, uuid.uuid4().hex)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommit:
        return self._sender.send(iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        total = sum(m.count for m in messages if isinstance(m, SinkCommit))
        log.info("spark_write_committed", messages=total)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        sent = sum(m.count for m in messages if isinstance(m, SinkCommit))
        log.warning("spark_write_aborted", messages_sent=sent)


class RocketMQStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, opts: WriteOptions, schema: StructType) -> None:
        self._sender = _Sender(opts, schema, uuid.uuid4().hex)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommit:
        return self._sender.send(iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        opts = self._sender.opts
        if opts.exactly_once:
            self._end(messages, batchId, commit=True)
            return
        total = sum(m.count for m in messages if isinstance(m, SinkCommit))
        log.info("spark_batch_committed", batch=batchId, messages=total)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        sent = sum(m.count for m in messages if isinstance(m, SinkCommit))
        log.warning("spark_batch_aborted", batch=batchId, messages_sent=sent)
        if self._sender.opts.exactly_once:
            self._end(messages, batchId, commit=False)

    def _end(self, messages: list[WriterCommitMessage | None], batch: int, commit: bool) -> None:
        """Exactly-once: the driver ends the batch's half messages (``_txn``)."""
        from aiorocket.spark import _txn

        opts = self._sender.opts
        assert opts.txn_log is not None
        rt = runtime()
        halves = _txn.by_txn(messages)
        txn_log = _txn.TxnLog(opts.txn_log)
        if not commit:
            # Only those no record lists: Spark aborts a batch whose commit raised, also
            # after the record was written, and the rows it lists are committed.
            self._roll_back(rt, _txn.unrecorded(txn_log, batch, halves))
            return
        query = _txn.query_of(messages)
        wait = opts.txn_timeout + _CHECK_BACK_WAIT
        if opts.proxy is not None:
            from aiorocket.spark import _grpc

            producer, answers = rt.grpc_checker(opts)
            rt.run(_grpc.commit(producer, answers, batch, halves, wait, query,
                                opts.check_interval))  # fmt: skip
            return
        client, checker = rt.client(opts.client), rt.checker(opts)
        rt.run(_txn.commit(client, checker, txn_log, batch, halves, wait, query))

    def _roll_back(self, rt: Any, halves: list[HalfMessage]) -> None:
        opts = self._sender.opts
        if not halves:
            return
        if opts.proxy is not None:
            from aiorocket.spark import _grpc

            rt.run(_grpc.rollback(rt.grpc_checker(opts)[0], halves))
            return
        from aiorocket.producer.transaction import TransactionState
        from aiorocket.spark import _txn

        rollback = TransactionState.ROLLBACK
        rt.run(_txn.end_all(rt.client(opts.client), opts.producer_group, halves, rollback))
