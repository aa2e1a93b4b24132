"""Message trace: the records the RocketMQ Dashboard and ``mqadmin queryMsgTraceById`` read.

Clients that trace (Java's ``enableMsgTrace``) write what happened to each message to
a trace topic (``RMQ_SYS_TRACE_TOPIC`` by default, or one of the user's): a ``Pub``
record per send, a ``SubBefore`` and a ``SubAfter`` record per handler call, an
``EndTransaction`` record per transaction end. A record is a line of fields separated
by ``\\x01``, ended by ``\\x02``; several records share one trace message, whose keys
(the broker's key index) are the traced messages' ids and keys, so a lookup of a
message id by key finds them. The field order is the 4.x text format of the Java
client (``TraceDataEncoder``), which the tools decode by position.

Here the format (``pub``, ``sub_before``, ``sub_after``, ``end_transaction``,
``decode``) and the ``Tracer``, which both clients own when tracing is on: the send
and handler paths hand it records (``append``: never waits, never raises); a full
buffer drops a record and counts it (``dropped``). Its one background task batches the
buffered records into trace messages and sends them through a ``TraceSender``, the
transport's part (``aiorocket.client.trace`` over remoting, ``aiorocket.grpc._trace``
over gRPC). A failed trace send is logged and counted (``failed``), never raised: the
message path neither waits for nor fails with its traces.
"""

from __future__ import annotations

import contextlib
import itertools
import time
from collections import deque
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import anyio
import anyio.abc

from aiorocket._log import get_logger
from aiorocket._unique_id import create_unique_id
from aiorocket._validate import check_topic
from aiorocket.errors import ConfigError

__all__ = [
    "DEFAULT_REGION",
    "TRACE_TOPIC",
    "CallTrace",
    "TraceRecord",
    "TraceSender",
    "Tracer",
    "check_trace_settings",
    "check_trace_transport",
    "decode",
    "end_transaction",
    "pub",
    "sub_after",
    "sub_before",
]

#: the topic Java clients and the tools use unless told another (a system topic: the
#: broker creates it with ``traceTopicEnable=true``; the Proxy refuses system topics,
#: so a gRPC client traces to a topic of the user's)
TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"
#: the broker's ``regionId`` unless configured (its ``MSG_REGION`` property)
DEFAULT_REGION = "DefaultRegion"
_FIELD = "\x01"
_END = "\x02"
#: Java's trace message limit (its trace producer's ``maxMessageSize``)
MAX_TRACE_BODY = 128_000
#: characters of the keys of one trace message (its KEYS property: the broker's limit on
#: a message's properties is 32 KiB)
MAX_TRACE_KEYS = 16_000
#: seconds between two warnings of failed trace sends: a trace topic that does not exist
#: (the broker's default: traceTopicEnable=false) fails every batch, up to hundreds a
#: second; one warning then says how many failed since the last
FAILURE_LOG_INTERVAL = 60.0

#: MessageType ordinals of the format
MSG_NORMAL, MSG_TRANS_HALF, MSG_TRANS_COMMIT, MSG_DELAY = 0, 1, 2, 3
#: ConsumeReturnType ordinals (SubAfter's context code)
CONSUME_SUCCESS, CONSUME_TIME_OUT, CONSUME_EXCEPTION, CONSUME_RETURN_NULL, CONSUME_FAILED = range(5)


@dataclass(frozen=True, slots=True)
class TraceRecord:
    """One encoded record and the keys its trace message must be found by."""

    text: str
    keys: tuple[str, ...]


@dataclass(slots=True)
class CallTrace:
    """One traced consumption (a handler call, or a message an ``async for`` loop was
    handed): its request id, start (``time.monotonic``) and traced messages (id, keys),
    kept until its ``SubAfter``."""

    request_id: str
    began: float
    messages: list[tuple[str, list[str]]]


def _keys(msg_id: str, keys: Sequence[str]) -> tuple[str, ...]:
    return (msg_id, *keys) if keys else (msg_id,)


def _clean(value: str) -> str:
    """A user's text (a key, a tag): the separators inside it would shift every later
    field."""
    if _FIELD in value or _END in value:
        return value.replace(_FIELD, " ").replace(_END, " ")
    return value


def _line(*fields: object) -> str:
    return _FIELD.join(_text(f) for f in fields) + _END


def _text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return _clean(str(value))


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def pub(
    *, group: str, topic: str, msg_id: str, tags: str | None, keys: Sequence[str],
    store_host: str, body_length: int, cost_ms: int, msg_type: int, offset_msg_id: str,
    success: bool, timestamp: int, region: str = DEFAULT_REGION,
) -> TraceRecord:  # fmt: skip
    """A send's record (``timestamp``: when the send began)."""
    text = _line(
        "Pub", timestamp, region, group, topic, msg_id, tags or "", " ".join(keys),
        store_host, body_length, cost_ms, msg_type, offset_msg_id, success,
    )  # fmt: skip
    return TraceRecord(text, _keys(msg_id, keys))


def sub_before(
    *, group: str, request_id: str, msg_id: str, retry_times: int, keys: Sequence[str],
    timestamp: int, region: str = DEFAULT_REGION,
) -> TraceRecord:  # fmt: skip
    """A message handed to the handler (one per message of the call)."""
    # f-strings, not _line: two of these per consumed message (the hot path)
    text = (f"SubBefore\x01{timestamp}\x01{_clean(region)}\x01{_clean(group)}\x01{request_id}"
            f"\x01{msg_id}\x01{retry_times}\x01{_clean(' '.join(keys))}\x02")  # fmt: skip
    return TraceRecord(text, _keys(msg_id, keys))


def sub_after(
    *, group: str, request_id: str, msg_id: str, cost_ms: int, success: bool,
    keys: Sequence[str], context_code: int, timestamp: int,
) -> TraceRecord:  # fmt: skip
    """The handler's outcome for one message (``timestamp``: when it ended)."""
    ok = "true" if success else "false"
    text = (f"SubAfter\x01{request_id}\x01{msg_id}\x01{cost_ms}\x01{ok}"
            f"\x01{_clean(' '.join(keys))}\x01{context_code}\x01{timestamp}"
            f"\x01{_clean(group)}\x02")  # fmt: skip
    return TraceRecord(text, _keys(msg_id, keys))


def end_transaction(
    *, group: str, topic: str, msg_id: str, tags: str | None, keys: Sequence[str],
    store_host: str, transaction_id: str, state: str, from_check: bool, timestamp: int,
    region: str = DEFAULT_REGION,
) -> TraceRecord:  # fmt: skip
    """A transaction's end (``state``: COMMIT_MESSAGE, ROLLBACK_MESSAGE or UNKNOW)."""
    text = _line(
        "EndTransaction", timestamp, region, group, topic, msg_id, tags or "", " ".join(keys),
        store_host, MSG_TRANS_COMMIT, transaction_id, state, from_check,
    )  # fmt: skip
    return TraceRecord(text, _keys(msg_id, keys))


#: the field names of each record type, by position (the Java decoder's)
_NAMES = {
    "Pub": ("type", "timestamp", "region", "group", "topic", "msg_id", "tags", "keys",
            "store_host", "body_length", "cost_ms", "msg_type", "offset_msg_id", "success",
            "client_host"),
    "SubBefore": ("type", "timestamp", "region", "group", "request_id", "msg_id",
                  "retry_times", "keys"),
    "SubAfter": ("type", "request_id", "msg_id", "cost_ms", "success", "keys",
                 "context_code", "timestamp", "group"),
    "EndTransaction": ("type", "timestamp", "region", "group", "topic", "msg_id", "tags",
                       "keys", "store_host", "msg_type", "transaction_id",
                       "transaction_state", "from_check"),
    "Recall": ("type", "timestamp", "region", "group", "topic", "msg_id", "success"),
}  # fmt: skip


def decode(body: str) -> list[dict[str, str]]:
    """The records of a trace message's body, each a dict of named fields (any
    client's: Java 13/14/15-field ``Pub`` records included); unknown types are kept as
    ``{"type": ..., "fields": ...}``."""
    out: list[dict[str, str]] = []
    for line in body.split(_END):
        if not line:
            continue
        parts = line.split(_FIELD)
        names = _NAMES.get(parts[0])
        if names is None:
            out.append({"type": parts[0], "fields": " ".join(parts[1:])})
            continue
        if parts[0] == "Pub" and len(parts) == 13:  # the oldest: no offset message id
            parts = [*parts[:12], "", parts[12]]
        out.append(dict(zip(names, parts, strict=False)))
    return out


def check_trace_settings(trace: object, topic: str) -> None:
    """The ``trace`` and ``trace_topic`` settings of either client."""
    if not isinstance(trace, bool):
        raise ConfigError(f"trace must be True or False, got {trace!r}")
    check_topic(topic)


def check_trace_transport(trace: bool, topic: str, transport: str) -> None:
    """Over gRPC the trace topic must be the user's: the Proxy refuses system topics
    ("cannot access system topic"), so every trace send would fail."""
    if trace and transport == "grpc" and topic.startswith("RMQ_SYS_"):
        raise ConfigError(
            f"trace_topic {topic!r} is a system topic, which the Proxy refuses: over gRPC "
            "trace to a topic of your own (trace_topic=...; docs/trace.md)"
        )


class TraceSender(Protocol):
    """A transport's way to store one trace message (topic, body, keys)."""

    async def send_trace(self, topic: str, body: bytes, keys: Sequence[str]) -> None: ...


@dataclass(slots=True)
class _Batch:
    texts: list[str] = field(default_factory=list)
    keys: dict[str, None] = field(default_factory=dict)
    size: int = 0
    keys_size: int = 0


class Tracer:
    """Buffers trace records and sends them in the background (module docstring).

    Parameters
    ----------
    group:
        The producer or consumer group the records name.
    topic:
        The trace topic.
    buffer:
        Records held at most (Java: 2048); more are dropped and counted.
    batch:
        Records per trace message at most (Java: 20 trace contexts; 100 here: a consumer
        keeping up with 15k msg/s writes 30k records/s, see benchmarks/README.md).
    concurrency:
        Trace messages under way at once (Java: 2-4 sender threads).
    interval:
        Seconds a record may wait for others before it is sent anyway.
    send_timeout:
        Bound of one trace send.
    """

    def __init__(
        self, group: str, topic: str = TRACE_TOPIC, *, buffer: int = 2048, batch: int = 100,
        concurrency: int = 4, interval: float = 1.0, send_timeout: float = 5.0,
    ) -> None:  # fmt: skip
        self.group = group
        self.topic = topic
        self.buffer = buffer
        self.batch = batch
        self.concurrency = concurrency
        self._closing = False
        self.interval = interval
        self.send_timeout = send_timeout
        #: records dropped because the buffer was full (or the tracer was not running)
        self.dropped = 0
        #: records whose trace message could not be stored
        self.failed = 0
        #: records stored
        self.sent = 0
        #: when failed sends were last logged at WARNING, and records failed since
        self._warned_at: float | None = None
        self._unlogged_failures = 0
        self._records: deque[TraceRecord] = deque()
        #: made when running (an event needs a running loop; a client is built without one)
        self._wake: anyio.Event | None = None
        self._running = False
        self.log = get_logger("trace", group=group, trace_topic=topic)

    # -- the message path's side: never waits, never raises ------------------------------

    def append(self, record: TraceRecord) -> None:
        if not self._running or len(self._records) >= self.buffer:
            self.dropped += 1
            return
        self._records.append(record)
        if len(self._records) >= self.batch and self._wake is not None:
            self._wake.set()

    def extend(self, records: Iterable[TraceRecord]) -> None:
        for record in records:
            self.append(record)

    # -- the background side ------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def running(self, sender: TraceSender) -> AsyncIterator[Tracer]:
        """Run the sending task while inside; on the way out, let it send what is
        buffered (bounded by ``send_timeout``, shielded), then stop it. What it could
        not send by then is counted as dropped (or failed, if under way)."""
        self._wake = anyio.Event()
        self._closing = False
        stopped = anyio.Event()
        try:
            async with anyio.create_task_group() as tg:
                self._running = True
                tg.start_soon(self._run, sender, stopped)
                try:
                    yield self
                finally:
                    self._running = False  # records of the close's last steps are dropped
                    self._closing = True
                    self._wake.set()
                    with anyio.CancelScope(shield=True), anyio.move_on_after(self.send_timeout):
                        await stopped.wait()
                    tg.cancel_scope.cancel()
        finally:
            self.dropped += len(self._records)
            self._records.clear()

    async def _run(self, sender: TraceSender, stopped: anyio.Event) -> None:
        # Up to ``concurrency`` trace messages under way (Java: a pool of 2-4 threads);
        # while all are, records wait in the buffer, and a full buffer drops them.
        slots = anyio.Semaphore(self.concurrency)
        try:
            async with anyio.create_task_group() as sends:
                while True:
                    if len(self._records) < self.batch and not self._closing:
                        assert self._wake is not None
                        with anyio.move_on_after(self.interval):
                            await self._wake.wait()
                        self._wake = anyio.Event()
                    while self._records:
                        await slots.acquire()
                        sends.start_soon(self._send, sender, self._take(), slots)
                    if self._closing:
                        break
        finally:  # also when cancelled with its owner: the close then waits for nothing
            stopped.set()

    def _take(self) -> _Batch:
        """One trace message's records: up to ``batch``, within ``MAX_TRACE_BODY`` and
        ``MAX_TRACE_KEYS`` (the keys property)."""
        out = _Batch()
        while self._records and len(out.texts) < self.batch:
            record = self._records[0]
            size = len(record.text.encode())
            keys = sum(len(k) + 1 for k in record.keys)
            if out.texts and (
                out.size + size > MAX_TRACE_BODY or out.keys_size + keys > MAX_TRACE_KEYS
            ):
                break
            self._records.popleft()
            out.texts.append(record.text)
            out.keys.update(dict.fromkeys(record.keys))
            out.size += size
            out.keys_size += keys
        return out

    async def _send(self, sender: TraceSender, out: _Batch, slots: anyio.Semaphore) -> None:
        body = "".join(out.texts).encode()
        try:
            with anyio.fail_after(self.send_timeout):
                await sender.send_trace(self.topic, body, list(out.keys))
        except anyio.get_cancelled_exc_class():
            self.failed += len(out.texts)
            raise
        except Exception as exc:  # a trace never fails the client
            self.failed += len(out.texts)
            self._failed_send(len(out.texts), exc)
        else:
            self.sent += len(out.texts)
        finally:
            slots.release()

    def _failed_send(self, records: int, exc: Exception) -> None:
        """Log a failed trace send: at WARNING at most once per ``FAILURE_LOG_INTERVAL``
        (with the records failed since the last warning), else at DEBUG."""
        now = time.monotonic()
        if self._warned_at is not None and now - self._warned_at < FAILURE_LOG_INTERVAL:
            self._unlogged_failures += records
            self.log.debug("trace_send_failed", records=records, error=repr(exc))
            return
        self.log.warning("trace_send_failed", records=records, error=repr(exc),
                         failed_since_last_warning=self._unlogged_failures)  # fmt: skip
        self._warned_at, self._unlogged_failures = now, 0

    def stats(self) -> dict[str, Any]:
        return {"sent": self.sent, "dropped": self.dropped, "failed": self.failed,
                "buffered": len(self._records)}  # fmt: skip


_request_prefix = ""
_request_seq = itertools.count()


def request_id() -> str:
    """A handler call's id, shared by its SubBefore and SubAfter records: 32 hex chars
    as Java's (a unique id's first 20 for this process, then a counter: cheaper than a
    unique id per call)."""
    global _request_prefix
    if not _request_prefix:
        _request_prefix = create_unique_id()[:20]
    return f"{_request_prefix}{next(_request_seq) & 0xFFFFFFFFFFFF:012X}"
