"""The exactly-once sink's commit records and the check-back answers they give
(the visibility query of a committed row is covered against the broker in
tests/spark/test_exactly_once.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from aiorocket.message import MessageExt
from aiorocket.producer.transaction import TransactionState
from aiorocket.spark._txn import KEEP, TXN_PROPERTY, TxnLog, verdict


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
    assert log.read(0) == {"run1.0.7": [("out", "broker-a", "ID1")]}
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
        ("4:t4", TransactionState.UNKNOWN),  # the newest batch may still commit
        ("5:t5", TransactionState.UNKNOWN),
        ("2:t2", TransactionState.ROLLBACK),  # no record, later batches have one
        ("3:other", TransactionState.ROLLBACK),  # a txn the record does not list
    ],
)
def test_check_back_answers(tmp_path: Path, tag: str | None, state: TransactionState) -> None:
    log = TxnLog(str(tmp_path))
    assert log.write(3, {"t3": [("out", "broker-a", "ID")]})
    assert answer(log, tag) is state


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
        ("4:t4", None),  # the newest batch may still commit
        ("2:t2", False),  # no record, later batches have one
        ("3:other", False),  # a txn the record does not list
        ("3:t3", True),  # committed: every check-back of its row is answered COMMIT
    ],
)
def test_check_back_answers_over_grpc(tmp_path: Path, tag: str | None,
                                      verdict_: bool | None) -> None:  # fmt: skip
    log = TxnLog(str(tmp_path))
    assert log.write(3, {"t3": [("out", "", "ID")]})
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
    assert log.write(3, {"t3": [("out", "", i) for i in ids]})
    writes: list[int] = []
    note = log.note_answered

    def counted(pending: dict[int, list[str]]) -> None:
        writes.append(sum(map(len, pending.values())))
        note(pending)

    log.note_answered = counted  # type: ignore[method-assign]
    answers = Answers(log)

    async def run() -> None:
        async def one(i: str) -> None:
            m = msg("3:t3")
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
