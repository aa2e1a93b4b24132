"""Exactly-once into a topic: RocketMQ transactional messages that the driver ends.

Per micro-batch ``N`` of a streaming write with ``deliveryGuarantee=exactly-once``:

* Each task attempt sends every row as a *half message* (stored, invisible to
  consumers) of producer group ``G``, with the property ``sparkTxn = "N:<query>:<txn>"``
  where ``<query>`` is Spark's id of the streaming query (the same across restarts from
  one checkpoint) and ``<txn>`` names the task attempt, and no resend of a failed send
  (a resend could leave a second stored copy); a failure fails the task and Spark
  retries it as a new attempt, i.e. a new ``<txn>``. Its commit message carries
  ``<query>``, ``<txn>`` and the handle of every half message
  (:class:`~aiorocket.producer.transaction.HalfMessage`).
* The driver's ``commit(messages, N)`` first writes the *commit record* of batch ``N``
  (the query, the committed ``<txn>`` s and their rows' ids) atomically to the
  transaction log (by default ``<checkpointLocation>/rocketmq-sink``), then ends every
  half message
  with COMMIT (confirmed by the broker). If a record of ``N`` is already there, an
  earlier run committed the batch and died before Spark logged it: this attempt's half
  messages are ended with ROLLBACK instead.
* ``abort`` ends with ROLLBACK the half messages it knows that no record lists
  (:func:`unrecorded`: it reads the record first). Spark aborts a batch whose commit
  raised, also after the record was written: those rows are committed, and are left to
  the check-backs and the replay's wait. Those of failed task attempts are never
  committed and the broker's check-back learns that (below).
* One log belongs to one query: a commit refuses (``ConfigError``) a log whose records
  name another query, and a check-back for another query's half message (a shared
  ``producerGroup``) is answered UNKNOWN, so the broker asks again, maybe its owner.
  Records and tags of versions before the query id (``"N:<txn>"``, no ``query`` in the
  record) are read as this query's.
* Every half message carries ``CHECK_IMMUNITY_TIME_IN_SECONDS = transactionTimeoutSeconds``
  (T): before T the broker does not check it back; after T it refuses an end that is
  not a check-back answer. So the driver's own end and a check-back can never both
  commit one message.
* A check-back (after T, for a half message nobody ended, or a copy the broker put back
  while waiting) is answered by :func:`verdict` from the records: a batch without a
  record that is not the newest never committed (ROLLBACK); the newest may still be
  committing (UNKNOWN, the broker asks again); a recorded ``<txn>`` commits unless its
  row is already visible in the topic (then this is a copy: ROLLBACK).
* ``commit`` returns only once every row of the batch is visible, waiting for
  check-backs if some end failed or came too late; a replayed commit whose record has
  no ``.done`` marker (the earlier run died while committing) waits the same way for
  the earlier run's rows. The process answering the check-backs is the one waiting.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import anyio

from aiorocket._log import get_logger
from aiorocket.client.admin import AdminRequests
from aiorocket.client.instance import ClientInstance
from aiorocket.errors import ConfigError, RocketMQError
from aiorocket.message import Message, MessageExt, MessageQueue
from aiorocket.producer.producer import Producer
from aiorocket.producer.transaction import HalfMessage, TransactionState, end_half
from aiorocket.spark import _broker
from aiorocket.spark._flow import each, each_of

__all__ = [
    "TXN_PROPERTY",
    "Record",
    "Row",
    "Tag",
    "TxnLog",
    "by_txn",
    "commit",
    "end_all",
    "judge",
    "parse_tag",
    "query_of",
    "rows_of",
    "send_halves",
    "tag",
    "unrecorded",
    "verdict",
    "wait_visible",
]

log = get_logger("spark")

#: the property of every half message: ``"<batch>:<query>:<txn>"`` (``"<batch>:<txn>"``
#: before the query id).
TXN_PROPERTY = "sparkTxn"
#: how many records (batches) the log keeps. Once a batch is done every row of it is
#: visible, so the only answer left for its half messages is ROLLBACK (copies the broker
#: put back, failed attempts): what a batch without a record below the newest gets.
KEEP = 10
#: ends (and visibility queries) in flight at once.
PARALLEL = 128
#: half messages in flight at once per task (over remoting). Each is a request of its
#: own that the broker's send threads take one at a time: more in flight only wait
#: there. At the producer's 1,024 an answer took 0.35-1 s (p99 0.6-3 s) on the test
#: cluster, past the 550 ms after which the producer avoids a broker for 2 s or more,
#: so the next seconds' rows all went to the other broker; at 128 answers came in
#: 30-70 ms (p99 under 450 ms) at the same rate (benchmarks/README.md, the Spark
#: sink, round 4).
HALVES_IN_FLIGHT = 128

#: one row of a committed batch: (topic, broker name, message id).
Row = tuple[str, str, str]


@dataclass(frozen=True)
class Record:
    """The commit record of one batch."""

    #: the id of the query that wrote it; None in a record of an earlier version.
    query: str | None
    #: the committed txns and their rows.
    txns: dict[str, list[Row]]


class Tag(NamedTuple):
    """A half message's ``sparkTxn`` property, parsed."""

    batch: int
    txn: str
    #: None in a tag of an earlier version.
    query: str | None


def tag(batch: int | str, query: str, txn: str) -> str:
    return f"{batch}:{query}:{txn}"


def parse_tag(value: str | None) -> Tag | None:
    if not value or ":" not in value:
        return None
    parts = value.split(":")
    if not parts[0].isdigit() or len(parts) > 3:
        return None
    if len(parts) == 2:
        return Tag(int(parts[0]), parts[1], None)
    return Tag(int(parts[0]), parts[2], parts[1])


def _same(a: str | None, b: str | None) -> bool:
    """One query's, or unknown (an earlier version's tag or record: read as ours)."""
    return a is None or b is None or a == b


class TxnLog:
    """One JSON file per committed batch: ``<batch>.json``, and ``<batch>.done`` once
    every row of it is visible. Written atomically (temp file, fsync, rename)."""

    def __init__(self, directory: str) -> None:
        self.dir = directory

    def _path(self, batch: int, suffix: str) -> str:
        return os.path.join(self.dir, f"{batch}.{suffix}")

    def read(self, batch: int) -> Record | None:
        """The record of ``batch``, or None if it has none."""
        try:
            with open(self._path(batch, "json"), encoding="utf-8") as f:
                data = json.load(f)
        except FileNotFoundError:
            return None
        txns = {txn: [tuple(r) for r in rows] for txn, rows in data["txns"].items()}
        return Record(data.get("query"), txns)

    def head(self) -> tuple[int, str | None] | None:
        """The newest record's batch and query, None if there is no record."""
        newest = self.newest()
        record = self.read(newest) if newest >= 0 else None
        return None if record is None else (newest, record.query)

    def claim(self, query: str | None, batch: int) -> str | None:
        """The query to record ``batch`` as: ``query``, or the log's if the tasks named
        none (a batch without tasks). Refuses (``ConfigError``) another query's log:
        two queries sharing one would replay, and answer the check-backs of, each
        other's batches."""
        head = self.head()
        if query is None:
            return head[1] if head is not None else None
        this = self.read(batch)
        owners = [head, (batch, this.query) if this is not None else None]
        for b, owner in filter(None, owners):
            if not _same(owner, query):
                raise ConfigError(
                    f"the exactly-once transaction log {self.dir} holds the commit record "
                    f"of batch {b} of another query ({owner}); this query is {query}: give "
                    "each query its own checkpointLocation (or option transactionLog)"
                )
        return query

    def write(self, batch: int, txns: dict[str, list[Row]], query: str | None = None) -> bool:
        """Record ``batch`` as committed by ``txns`` of ``query``; False if it already
        had a record."""
        os.makedirs(self.dir, exist_ok=True)
        record = {"batch": batch, "time": time.time(), "query": query, "txns": txns}
        data = json.dumps(record).encode()
        fd, tmp = tempfile.mkstemp(dir=self.dir, prefix=f".{batch}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            try:
                os.link(tmp, self._path(batch, "json"))  # fails if it exists: first wins
            except FileExistsError:
                return False
        finally:
            os.unlink(tmp)
        self._sync_dir()
        return True

    def is_done(self, batch: int) -> bool:
        return os.path.exists(self._path(batch, "done"))

    def mark_done(self, batch: int) -> None:
        with open(self._path(batch, "done"), "wb") as f:
            os.fsync(f.fileno())
        self._sync_dir()
        self._forget_before(batch - KEEP)

    def answered(self, batch: int) -> set[str]:
        """The message ids of ``batch`` a check-back was answered COMMIT for (over gRPC:
        ``<batch>.answered``, one id a line)."""
        try:
            with open(self._path(batch, "answered"), encoding="utf-8") as f:
                return {line.strip() for line in f if line.strip()}
        except FileNotFoundError:
            return set()

    def note_answered(self, ids: dict[int, list[str]]) -> None:
        """Append ``ids`` to their batches' ``.answered`` files, synced to disk."""
        created = False
        for batch, msg_ids in ids.items():
            path = self._path(batch, "answered")
            created = created or not os.path.exists(path)
            with open(path, "a", encoding="utf-8") as f:
                f.write("".join(f"{i}\n" for i in msg_ids))
                f.flush()
                os.fsync(f.fileno())
        if created:
            self._sync_dir()

    def newest(self) -> int:
        """The highest batch with a record, -1 if none."""
        try:
            names = os.listdir(self.dir)
        except FileNotFoundError:
            return -1
        batches = [int(n[:-5]) for n in names if n.endswith(".json") and n[:-5].isdigit()]
        return max(batches, default=-1)

    def _forget_before(self, batch: int) -> None:
        for name in os.listdir(self.dir):
            stem = name.split(".", 1)[0]
            if stem.isdigit() and int(stem) < batch:
                os.unlink(os.path.join(self.dir, name))

    def _sync_dir(self) -> None:
        fd = os.open(self.dir, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def rows_of(halves: Iterable[HalfMessage]) -> list[Row]:
    return [(h.topic, h.broker_name, h.msg_id) for h in halves]


async def _addr(client: ClientInstance, topic: str, broker_name: str) -> str:
    return await _broker._broker_addr(client, MessageQueue(topic, broker_name, 0))


async def _visible_at(client: ClientInstance, addr: str, topic: str, msg_id: str) -> bool:
    found = await AdminRequests(client.broker).query_messages(
        addr, topic, msg_id, unique_key=True, max_num=4
    )
    return any(m.msg_id == msg_id and m.topic == topic for m in found)


def judge(tag: Tag | None, record: Record | None, txn_log: TxnLog) -> TransactionState:
    """What the records say of a half message tagged ``tag`` whose batch has ``record``
    (the module docstring): COMMIT for a row of a committed txn, ROLLBACK for any other of
    a recorded or older batch, UNKNOWN for the newest batch without a record and for
    another query's message (the broker asks again; maybe its owner, in a shared group)."""
    if tag is None:
        return TransactionState.UNKNOWN  # not the sink's
    if record is not None:
        if not _same(tag.query, record.query):
            return TransactionState.UNKNOWN
        return TransactionState.COMMIT if tag.txn in record.txns else TransactionState.ROLLBACK
    # Spark commits batches in order: a later record means this batch's attempt died
    # before its commit, and a replay committed other txns (or will).
    head = txn_log.head()
    if head is None or not _same(tag.query, head[1]):
        return TransactionState.UNKNOWN
    return TransactionState.ROLLBACK if head[0] > tag.batch else TransactionState.UNKNOWN


async def verdict(client: ClientInstance, txn_log: TxnLog, msg: MessageExt) -> TransactionState:
    """The answer to a check-back for ``msg`` (see the module docstring)."""
    tag = parse_tag(msg.properties.get(TXN_PROPERTY))
    state = judge(tag, txn_log.read(tag.batch) if tag else None, txn_log)
    # Committed. If the driver's own end got through, this is a copy the broker put back
    # while waiting for it: the row is in the topic already.
    if state is TransactionState.COMMIT and await _visible_at(
        client, msg.store_host, msg.topic, msg.msg_id
    ):
        return TransactionState.ROLLBACK
    return state


def unrecorded(txn_log: TxnLog, batch: int, halves: dict[str, list[HalfMessage]]
               ) -> list[HalfMessage]:  # fmt: skip
    """The half messages of ``halves`` that the record of ``batch`` does not commit: all
    that an abort or a replay may roll back. Read first: Spark aborts a batch whose
    commit raised after it wrote the record, and the rows it lists are committed."""
    record = txn_log.read(batch)
    keep = record.txns if record is not None else {}
    return [h for txn, hs in halves.items() if txn not in keep for h in hs]


def query_of(messages: Iterable[Any]) -> str | None:
    """The query the tasks' commit messages name (the first; they are one query's)."""
    return next((q for m in messages if (q := getattr(m, "query", None))), None)


async def end_all(
    client: ClientInstance, group: str, halves: Sequence[HalfMessage], state: TransactionState
) -> list[HalfMessage]:
    """End every half message with ``state``; those the broker did not confirm."""
    failed: list[HalfMessage] = []
    # A batch's rows sit on a few brokers: their addresses are looked up once each, not
    # once per row; a failed end forgets its broker's, so the next end asks the route.
    addrs: dict[tuple[str, str], str] = {}

    async def one(half: HalfMessage) -> None:
        where = (half.topic, half.broker_name)
        try:
            addr = addrs.get(where)
            if addr is None:
                addr = addrs[where] = await _addr(client, half.topic, half.broker_name)
            await end_half(client.broker, addr, group, half, state)
        except RocketMQError as exc:
            addrs.pop(where, None)
            failed.append(half)
            log.warning("spark_end_transaction_failed", state=state.value,
                        msg_id=half.msg_id, error=str(exc))  # fmt: skip

    await each(list(halves), PARALLEL, one)
    return failed


async def wait_visible(client: ClientInstance, rows: Sequence[Row], timeout: float) -> None:
    """Return once every row is in its topic (the broker's check-backs commit those
    whose end failed); TimeoutError after ``timeout`` seconds. A retriable failure of a
    row's query (a busy broker) is asked again with the rows not seen yet."""
    missing = list(rows)
    delay = 0.5
    with anyio.fail_after(timeout):
        while missing:
            still: list[Row] = []

            async def one(row: Row, still: list[Row] = still) -> None:
                topic, broker_name, msg_id = row
                try:
                    addr = await _addr(client, topic, broker_name)
                    seen = await _visible_at(client, addr, topic, msg_id)
                except RocketMQError as exc:
                    if not exc.retriable:
                        raise
                    # A busy broker, a query that timed out: ask again next round.
                    log.info("spark_visibility_query_failed", msg_id=msg_id, error=str(exc))
                    seen = False
                if not seen:
                    still.append(row)

            await each(missing, PARALLEL, one)
            if still:
                log.info("spark_waiting_for_check_backs", rows=len(still))
                await anyio.sleep(delay)
                delay = min(delay * 2, 5.0)
            missing = still


def by_txn(messages: Iterable[Any]) -> dict[str, list[HalfMessage]]:
    """The half messages of each task attempt named in the commit messages."""
    out: dict[str, list[HalfMessage]] = {}
    for m in messages:
        txn = getattr(m, "txn", None)
        if txn is not None:
            out[txn] = list(m.halves)
    return out


async def commit(
    client: ClientInstance,
    checker: Producer,
    txn_log: TxnLog,
    batch: int,
    halves: dict[str, list[HalfMessage]],
    wait: float,
    query: str | None = None,
) -> None:
    """The driver's commit of ``batch`` (see the module docstring). Once the record is
    written, nothing this raises makes its rows roll back (see :func:`unrecorded`)."""
    group = checker.group
    query = txn_log.claim(query, batch)
    record = {txn: rows_of(hs) for txn, hs in halves.items()}
    if txn_log.write(batch, record, query):
        topics = {r[0] for rows in record.values() for r in rows}
        await _broker._retrying(lambda: checker.accept_checks(*sorted(topics)))
        failed = await end_all(client, group, [h for hs in halves.values() for h in hs],
                               TransactionState.COMMIT)  # fmt: skip
        if failed:
            await wait_visible(client, rows_of(failed), wait)
        txn_log.mark_done(batch)
        log.info("spark_batch_committed_exactly_once", batch=batch, txns=len(record),
                 rows=sum(map(len, record.values())), left_to_check_backs=len(failed))  # fmt: skip
        return
    # A replay: an earlier run recorded this batch and died before Spark logged it.
    surplus = unrecorded(txn_log, batch, halves)
    await end_all(client, group, surplus, TransactionState.ROLLBACK)
    if not txn_log.is_done(batch):
        recorded = txn_log.read(batch)
        rows = [r for rs in (recorded.txns if recorded else {}).values() for r in rs]
        await _broker._retrying(lambda: checker.accept_checks(*sorted({r[0] for r in rows})))
        await wait_visible(client, rows, wait)
        txn_log.mark_done(batch)
    log.info("spark_batch_replayed_exactly_once", batch=batch, rolled_back=len(surplus))


async def send_halves(
    lists: AsyncIterable[list[Message]],
    in_flight: int,
    send: Callable[[Message], Awaitable[HalfMessage]],
) -> list[HalfMessage]:
    """Send every row of a task as a half message with ``send`` (the transport's: over
    remoting or through a Proxy) as its lists arrive, at most ``in_flight`` at once (one
    request each, from a fixed set of workers: ``_flow.each_of``); the handles come back
    in the rows' order, and one failed send fails the task (no resend: see above)."""
    out: list[HalfMessage | None] = []

    async def numbered() -> AsyncIterator[list[tuple[int, Message]]]:
        async for messages in lists:
            first = len(out)
            out.extend([None] * len(messages))
            yield list(enumerate(messages, first))

    async def one(row: tuple[int, Message]) -> None:
        i, msg = row
        out[i] = await send(msg)

    await each_of(numbered(), in_flight, one)
    return [h for h in out if h is not None]
