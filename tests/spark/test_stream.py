"""Micro-batch streaming: rate limits, AvailableNow, restarts from the checkpoint, the
rocketmq sink's deterministic keys, group commits, and data loss."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from pyspark.sql import DataFrame, SparkSession

from aiorocket.client.instance import ClientInstance
from aiorocket.testing.broker import LocalRocketMQ
from tests.spark.conftest import Filled, fill, message
from tests.spark.test_sink import DEDUP, consume_all


def stream(filled: Filled, spark: SparkSession, **options: str) -> DataFrame:
    r = spark.readStream.format("rocketmq").option("nameServer", filled.namesrv)
    r = r.option("subscribe", filled.topic).option("startingOffsets", "earliest")
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def run_available_now(
    df: DataFrame, fmt: str, checkpoint: Path, name: str | None = None, **options: str
) -> list[int]:
    """Run ``df`` into ``fmt`` with Trigger.AvailableNow until it stops by itself; the
    number of input rows of each micro-batch that had any."""
    return [n for n in run_batches(df, fmt, checkpoint, name, **options) if n]


def run_batches(
    df: DataFrame, fmt: str, checkpoint: Path, name: str | None = None, **options: str
) -> list[int]:
    """As :func:`run_available_now`, every micro-batch's input rows, empty ones too."""
    w = df.writeStream.format(fmt).option("checkpointLocation", str(checkpoint))
    if name is not None:
        w = w.queryName(name)
    for k, v in options.items():
        w = w.option(k, v)
    query = w.trigger(availableNow=True).start()
    assert query.awaitTermination(180), "AvailableNow query did not stop by itself"
    assert query.exception() is None, query.exception()
    return [p["numInputRows"] for p in query.recentProgress]


def last_offsets(checkpoint: Path) -> tuple[int, dict[str, Any]]:
    """The last micro-batch id of the offset log and our offset JSON in it."""
    batch = max(int(p.name) for p in (checkpoint / "offsets").iterdir() if p.name.isdigit())
    lines = (checkpoint / "offsets" / str(batch)).read_text().splitlines()
    return batch, json.loads(lines[-1])


def forget_last_commit(checkpoint: Path) -> int:
    """As if the query died after logging its last batch's offsets, before committing it:
    a restart runs that batch again."""
    batch, _ = last_offsets(checkpoint)
    (checkpoint / "commits" / str(batch)).unlink()
    (checkpoint / "commits" / f".{batch}.crc").unlink(missing_ok=True)  # Hadoop's checksum
    return batch


def test_rate_limited_stream_restarts_exactly_once(
    spark: SparkSession, make_topic: Callable[..., Filled], tmp_path: Path
) -> None:
    filled = make_topic(48)
    group = f"g_{filled.topic}"
    ckpt, out = tmp_path / "ckpt", tmp_path / "out"
    df = stream(filled, spark, maxOffsetsPerTrigger="10", commitOffsetsToGroup=group)
    df = df.select("brokerName", "queueId", "queueOffset", "body")
    sizes = run_available_now(df, "parquet", ckpt, path=str(out))
    assert sum(sizes) == 48 and max(sizes) <= 10 and len(sizes) >= 5, sizes
    _, offsets = last_offsets(ckpt)
    ends = Counter((s.queue.broker_name, s.queue.queue_id) for s in filled.sent)
    assert offsets == {filled.topic: {b: {str(q): ends[(b, q)] for (bb, q) in ends if bb == b}
                                      for b in ("broker-a", "broker-b")}}  # fmt: skip

    # After the last micro-batch the group shows where the query stopped.
    _, final = last_offsets(ckpt)

    async def committed() -> dict[str, dict[str, dict[str, int | None]]]:
        async with ClientInstance(filled.namesrv) as client:
            route = await client.namesrv.query_route(filled.topic)
            out: dict[str, dict[str, int | None]] = {}
            for mq in route.read_queues():
                addr = route.master_addr(mq.broker_name)
                assert addr is not None
                offset = await client.broker.query_consumer_offset(addr, group, mq)
                out.setdefault(mq.broker_name, {})[str(mq.queue_id)] = offset
            return {filled.topic: out}

    assert anyio.run(committed) == final  # lag tools see the query's progress

    more = [message(filled.topic, i) for i in range(48, 72)]
    anyio.run(fill, filled.namesrv, filled.topic, more)
    forget_last_commit(ckpt)
    sizes = run_available_now(df, "parquet", ckpt, path=str(out))
    assert max(sizes) <= 10
    rows = spark.read.parquet(str(out)).collect()
    positions = [(r.brokerName, r.queueId, r.queueOffset) for r in rows]
    assert len(positions) == len(set(positions)) == 72  # none twice, none skipped
    assert sorted(r.body for r in rows) == sorted(m.body for m in filled.messages + more)


def test_stream_to_rocketmq_sink_replays_with_the_same_keys(
    spark: SparkSession,
    make_topic: Callable[..., Filled],
    rocketmq: LocalRocketMQ,
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    filled = make_topic(20)
    target = unique_name("out")
    anyio.run(lambda: rocketmq.create_topic(target, queues=2))
    ckpt = tmp_path / "ckpt"
    df = stream(filled, spark, maxOffsetsPerTrigger="8").select("body", "tags", "properties")
    sink = {"nameServer": filled.namesrv, "topic": target}
    # A named query: Spark hands the sink queryName and checkpointLocation too.
    run_available_now(df, "rocketmq", ckpt, name=f"q_{target}", **sink)
    forget_last_commit(ckpt)  # the restart sends the last batch again
    run_available_now(df, "rocketmq", ckpt, name=f"q_{target}", **sink)
    batch, _ = last_offsets(ckpt)
    replayed = 20 - (batch * 8 if batch * 8 < 20 else 0)
    got = consume_all(filled.namesrv, target, 20 + replayed)
    bodies_by_key: dict[str, set[bytes]] = {}
    for m in got:
        bodies_by_key.setdefault(m.properties[DEDUP], set()).add(m.body)
    # Every source message arrived, and each copy of a replayed one has the same key.
    assert len(bodies_by_key) == 20
    assert all(len(b) == 1 for b in bodies_by_key.values())
    assert sorted(b for bs in bodies_by_key.values() for b in bs) == sorted(
        m.body for m in filled.messages
    )
    assert len(got) > 20  # the last batch really was sent twice


def test_stream_of_an_empty_topic_runs_empty_batches(
    spark: SparkSession, make_topic: Callable[..., Filled], tmp_path: Path
) -> None:
    """The first micro-batch of an empty topic has start == end: no partitions, Spark's
    placeholder task reads nothing; a stream joined to it still gets all its rows."""
    empty, full = make_topic(0, queues=1), make_topic(6, queues=1)
    batches = run_batches(stream(empty, spark).select("body"), "noop", tmp_path / "a")
    assert batches == [0]
    both = stream(empty, spark).select("body").union(stream(full, spark).select("body"))
    assert sum(run_batches(both, "noop", tmp_path / "b")) == 6


def test_data_loss_after_the_topic_was_recreated(
    spark: SparkSession, make_topic: Callable[..., Filled], rocketmq: LocalRocketMQ,
    tmp_path: Path,
) -> None:  # fmt: skip
    filled = make_topic(8, queues=1)
    ckpt, out = tmp_path / "ckpt", tmp_path / "out"
    assert sum(run_available_now(stream(filled, spark).select("body"), "parquet", ckpt,
                                 path=str(out))) == 8  # fmt: skip
    anyio.run(rocketmq.delete_topic, filled.topic)
    again = [message(filled.topic, i) for i in (100, 101)]

    async def recreate() -> None:
        await rocketmq.create_topic(filled.topic, queues=1)
        await fill(filled.namesrv, filled.topic, again)

    anyio.run(recreate)
    # The checkpoint says "next offset 2..3" for queues that now end at 0..2.
    query = (
        stream(filled, spark).select("body").writeStream.format("parquet")
        .option("checkpointLocation", str(ckpt)).option("path", str(out))
        .trigger(availableNow=True).start()
    )  # fmt: skip
    with pytest.raises(Exception, match=r"(?s)DataLossError.*failOnDataLoss"):
        query.awaitTermination(180)
    sizes = run_available_now(stream(filled, spark, failOnDataLoss="false").select("body"),
                              "parquet", ckpt, path=str(out))  # fmt: skip
    assert sum(sizes) == 2
    bodies = sorted(r.body for r in spark.read.parquet(str(out)).collect())
    assert bodies == sorted(m.body for m in filled.messages + again)

    # A batch read of offsets the queue no longer has (past its new end).
    q = next(s.queue for s in filled.sent if s.queue_offset == 3)
    spec = {filled.topic: {q.broker_name: {str(q.queue_id): 3}}}
    end = {filled.topic: {q.broker_name: {str(q.queue_id): 4}}}
    opts = {"assign": json.dumps({filled.topic: {q.broker_name: [q.queue_id]}}),
            "startingOffsets": json.dumps(spec), "endingOffsets": json.dumps(end)}  # fmt: skip
    with pytest.raises(Exception, match=r"(?s)DataLossError.*no longer available"):
        filled.reader(spark, **opts).load().collect()
    assert filled.reader(spark, failOnDataLoss="false", **opts).load().count() == 0


def test_available_now_stops_at_what_was_there_when_it_started(
    spark: SparkSession, make_topic: Callable[..., Filled], tmp_path: Path
) -> None:
    filled = make_topic(12, queues=1)
    late = [message(filled.topic, i) for i in range(100, 110)]
    seen: list[int] = []

    def per_batch(batch: DataFrame, batch_id: int) -> None:
        seen.append(batch.count())
        if batch_id == 0:  # messages arriving while the query runs are not its business
            anyio.run(fill, filled.namesrv, filled.topic, late)

    query = (
        stream(filled, spark, maxOffsetsPerTrigger="4").writeStream.foreachBatch(per_batch)
        .option("checkpointLocation", str(tmp_path / "ckpt")).trigger(availableNow=True).start()
    )  # fmt: skip
    assert query.awaitTermination(180) and query.exception() is None
    assert sum(seen) == 12 and max(seen) <= 4, seen
