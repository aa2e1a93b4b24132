"""The sink through a 5.x Proxy (option ``proxy``), and its exactly-once mode there.

Imported only then: it needs the ``grpc`` extra (grpclib), which a NameServer-only
deployment need not install.

Exactly-once over gRPC differs from the remoting design (``aiorocket.spark._txn``) in
one point: **the driver never commits a half message itself; every row is committed by
its answer to the broker's check-back.** What the Proxy offers forces this
(``scripts/grpc_txn_probe.py`` shows each fact on the real Proxy):

* EndTransaction answers OK once the Proxy has forwarded the end (one way; in local
  mode it drops the broker's answer): an end the broker refused is answered OK too. And
  a gRPC client can ask nothing about a stored message. So the driver cannot know
  whether its own COMMIT took effect.
* The broker's check pass copies an unresolved half message back into its half queue
  (during the immunity time every pass, after it before each check-back), and an end
  of the original does not resolve the copies: once the original was committed, its
  copy is checked back all the same, and a COMMIT answer makes the row visible twice.
  The remoting driver answers such a copy ROLLBACK because it sees the row in the topic;
  over gRPC it cannot see that.

Without any end of its own, only one copy of a half message is alive at a time (each
pass supersedes the one before), and the answer to its check-back resolves it: a COMMIT
answer commits each row once. A second check-back of a row comes only if the broker did
not apply the first answer before its next pass (``transactionCheckInterval``, 30 s by
default; option ``transactionCheckIntervalSeconds`` names the broker's): the answer was
lost, and COMMIT again is right; the driver leaves unanswered a check-back it could not
answer within ``STALE_CHECK`` of an interval, so that its answer cannot arrive after that
pass. So:

* Executors send each row as a half message through the Proxy, once (no resend), with
  ``orphaned_transaction_recovery_duration = transactionTimeoutSeconds`` (default 6 s
  over gRPC: how soon the broker asks), and without publishing the topic in their
  settings, so that the Proxy never asks them (it asks a client publishing the topic).
* The driver's ``commit`` writes the commit record as over remoting, publishes the topics
  in its settings, and waits until the Proxy took its COMMIT answer for every row of the
  batch. ``<batch>.answered`` lists the rows answered COMMIT, synced to disk before the
  answer leaves: a replayed commit after a crash waits for the rows an earlier run did
  not answer (the broker asks about them), and at most ``UNCERTAIN_WAIT`` intervals for
  those it noted (if their answer left, the broker does not ask again; if not, it asks
  within a check interval, and is answered COMMIT again).
* A check-back is answered from the records alone (``_txn.judge``): COMMIT for a row of
  a committed transaction, ROLLBACK for any other of a recorded or older batch, UNKNOWN
  for the newest batch without a record (it may still commit; the broker asks again)
  and for another query's row.
* ``abort`` and a replay's surplus transactions, those no record lists
  (``_txn.unrecorded``), are ended ROLLBACK through the Proxy (when it still holds their
  transaction data); the check-backs roll back the rest.

Cost: a batch's rows become visible at the broker's first check pass after both its
commit record and ``transactionTimeoutSeconds`` past each row's birth: up to one
``transactionCheckInterval`` after the commit starts.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Iterable, Sequence
from collections.abc import Set as AbstractSet
from contextlib import AbstractAsyncContextManager, asynccontextmanager

import anyio

from aiorocket._log import get_logger
from aiorocket.grpc import _pb as pb
from aiorocket.grpc._producer import GrpcProducer
from aiorocket.grpc._transport import GrpcOptions, GrpcTransport, check_status, with_security
from aiorocket.message import Message, MessageExt
from aiorocket.producer.config import ProducerConfig
from aiorocket.producer.transaction import HalfMessage, TransactionState
from aiorocket.spark import _broker, _txn
from aiorocket.spark._flow import each
from aiorocket.spark._options import WriteOptions
from aiorocket.spark._txn import (
    KEEP,
    PARALLEL,
    TXN_PROPERTY,
    Record,
    Row,
    TxnLog,
    judge,
    parse_tag,
    rows_of,
    unrecorded,
)

__all__ = ["Answers", "answer", "checker", "commit", "rollback", "send_halves", "sender",
           "topic_types"]  # fmt: skip

log = get_logger("spark")
#: how long a replayed commit waits for the broker to ask about a row a dead run noted as
#: answered (if its answer left, the broker never asks), in check intervals
#: (``transactionCheckInterval``, option ``transactionCheckIntervalSeconds``, 30 s by
#: default): two check passes and some (75 s by default).
UNCERTAIN_WAIT = 2.5
#: a check-back not answered within this share of a check interval of its arrival is
#: left unanswered (the broker asks again at its next pass, which starts a check
#: interval after the last one ended): a COMMIT answer must land before that pass
#: (20 s by default).
STALE_CHECK = 2 / 3


async def topic_types(opts: WriteOptions, topic: str) -> set[int] | None:
    """The message types (``pb.MessageType``) ``topic`` accepts, None if the Proxy does
    not know it (one QueryRoute; other errors propagate)."""
    assert opts.proxy is not None
    client = opts.client
    options = with_security(GrpcOptions(), client.credentials(), client.tls_setting())
    transport = GrpcTransport.create(
        opts.proxy, options, client_id=None, request_timeout=client.request_timeout
    )
    try:
        req = pb.QueryRouteRequest(topic=pb.Resource(name=topic), endpoints=transport.endpoints())
        resp = await transport.unary("QueryRoute", req, pb.QueryRouteResponse)
        if resp.status is not None and resp.status.code == pb.Code.TOPIC_NOT_FOUND:
            return None
        check_status(resp.status, "QueryRoute")
        return {int(t) for q in resp.message_queues for t in q.accept_message_types}
    finally:
        transport.close()


def _config(opts: WriteOptions, retries: int) -> ProducerConfig:
    return ProducerConfig(
        send_timeout=opts.send_timeout, retries=retries, auto_batch=False,
        request_timeout=opts.client.request_timeout,
        credentials=opts.client.credentials(), tls=opts.client.tls_setting(),
        # The driver answers a batch's check-backs all at once (one write per group).
        check_concurrency=PARALLEL,
    )  # fmt: skip


@asynccontextmanager
async def _started(producer: GrpcProducer) -> AsyncIterator[GrpcProducer]:
    await producer.start()
    try:
        yield producer
    finally:
        await producer.close(None, None, None)


def sender(opts: WriteOptions) -> AbstractAsyncContextManager[GrpcProducer]:
    """The executors' producer of half messages: no resend, no auto-batching, and no
    topic in its settings (the Proxy must not ask it about their transactions)."""
    assert opts.proxy is not None
    producer = GrpcProducer(f"{opts.producer_group}-send", opts.proxy,
                            config=_config(opts, 0), announce=False)  # fmt: skip
    return _started(producer)


def checker(opts: WriteOptions, answers: Answers) -> AbstractAsyncContextManager[GrpcProducer]:
    """The driver's producer: answers check-backs (:func:`answer`) and ends rollbacks."""
    assert opts.proxy is not None

    async def on_orphan(msg: MessageExt) -> bool | None:
        return await answer(answers, msg)

    producer = GrpcProducer(
        opts.producer_group, opts.proxy, config=_config(opts, opts.retries),
        on_orphan=on_orphan, topics=[opts.topic] if opts.topic else (),
        on_answered=answers.sent_one, stale_after=STALE_CHECK * opts.check_interval,
    )  # fmt: skip
    return _started(producer)


async def send_halves(
    producer: GrpcProducer, lists: AsyncIterable[list[Message]], opts: WriteOptions
) -> list[HalfMessage]:
    async def send(msg: Message) -> HalfMessage:
        result = await producer.send_half(msg, recovery_s=opts.txn_timeout)
        # The Proxy ends it by (topic, transaction id); no broker or offsets over gRPC.
        return HalfMessage(msg.topic, "", -1, -1, result.msg_id, result.transaction_id)

    return await _txn.send_halves(lists, producer.config.max_in_flight, send)


class Answers:
    """Notes the rows answered COMMIT in ``<batch>.answered`` before the answer leaves
    (concurrent answers share one write and sync: ``TxnLog.note_answered``), and keeps
    those whose answer the Proxy took in this process (``sent``) until their batch is
    done (:meth:`forget_through`)."""

    def __init__(self, txn_log: TxnLog) -> None:
        self.log = txn_log
        self.sent: dict[int, set[str]] = {}
        #: batches up to this one are done: their answers are no longer waited for.
        self._done = -1
        #: the record of each recorded batch: a record never changes once written, and
        #: a batch's check-backs come by the thousand (reading it each time took most of
        #: an answer).
        self._records: dict[int, Record] = {}
        self._pending: dict[int, list[str]] = {}
        self._lock = anyio.Lock()
        self._taken = 0  # writes started
        self._written = 0  # writes finished

    async def add(self, batch: int, msg_id: str) -> None:
        self._pending.setdefault(batch, []).append(msg_id)
        mine = self._taken + 1  # the next write to start carries it
        async with self._lock:
            if self._written >= mine:
                return
            pending, self._pending = self._pending, {}
            self._taken += 1
            try:
                await anyio.to_thread.run_sync(self.log.note_answered, pending)
            except BaseException:
                for b, ids in pending.items():  # let a later write carry them
                    self._pending.setdefault(b, []).extend(ids)
                self._taken -= 1
                raise
            self._written = self._taken

    def record(self, batch: int) -> Record | None:
        """The record of ``batch``, None if it has none."""
        record = self._records.get(batch)
        if record is None:
            record = self.log.read(batch)
            if record is None:
                return None
            self._records[batch] = record
            for old in [b for b in self._records if b < batch - KEEP]:
                del self._records[old]
        return record

    def sent_one(self, msg: MessageExt, commit: bool) -> None:
        tag = parse_tag(msg.properties.get(TXN_PROPERTY))
        if commit and tag is not None and tag.batch > self._done:
            self.sent.setdefault(tag.batch, set()).add(msg.msg_id)

    def forget_through(self, batch: int) -> None:
        """``batch`` is done (every row answered, its record marked): no commit of this
        process waits for its answers, or an older batch's, again (a replay happens in a
        new process), so their ids go; a later check-back of one of them (a copy) is
        answered but not kept."""
        self._done = max(self._done, batch)
        for old in [b for b in self.sent if b <= batch]:
            del self.sent[old]


async def answer(answers: Answers, msg: MessageExt) -> bool | None:
    """A check-back's answer from the records: True commit, False roll back, None
    unknown (see the module docstring)."""
    tag = parse_tag(msg.properties.get(TXN_PROPERTY))
    state = judge(tag, answers.record(tag.batch) if tag else None, answers.log)
    if state is TransactionState.UNKNOWN:
        return None
    if state is TransactionState.ROLLBACK:
        return False
    assert tag is not None
    await answers.add(tag.batch, msg.msg_id)
    return True


async def rollback(producer: GrpcProducer, halves: Iterable[HalfMessage]) -> int:
    """End ``halves`` ROLLBACK through the Proxy; how many it took (the others are the
    check-backs' to roll back)."""
    taken = 0

    async def one(h: HalfMessage) -> None:
        nonlocal taken
        if await producer.end(h.topic, h.msg_id, h.transaction_id or "", commit=False):
            taken += 1

    await each(list(halves), PARALLEL, one)
    return taken


async def _wait_answered(
    answers: Answers, batch: int, rows: Sequence[Row], timeout: float,
    earlier: AbstractSet[str] = frozenset(), uncertain: float = 0.0,
) -> None:
    """Wait until this process has sent a COMMIT answer for every row of ``batch``; for
    the rows in ``earlier`` (noted by a run that died: their answer may have left, and
    then the broker does not ask again) at most ``uncertain`` seconds."""
    wanted = {r[2] for r in rows}
    start = anyio.current_time()
    delay = 0.1
    with anyio.fail_after(timeout):
        while True:
            missing = wanted - answers.sent.get(batch, set())
            if anyio.current_time() - start > uncertain:
                missing -= earlier
            if not missing:
                return
            log.debug("spark_waiting_for_check_backs", batch=batch, rows=len(missing))
            await anyio.sleep(delay)
            delay = min(delay * 1.5, 1.0)


async def commit(
    producer: GrpcProducer, answers: Answers, batch: int,
    halves: dict[str, list[HalfMessage]], wait: float, query: str | None = None,
    check_interval: float = 30.0,
) -> None:  # fmt: skip
    """The driver's commit of ``batch`` over gRPC (see the module docstring); the
    broker checks back every ``check_interval`` seconds. Once the record is written,
    nothing this raises makes its rows roll back (``_txn.unrecorded``)."""
    txn_log = answers.log
    query = txn_log.claim(query, batch)
    record = {txn: rows_of(hs) for txn, hs in halves.items()}
    if txn_log.write(batch, record, query):
        rows = [r for rs in record.values() for r in rs]
        await _broker._retrying(lambda: producer.declare(*sorted({r[0] for r in rows})))
        await _wait_answered(answers, batch, rows, wait)
        txn_log.mark_done(batch)
        answers.forget_through(batch)
        log.info("spark_batch_committed_exactly_once", batch=batch, txns=len(record),
                 rows=len(rows), transport="grpc")  # fmt: skip
        return
    # A replay: an earlier run recorded this batch and died before Spark logged it.
    surplus = unrecorded(txn_log, batch, halves)
    await rollback(producer, surplus)
    if not txn_log.is_done(batch):
        recorded = txn_log.read(batch)
        rows = [r for rs in (recorded.txns if recorded else {}).values() for r in rs]
        earlier = txn_log.answered(batch) - answers.sent.get(batch, set())
        await _broker._retrying(lambda: producer.declare(*sorted({r[0] for r in rows})))
        await _wait_answered(answers, batch, rows, wait, earlier,
                             UNCERTAIN_WAIT * check_interval)  # fmt: skip
        txn_log.mark_done(batch)
    answers.forget_through(batch)
    log.info("spark_batch_replayed_exactly_once", batch=batch, rolled_back=len(surplus),
             transport="grpc")  # fmt: skip
