"""The sink's exactly-once mode: transactional half messages the driver commits.

One in-process query (replay of a batch whose commit Spark did not log) and one crash
test per transport: a driver process SIGKILLed at one point of the batch cycle and
restarted from its checkpoint, then a Python worker killed while it sends
(``tests/spark/eos_driver.py``). Every kill point, each in turn, and repeated runs:
``scripts/spark_eos_crash.py --cover`` (``--proxy``).
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import pytest
from pyspark.sql import SparkSession

from aiorocket.testing.broker import LocalRocketMQ
from tests.spark import eos_driver
from tests.spark.conftest import Filled
from tests.spark.test_stream import forget_last_commit, run_available_now, stream

pytestmark = pytest.mark.integration


def stored_bodies(namesrv: str, topic: str) -> Counter[bytes]:
    """Every message stored in ``topic`` (each queue from 0 to its end), by body."""
    return Counter(eos_driver.stored(namesrv, topic))


def test_replayed_batch_is_rolled_back(
    spark: SparkSession, make_topic: Callable[..., Filled], rocketmq: LocalRocketMQ,
    unique_name: Callable[[str], str], tmp_path: Path,
) -> None:  # fmt: skip
    filled = make_topic(30)
    target = unique_name("eos")
    anyio.run(lambda: rocketmq.create_topic(target, queues=2))
    ckpt = tmp_path / "ckpt"
    df = stream(filled, spark, maxOffsetsPerTrigger="12").select("body", "properties")
    sink = {"nameServer": filled.namesrv, "topic": target, "deliveryGuarantee": "exactly-once"}
    assert sum(run_available_now(df, "rocketmq", ckpt, **sink)) == 30
    batch = forget_last_commit(ckpt)  # as if the driver died after our commit, before Spark's
    assert (ckpt / "rocketmq-sink" / f"{batch}.done").exists()
    run_available_now(df, "rocketmq", ckpt, **sink)  # the batch again: its rows roll back
    expected = Counter(m.body for m in filled.messages)
    assert stored_bodies(filled.namesrv, target) == expected  # each row once, no copy


@pytest.mark.parametrize("mode", ["local", "cluster"])
def test_through_the_proxy_each_row_once_and_a_replay_rolls_back(
    spark: SparkSession, make_topic: Callable[..., Filled], rocketmq: LocalRocketMQ,
    unique_name: Callable[[str], str], tmp_path: Path, request: pytest.FixtureRequest,
    mode: str,
) -> None:  # fmt: skip
    """Option proxy: half messages over gRPC, committed by the driver's answers to the
    broker's check-backs (``aiorocket.spark._grpc``); a batch run again after its commit
    record was done rolls its new rows back. Through the cluster's local-mode Proxy (it
    runs the broker's end itself) and a cluster-mode one (ends go to both brokers one
    way, check-backs come through the Proxy's remoting client)."""
    proxy = rocketmq.proxy_grpc if mode == "local" else request.getfixturevalue("lite_proxy")
    filled = make_topic(20)  # one batch: each waits for a check pass (10 s apart in a test session)
    target = unique_name("eosgrpc")
    anyio.run(lambda: rocketmq.create_topic(target, queues=2, message_type="TRANSACTION"))
    ckpt = tmp_path / "ckpt"
    df = stream(filled, spark).select("body", "properties")
    sink = {"proxy": proxy, "topic": target, "deliveryGuarantee": "exactly-once",
            "transactionCheckIntervalSeconds": eos_driver.check_interval(filled.namesrv)}
    assert run_available_now(df, "rocketmq", ckpt, **sink) == [20]
    expected = Counter(m.body for m in filled.messages)
    # A commit returns once each row of its batch was answered COMMIT (noted on disk
    # before the answer leaves); the broker stores it as it gets the answer.
    deadline = time.monotonic() + 30
    while stored_bodies(filled.namesrv, target) != expected and time.monotonic() < deadline:
        time.sleep(0.5)
    assert stored_bodies(filled.namesrv, target) == expected
    batch = forget_last_commit(ckpt)
    txn_dir = ckpt / "rocketmq-sink"
    record = json.loads((txn_dir / f"{batch}.json").read_text())
    rows = {r[2] for rs in record["txns"].values() for r in rs}
    assert (txn_dir / f"{batch}.done").exists()
    assert set((txn_dir / f"{batch}.answered").read_text().split()) == rows
    run_available_now(df, "rocketmq", ckpt, **sink)  # the batch again: its rows roll back
    assert stored_bodies(filled.namesrv, target) == expected


def test_exactly_once_errors(spark: SparkSession, rocketmq: LocalRocketMQ) -> None:
    df = spark.createDataFrame([(b"x",)], "body binary")
    w = df.write.format("rocketmq").option("nameServer", rocketmq.namesrv_addr)
    w = w.option("topic", "t").option("deliveryGuarantee", "exactly-once").mode("append")
    with pytest.raises(Exception, match=r"(?s)ConfigError.*applies to writeStream"):
        w.save()
    w = w.option("deliveryGuarantee", "twice")
    with pytest.raises(Exception, match=r"(?s)ConfigError.*" + re.escape("at-least-once or")):
        w.save()


def test_driver_killed_in_the_batch_cycle(
    rocketmq: LocalRocketMQ, make_topic: Callable[..., Filled],
    unique_name: Callable[[str], str], tmp_path: Path,
) -> None:  # fmt: skip
    """SIGKILL the driver right after the commit record of batch 2 is written (before
    any end: the rows become visible through the broker's check-backs, answered by the
    restarted driver), restart it from the checkpoint, then kill a Python worker while
    its task sends (Spark retries the task: the killed attempt's half messages, in no
    record, are rolled back): the output topic holds every input row exactly once.
    The driver killed while its tasks send (a kill point of this test until 2026-11-30;
    its orphaned half messages are rolled back as the killed worker's are), between
    task success and commit, and after the ends: ``scripts/spark_eos_crash.py --cover``."""
    filled = make_topic(80)
    target = unique_name("eoscrash")
    anyio.run(lambda: rocketmq.create_topic(target, queues=2))
    run = eos_driver.Run(filled.namesrv, filled.topic, target, tmp_path, per_batch=16)
    assert run.kill_at("recorded:2"), "the driver did not reach recorded:2"
    assert run.finish(kill_worker_at="send:3")  # and an executor's Python worker dies
    assert stored_bodies(filled.namesrv, target) == Counter(m.body for m in filled.messages)


def test_driver_killed_in_the_batch_cycle_through_the_proxy(
    rocketmq: LocalRocketMQ, make_topic: Callable[..., Filled],
    unique_name: Callable[[str], str], tmp_path: Path,
) -> None:
    """Through a Proxy: SIGKILL the driver once it has noted its first COMMIT answers
    of batch 1 but sent none (the broker asks again about those, and about the rows not
    noted yet: the restarted driver's replay answers both from the record), restart it
    from the checkpoint, and kill a Python worker while its task sends: every input row
    is stored exactly once. The driver killed right after a commit record, no row
    answered yet (a kill point of this test until 2026-11-30), and the other points:
    ``scripts/spark_eos_crash.py --proxy --cover``."""
    filled = make_topic(32)
    target = unique_name("eosgcrash")
    anyio.run(lambda: rocketmq.create_topic(target, queues=2, message_type="TRANSACTION"))
    run = eos_driver.Run(filled.namesrv, filled.topic, target, tmp_path, per_batch=16,
                         proxy=rocketmq.proxy_grpc)  # fmt: skip
    assert run.kill_at("answered:1"), "the driver did not reach answered:1"
    assert run.finish(kill_worker_at="send:1")  # the replay of batch 1 runs its tasks again
    assert stored_bodies(filled.namesrv, target) == Counter(m.body for m in filled.messages)


def _failing_once(flag: Path) -> type:
    """A ``rocketmq`` format whose driver commit fails once ``flag`` exists (removing it)
    right after writing its record: the check-back registration (``accept_checks``) is
    refused. Defined here, not at module level, so that Spark's Python workers get the
    classes by value."""
    from aiorocket.spark.sink import RocketMQStreamWriter
    from aiorocket.spark.source import RocketMQDataSource

    path = str(flag)

    class Writer(RocketMQStreamWriter):
        def commit(self, messages: list[Any], batchId: int) -> None:
            import os

            from aiorocket.errors import AccessDeniedError
            from aiorocket.producer.producer import Producer
            from aiorocket.spark import sink

            sink._CHECK_BACK_WAIT = 60.0  # a replay waiting for lost rows fails in time
            if not os.path.exists(path):
                super().commit(messages, batchId)
                return
            os.unlink(path)
            accept = Producer.accept_checks

            async def refused(self: Producer, *topics: str) -> None:
                raise AccessDeniedError(16, "refused by the test")

            Producer.accept_checks = refused  # type: ignore[method-assign]
            try:
                super().commit(messages, batchId)
            finally:
                Producer.accept_checks = accept  # type: ignore[method-assign]

    class Source(RocketMQDataSource):
        @classmethod
        def name(cls) -> str:
            return "rocketmq_fails_once"

        def streamWriter(self, schema: Any, overwrite: bool) -> Any:
            from aiorocket.spark._options import parse_write

            return Writer(parse_write(self.options), schema)

    return Source


def test_a_commit_failing_after_its_record_loses_no_row(
    spark: SparkSession, make_topic: Callable[..., Filled], rocketmq: LocalRocketMQ,
    unique_name: Callable[[str], str], tmp_path: Path,
) -> None:  # fmt: skip
    """The driver's commit writes its record, then raises; Spark aborts the batch. The
    abort rolled back every row, the recorded ones too, and the restarted query waited
    for rows that could never come (5 of 5 lost on the real broker). Now it rolls back
    none of them, the query fails with the typed error, and the restart's replay gets
    them committed by the broker's check-backs (one check pass: up to 10 s in a test
    session, 30 s by default).
    ``transactionTimeoutSeconds`` 20: the abort's ROLLBACK must come within it to take
    effect (later the broker refuses a client's end), also on a loaded machine (with 6,
    the old abort's came too late there and the test passed before the fix)."""
    filled = make_topic(6)
    target = unique_name("eosfail")
    anyio.run(lambda: rocketmq.create_topic(target, queues=2))
    flag = tmp_path / "fail"
    flag.touch()
    spark.dataSource.register(_failing_once(flag))
    ckpt = tmp_path / "ckpt"
    df = stream(filled, spark).select("body", "properties")
    sink = {"nameServer": filled.namesrv, "topic": target, "deliveryGuarantee": "exactly-once",
            "transactionTimeoutSeconds": "20"}  # fmt: skip
    with pytest.raises(Exception, match="AccessDeniedError") as failed:
        run_available_now(df, "rocketmq_fails_once", ckpt, **sink)
    assert "ExceptionGroup" not in str(failed.value)
    assert not flag.exists() and (ckpt / "rocketmq-sink" / "0.json").exists()
    assert run_available_now(df, "rocketmq_fails_once", ckpt, **sink) == [6]  # the replay
    assert stored_bodies(filled.namesrv, target) == Counter(m.body for m in filled.messages)


def test_two_queries_side_by_side(
    spark: SparkSession, make_topic: Callable[..., Filled], rocketmq: LocalRocketMQ,
    unique_name: Callable[[str], str], tmp_path: Path,
) -> None:  # fmt: skip
    """Two queries sharing a producerGroup write at once: each row's half message and
    each record name its query (a check-back of the other's row is answered UNKNOWN); a
    third query pointed at the first one's transaction log is refused before it records.
    The second starts once the first has run a batch (two queries starting at once on
    the 2-core test machine: Spark's Python workers may not connect back in time)."""
    group = unique_name("shared")
    queries = []
    for name in ("a", "b"):
        filled = make_topic(6)
        target = unique_name(f"eosside{name}")
        anyio.run(partial(rocketmq.create_topic, target, queues=2))
        df = stream(filled, spark, maxOffsetsPerTrigger="2").select("body", "properties")
        w = df.writeStream.format("rocketmq").option("checkpointLocation", str(tmp_path / name))
        w = w.option("nameServer", filled.namesrv).option("topic", target)
        w = w.option("deliveryGuarantee", "exactly-once").option("producerGroup", group)
        query = w.trigger(availableNow=True).start()
        while not query.recentProgress and query.isActive:
            time.sleep(0.2)
        queries.append((name, query, target, Counter(m.body for m in filled.messages)))
    for name, query, target, want in queries:
        assert query.awaitTermination(120) and query.exception() is None
        assert stored_bodies(rocketmq.namesrv_addr, target) == want
        record = json.loads((tmp_path / name / "rocketmq-sink" / "0.json").read_text())
        assert record["query"] == query.id
        stored = eos_driver.stored_messages(rocketmq.namesrv_addr, target)
        assert {m.properties["sparkTxn"].split(":")[1] for m in stored} == {query.id}
    filled = make_topic(3)
    target = unique_name("eossidec")
    anyio.run(lambda: rocketmq.create_topic(target, queues=2))
    df = stream(filled, spark).select("body", "properties")
    with pytest.raises(Exception, match=r"(?s)ConfigError.*another query"):
        run_available_now(df, "rocketmq", tmp_path / "c", nameServer=filled.namesrv,
                          topic=target, deliveryGuarantee="exactly-once",
                          transactionLog=str(tmp_path / "a" / "rocketmq-sink"))  # fmt: skip
    assert stored_bodies(rocketmq.namesrv_addr, target) == Counter()

