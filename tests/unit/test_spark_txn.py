"""The exactly-once sink's commit records and the check-back answers they give
(the visibility query of a committed row is covered against the broker in
tests/spark/test_exactly_once.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from aiorocket.errors import ConfigError
from aiorocket.message import MessageExt
from aiorocket.producer.transaction import TransactionState
from aiorocket.spark._txn import KEEP, TXN_PROPERTY, Record, TxnLog, verdict


def msg(tag: str | None) -> MessageExt:
    props = {TXN_PROPERTY: tag} if tag else {}
    return MessageExt("out", b"x", props, queue_id=0, queue_offset=0, commit_log_offset=0)


def answer(log: TxnLog, tag: str | None) -> TransactionState:
    client: Any = None  # only a committed txn's row needs the broker
    return anyio.run(verdict, client, log, msg(tag))


def test_first_record_of_a_batch_wins(tmp_path: Path) -> None:
    log = TxnLog(str(tmp_path / "log"))
    assert log.newest() == -1 and log.read(0) is None
    assert log.write(0, {"run1.0.7": [("out", "broker-a", "ID1")]})
    assert not log.write(0, {"run2.0.9": []})  # a replay finds the earlier run's record
    assert log.read(0) == Record(None, {"run1.0.7": [("out", "broker-a", "ID1")]})
    assert not log.is_done(0)
    log.mark_done(0)
    assert log.is_done(0) and log.newest() == 0
    assert sorted(p.name for p in (tmp_path / "log").iterdir()) == ["0.done", "0.json"]


def test_old_records_are_forgotten_once_a_later_batch_is_done(tmp_path: Path) -> None:
    log = TxnLog(str(tmp_path))
    for b in range(KEEP + 3):
        assert log.write(b, {f"t{b}": []})
        log.mark_done(b)
    assert log.read(1) is None and log.read(2) is not None and log.newest() == KEEP + 2


@pytest.mark.parametrize(
    ("tag", "state"),
    [
        (None, TransactionState.UNKNOWN),  # not the sink's message
        ("4:q1:t4", TransactionState.UNKNOWN),  # the newest batch may still commit
        ("5:q1:t5", TransactionState.UNKNOWN),
        ("2:q1:t2", TransactionState.ROLLBACK),  # no record, later batches have one
        ("3:q1:other", TransactionState.ROLLBACK),  # a txn the record does not list
        # Another query's (a shared producerGroup): not ours to roll back.
        ("3:q2:other", TransactionState.UNKNOWN),
        ("2:q2:t2", TransactionState.UNKNOWN),
        ("2:t2", TransactionState.ROLLBACK),  # a tag of an earlier version: ours
        ("3:other", TransactionState.ROLLBACK),
    ],
)
def test_check_back_answers(tmp_path: Path, tag: str | None, state: TransactionState) -> None:
    log = TxnLog(str(tmp_path))
    assert log.write(3, {"t3": [("out", "broker-a", "ID")]}, "q1")
    assert answer(log, tag) is state


def test_a_record_of_an_earlier_version_is_read_as_this_querys(tmp_path: Path) -> None:
    """Records without a query id (before it existed) stay readable: an upgraded query
    replays and answers for them as before, and adopts the log."""
    (tmp_path / "3.json").write_text(json.dumps({"batch": 3, "txns": {"t3": [["out", "b", "ID"]]}}))
    log = TxnLog(str(tmp_path))
    assert log.read(3) == Record(None, {"t3": [("out", "b", "ID")]})
    assert answer(log, "3:q1:other") is TransactionState.ROLLBACK
    assert answer(log, "2:q1:t2") is TransactionState.ROLLBACK
    assert log.claim("q1", 4) == "q1"  # no refusal
    assert log.write(4, {"t4": []}, "q1")
    assert log.claim(None, 5) == "q1"  # a batch without tasks is recorded as the log's
    with pytest.raises(ConfigError, match="another query"):
        log.claim("q2", 5)


# -- through a Proxy (aiorocket.spark._grpc): the records alone answer ------------------


def grpc_answer(log: TxnLog, tag: str | None, msg_id: str = "ID") -> bool | None:
    from aiorocket.spark._grpc import Answers, answer

    m = msg(tag)
    m.properties["UNIQ_KEY"] = msg_id
    return anyio.run(answer, Answers(log), m)


@pytest.mark.parametrize(
    ("tag", "verdict_"),
    [
        (None, None),  # not the sink's message
        ("4:q1:t4", None),  # the newest batch may still commit
        ("2:q1:t2", False),  # no record, later batches have one
        ("3:q1:other", False),  # a txn the record does not list
        ("3:q1:t3", True),  # committed: every check-back of its row is answered COMMIT
        ("3:q2:t3", None),  # another query's (a shared producerGroup)
        ("2:q2:t2", None),
        ("3:t3", True),  # a tag of an earlier version
    ],
)
def test_check_back_answers_over_grpc(tmp_path: Path, tag: str | None,
                                      verdict_: bool | None) -> None:  # fmt: skip
    log = TxnLog(str(tmp_path))
    assert log.write(3, {"t3": [("out", "", "ID")]}, "q1")
    assert grpc_answer(log, tag) is verdict_
    assert log.answered(3) == ({"ID"} if verdict_ else set())


def test_a_commit_answer_is_on_disk_before_it_leaves_and_writes_are_shared(
    tmp_path: Path,
) -> None:
    """Each COMMIT answer is noted in ``<batch>.answered`` (so a replayed commit after a
    crash waits only for the rows not answered yet) before ``answer`` returns; answers
    given at once share writes."""
    from aiorocket.spark._grpc import Answers, answer

    log = TxnLog(str(tmp_path))
    ids = [f"ID{i}" for i in range(50)]
    assert log.write(3, {"t3": [("out", "", i) for i in ids]}, "q1")
    writes: list[int] = []
    note = log.note_answered

    def counted(pending: dict[int, list[str]]) -> None:
        writes.append(sum(map(len, pending.values())))
        note(pending)

    log.note_answered = counted  # type: ignore[method-assign]
    answers = Answers(log)

    async def run() -> None:
        async def one(i: str) -> None:
            m = msg("3:q1:t3")
            m.properties["UNIQ_KEY"] = i
            assert await answer(answers, m) is True
            assert i in log.answered(3)  # on disk when the answer leaves

        async with anyio.create_task_group() as tg:
            for i in ids:
                tg.start_soon(one, i)

    anyio.run(run)
    assert log.answered(3) == set(ids)
    assert sum(writes) == len(ids) and len(writes) < len(ids)
    log.mark_done(4 + KEEP)  # forgets batch 3, its .answered too
    assert log.answered(3) == set()


# -- commit failures, abort, and a log shared by two queries ----------------------------


def test_an_abort_rolls_back_only_what_no_record_lists(tmp_path: Path) -> None:
    """Spark aborts a batch whose commit raised after it wrote the record: the rows the
    record lists are committed and are not the abort's to roll back."""
    from aiorocket.producer.transaction import HalfMessage
    from aiorocket.spark._txn import unrecorded

    def half(i: str) -> HalfMessage:
        return HalfMessage("out", "b", 0, 0, i)

    halves = {"t1": [half("A"), half("B")], "t2": [half("C")]}
    log = TxnLog(str(tmp_path))
    assert [h.msg_id for h in unrecorded(log, 0, halves)] == ["A", "B", "C"]
    assert log.write(0, {"t1": [("out", "b", "A"), ("out", "b", "B")]}, "q1")
    assert [h.msg_id for h in unrecorded(log, 0, halves)] == ["C"]


class _StandIn:
    """The driver's producer, for the calls a commit makes before it needs a broker."""

    group = "g"
    ends: list[str]

    def __init__(self, fail: int = 0) -> None:
        self.fail = fail
        self.ends = []

    async def declare(self, *topics: str) -> None:
        await self.accept_checks(*topics)

    async def accept_checks(self, *topics: str) -> None:
        if self.fail:
            self.fail -= 1
            from aiorocket.errors import ProxyUnavailableError

            raise ProxyUnavailableError("stream reset")

    async def end(self, topic: str, msg_id: str, txn_id: str, commit: bool) -> bool:
        self.ends.append(msg_id)
        return True


@pytest.mark.parametrize("transport", ["remoting", "grpc"])
def test_a_log_of_another_query_is_refused_before_any_record(
    tmp_path: Path, transport: str
) -> None:
    from aiorocket.producer.transaction import HalfMessage
    from aiorocket.spark import _grpc, _txn

    log = TxnLog(str(tmp_path))
    assert log.write(0, {"t": []}, "q1")
    halves = {"x": [HalfMessage("out", "", -1, -1, "ID", "T")]}
    producer: Any = _StandIn()
    if transport == "grpc":
        run = _grpc.commit(producer, _grpc.Answers(log), 1, halves, 5, "q2")
    else:
        run = _txn.commit(None, producer, log, 1, halves, 5, "q2")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"batch 0 of another query \(q1\); this query is q2"):
        anyio.run(lambda: run)
    assert log.read(1) is None


def test_a_transient_failure_in_a_commit_is_retried_and_answers_are_not_kept(
    tmp_path: Path,
) -> None:
    """Through a Proxy: a momentary failure of the settings update that brings the
    check-backs is retried; the ids of the rows answered COMMIT are kept only until
    their batch is done (200 batches of 1,000 rows held 200,000 of them)."""
    from aiorocket.producer.transaction import HalfMessage
    from aiorocket.spark import _grpc

    log = TxnLog(str(tmp_path))
    answers = _grpc.Answers(log)
    producer: Any = _StandIn(fail=2)

    async def run() -> None:
        for batch in range(KEEP + 5):
            halves = [HalfMessage("out", "", -1, -1, f"B{batch}-{i}", "T") for i in range(20)]
            for h in halves:  # the Proxy took the answer of each row's check-back
                m = msg(f"{batch}:q1:t{batch}")
                m.properties["UNIQ_KEY"] = h.msg_id
                answers.sent_one(m, True)
            await _grpc.commit(producer, answers, batch, {f"t{batch}": halves}, 5, "q1")
            assert log.is_done(batch)
            assert answers.sent == {}
        m = msg("0:q1:t0")  # a late copy of a done batch's row
        m.properties["UNIQ_KEY"] = "B0-0"
        answers.sent_one(m, True)
        assert answers.sent == {}

    anyio.run(run)
    assert producer.fail == 0


def test_the_waits_of_a_commit_through_a_proxy_follow_the_check_interval(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Option transactionCheckIntervalSeconds: a replay waits 2.5 check intervals for
    rows a dead run noted as answered (if their answer left, the broker never asks
    again), and the driver drops a check-back it could not answer within two thirds of
    one (its answer could land after the next pass and commit a copy)."""
    from aiorocket.producer.transaction import HalfMessage
    from aiorocket.spark import _grpc
    from aiorocket.spark._options import parse_write

    log = TxnLog(str(tmp_path))
    halves = [HalfMessage("out", "", -1, -1, f"ID{i}", "T") for i in range(3)]
    assert log.write(0, {"t": _grpc.rows_of(halves)}, "q1")
    log.note_answered({0: ["ID0", "ID1", "ID2"]})  # noted, then the driver died
    run = _grpc.commit(_StandIn(), _grpc.Answers(log), 0, {"t": halves}, 5, "q1",  # type: ignore[arg-type]
                       check_interval=0.4)  # fmt: skip
    anyio.run(lambda: run)  # 1 s, within the commit's 5 s
    assert log.is_done(0)

    eos = {"deliveryGuarantee": "exactly-once", "checkpointLocation": str(tmp_path),
           "topic": "out", "proxy": "h:1"}  # fmt: skip
    assert parse_write(eos).check_interval == 30
    opts = parse_write({**eos, "transactionCheckIntervalSeconds": "9"})
    assert opts.check_interval == 9
    with pytest.raises(ConfigError, match="IntervalSeconds must be an integer >= 3"):
        parse_write({**eos, "transactionCheckIntervalSeconds": "2"})
    made: dict[str, Any] = {}
    monkeypatch.setattr(_grpc, "GrpcProducer", lambda *a, **kw: made.update(kw))
    _grpc.checker(opts, _grpc.Answers(log))
    assert made["stale_after"] == 6.0


def test_a_visibility_query_that_fails_transiently_is_asked_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from aiorocket._response_code import ResponseCode
    from aiorocket.errors import BrokerResponseError
    from aiorocket.spark import _txn

    failures = [BrokerResponseError(ResponseCode.SYSTEM_ERROR, "query timed out")]
    asked: list[str] = []

    async def addr(client: Any, topic: str, broker_name: str) -> str:
        return "b:1"

    async def visible(client: Any, addr: str, topic: str, msg_id: str) -> bool:
        asked.append(msg_id)
        if failures:
            raise failures.pop()
        return True

    monkeypatch.setattr(_txn, "_addr", addr)
    monkeypatch.setattr(_txn, "_visible_at", visible)
    monkeypatch.setattr(anyio, "sleep", _no_sleep)
    anyio.run(_txn.wait_visible, None, [("out", "b", "ID")], 5.0)
    assert asked == ["ID", "ID"]


async def _no_sleep(delay: float) -> None:
    pass


def test_an_error_raised_in_a_task_group_reaches_spark_typed() -> None:
    from aiorocket.errors import ProxyUnavailableError
    from aiorocket.spark._runtime import runtime

    async def fails() -> None:
        async def one() -> None:
            raise ProxyUnavailableError("down")

        async with anyio.create_task_group() as tg:
            tg.start_soon(one)

    with pytest.raises(ProxyUnavailableError, match="down"):
        runtime().run(fails())


@pytest.mark.parametrize("transport", ["remoting", "grpc"])
def test_a_commit_failing_after_its_record_then_spark_s_abort_keeps_the_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, transport: str
) -> None:
    """What Spark's ``writeWithV2`` does: commit, and abort when it raised. The commit
    fails after its record (the Proxy settings update, the remoting check-back
    registration fail for good): the error is the typed one, and the abort ends no row
    the record lists with ROLLBACK (it did: every recorded row was lost)."""
    from pyspark.sql.types import BinaryType, StructField, StructType

    from aiorocket._response_code import ResponseCode
    from aiorocket.errors import AccessDeniedError
    from aiorocket.producer.transaction import HalfMessage
    from aiorocket.spark import _grpc, _txn, sink
    from aiorocket.spark._options import parse_write
    from aiorocket.spark._runtime import runtime

    class Refused(_StandIn):
        async def accept_checks(self, *topics: str) -> None:
            raise AccessDeniedError(ResponseCode.NO_PERMISSION, "no")

    producer, ended = Refused(), []
    via = {"proxy": "127.0.0.1:1"} if transport == "grpc" else {"nameServer": "127.0.0.1:1"}
    opts = parse_write({**via, "topic": "out", "deliveryGuarantee": "exactly-once",
                        "checkpointLocation": str(tmp_path)})  # fmt: skip
    assert opts.txn_log is not None
    rt = runtime()
    monkeypatch.setattr(sink, "_check_topic", lambda o: None)
    monkeypatch.setattr(rt, "grpc_checker", lambda o: (producer, _grpc.Answers(TxnLog(o.txn_log))))
    monkeypatch.setattr(rt, "checker", lambda o: producer)
    monkeypatch.setattr(rt, "client", lambda o: None)

    async def end_all(client: Any, group: str, halves: Any, state: TransactionState) -> list[Any]:
        ended.extend((h.msg_id, state) for h in halves)
        return []

    monkeypatch.setattr(_txn, "end_all", end_all)
    writer = sink.RocketMQStreamWriter(opts, StructType([StructField("body", BinaryType())]))
    halves = tuple(HalfMessage("out", "b", -1, -1, f"ID-{i}", f"T-{i}") for i in range(3))
    messages: list[Any] = [sink.SinkCommit(0, 3, "run1.0.7", halves, "q1")]
    with pytest.raises(AccessDeniedError):
        writer.commit(messages, 0)
    assert TxnLog(opts.txn_log).read(0) == Record("q1", {"run1.0.7": _txn.rows_of(halves)})
    writer.abort(messages, 0)
    assert ended == [] and producer.ends == []


def test_ends_look_each_broker_up_once_and_again_after_a_failed_end(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The driver's ends: one address look-up per broker, not per row; a failed end
    forgets its broker's address (the route may have moved), and is reported failed."""
    from types import SimpleNamespace

    from aiorocket.errors import ConnectionClosedError
    from aiorocket.producer.transaction import HalfMessage
    from aiorocket.spark import _txn

    looked_up: list[str] = []
    ended: list[tuple[str, str]] = []
    refuse = {"a-3"}

    async def addr(client: Any, topic: str, broker_name: str) -> str:
        looked_up.append(broker_name)
        return f"{broker_name}:1"

    async def end_half(broker: Any, addr: str, group: str, half: HalfMessage,
                       state: TransactionState) -> None:  # fmt: skip
        if half.msg_id in refuse:
            raise ConnectionClosedError("gone")
        ended.append((addr, half.msg_id))

    monkeypatch.setattr(_txn, "_addr", addr)
    monkeypatch.setattr(_txn, "end_half", end_half)
    halves = [HalfMessage("out", b, i, 100 + i, f"{b}-{i}") for b in "ab" for i in range(6)]
    client: Any = SimpleNamespace(broker=None)
    failed = anyio.run(_txn.end_all, client, "g", halves, TransactionState.COMMIT)
    assert [h.msg_id for h in failed] == ["a-3"]
    assert sorted(m for _, m in ended) == sorted(h.msg_id for h in halves if h.msg_id != "a-3")
    assert all(a == f"{m[0]}:1" for a, m in ended)
    # a once, b once, and a again after the failed end
    assert sorted(looked_up) == ["a", "a", "b"]


def test_half_message_handles_pickle_to_equal_handles() -> None:
    """A task's handles travel to the driver pickled (``SinkCommit``): a tuple of the
    fields (``HalfMessage.__reduce__``), with and without a transaction id."""
    import pickle

    from pyspark import cloudpickle

    from aiorocket.producer.transaction import HalfMessage
    from aiorocket.spark.sink import SinkCommit

    halves = (HalfMessage("t", "broker-a", 3, 1 << 40, "ID-1", "TX-1"),
              HalfMessage("t", "broker-b", 0, 0, "ID-2"))  # fmt: skip
    commit = SinkCommit(1, 2, "w.1.0", halves, "query")
    for dumps in (pickle.dumps, cloudpickle.dumps):
        back = pickle.loads(dumps(commit))
        assert back == commit and type(back.halves[1]) is HalfMessage
        assert back.halves[1].transaction_id is None
