"""The sink's exactly-once mode: transactional half messages the driver commits.

One in-process query (replay of a batch whose commit Spark did not log) and one crash
test: a driver process SIGKILLed at points of the batch cycle and restarted from its
checkpoint (``tests/spark/eos_driver.py``; the repeated run is
``scripts/spark_eos_crash.py``).
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

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
    filled = make_topic(20)  # one batch: each waits for a check pass (every 30 s)
    target = unique_name("eosgrpc")
    anyio.run(lambda: rocketmq.create_topic(target, queues=2, message_type="TRANSACTION"))
    ckpt = tmp_path / "ckpt"
    df = stream(filled, spark).select("body", "properties")
    sink = {"proxy": proxy, "topic": target, "deliveryGuarantee": "exactly-once"}
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


@pytest.mark.parametrize("kills", [("send:1", "recorded:2")])
def test_driver_killed_in_the_batch_cycle(
    rocketmq: LocalRocketMQ, make_topic: Callable[..., Filled],
    unique_name: Callable[[str], str], tmp_path: Path, kills: tuple[str, ...],
) -> None:  # fmt: skip
    """SIGKILL the driver while tasks send, and right after the commit record is written
    (before any end: the rows become visible through the broker's check-backs, answered
    by the restarted driver), restarting from the checkpoint each time, then a Python
    worker while its task sends (Spark retries the task): the output topic holds every
    input row exactly once. Between task success and commit, and random
    points in repeated runs: ``scripts/spark_eos_crash.py``."""
    filled = make_topic(80)
    target = unique_name("eoscrash")
    anyio.run(lambda: rocketmq.create_topic(target, queues=2))
    run = eos_driver.Run(filled.namesrv, filled.topic, target, tmp_path, per_batch=16)
    for point in kills:
        assert run.kill_at(point), f"the driver did not reach {point}"
    assert run.finish(kill_worker_at="send:3")  # and an executor's Python worker dies
    assert stored_bodies(filled.namesrv, target) == Counter(m.body for m in filled.messages)


def test_driver_killed_in_the_batch_cycle_through_the_proxy(
    rocketmq: LocalRocketMQ, make_topic: Callable[..., Filled],
    unique_name: Callable[[str], str], tmp_path: Path,
) -> None:
    """Through a Proxy: SIGKILL the driver right after the commit record of batch 0 is
    written (no row answered yet), then once it has noted its first COMMIT answers of
    batch 1 but sent none (the broker asks again about those, the restarted driver's
    replay answers them), restarting from the checkpoint each time, and a Python worker
    while its task sends: every input row is stored exactly once. Other points,
    repeated: ``scripts/spark_eos_crash.py --proxy``."""
    filled = make_topic(32)
    target = unique_name("eosgcrash")
    anyio.run(lambda: rocketmq.create_topic(target, queues=2, message_type="TRANSACTION"))
    run = eos_driver.Run(filled.namesrv, filled.topic, target, tmp_path, per_batch=16,
                         proxy=rocketmq.proxy_grpc)  # fmt: skip
    for point in ("recorded:0", "answered:1"):
        assert run.kill_at(point), f"the driver did not reach {point}"
    assert run.finish(kill_worker_at="send:1")  # the replay of batch 1 runs its tasks again
    assert stored_bodies(filled.namesrv, target) == Counter(m.body for m in filled.messages)
