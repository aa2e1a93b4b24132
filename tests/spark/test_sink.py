"""The sink: DataFrames written to a topic come back identical through aiorocket's consumer."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest
from pyspark.sql import SparkSession

from aiorocket.consumer.config import ConsumeFromWhere
from aiorocket.consumer.pull_consumer import PullConsumer
from aiorocket.received import ConsumerMessage
from aiorocket.testing.broker import LocalRocketMQ

DEDUP = "sparkDedupKey"


def consume_all(namesrv: str, topic: str, count: int) -> list[ConsumerMessage]:
    """Every message of ``topic`` from offset 0, through aiorocket's PullConsumer."""

    async def run() -> list[ConsumerMessage]:
        out: list[ConsumerMessage] = []
        consumer = PullConsumer(
            f"check-{topic}", namesrv, auto_commit=False,
            consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
        )  # fmt: skip
        consumer.subscribe(topic)
        async with consumer:
            with anyio.fail_after(60):
                while len(out) < count:
                    for msgs in (await consumer.getmany(timeout=5.0, max_records=100)).values():
                        out.extend(msgs)
        return out

    return anyio.run(run)


def test_dataframe_round_trips_through_the_consumer(
    spark: SparkSession, rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    topic = unique_name("sink")
    anyio.run(lambda: rocketmq.create_topic(topic, queues=2))
    rows = [
        (f"body-{i}".encode(), f"tag{i % 3}", [f"k{i}", f"x{i}"], {"n": str(i), "c": "v"})
        for i in range(30)
    ]
    df = spark.createDataFrame(
        rows, "body binary, tags string, keys array<string>, properties map<string,string>"
    ).repartition(3)
    df.write.format("rocketmq").option("nameServer", rocketmq.namesrv_addr).option(
        "topic", topic
    ).mode("append").save()
    got = consume_all(rocketmq.namesrv_addr, topic, len(rows))
    assert len(got) == len(rows)
    expected = {r[0]: r for r in rows}
    seen_keys = set()
    for msg in got:
        _, tags, keys, props = expected.pop(msg.body)
        assert msg.tags == tags
        assert msg.keys == keys
        user = {k: v for k, v in msg.properties.items() if k in props}
        assert user == props
        dedup = msg.properties[DEDUP]
        assert re.fullmatch(r"[0-9a-f]{32}-0-[0-2]-\d+", dedup), dedup
        seen_keys.add(dedup)
    assert not expected
    assert len(seen_keys) == len(rows)  # one deterministic id per (write, partition, row)


def test_topic_column_and_string_body(
    spark: SparkSession, rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    topic = unique_name("sinkcol")
    anyio.run(lambda: rocketmq.create_topic(topic, queues=1))
    df = spark.createDataFrame([(topic, f"text-{i}", "a b") for i in range(5)],
                               "topic string, body string, keys string")  # fmt: skip
    df.write.format("rocketmq").option("nameServer", rocketmq.namesrv_addr).option(
        "dedupKeyProperty", ""
    ).mode("append").save()
    got = consume_all(rocketmq.namesrv_addr, topic, 5)
    assert sorted(m.body for m in got) == [f"text-{i}".encode() for i in range(5)]
    assert all(m.keys == ["a", "b"] and DEDUP not in m.properties for m in got)


@pytest.mark.parametrize(
    ("ddl", "options", "needle"),
    [
        ("value binary", {"topic": "t"}, "needs a 'body' column"),
        ("body binary", {}, "needs the option topic or a 'topic' column"),
        ("body int", {"topic": "t"}, "column 'body' must be binary or string, not int"),
        ("body binary, tag string", {"topic": "t"}, "column 'tag' is not understood"),
        ("body binary, keys map<string,string>", {"topic": "t"}, "column 'keys' must be"),
        ("body binary", {"topic": "no_such_topic_sink"}, "does not exist (option topic)"),
        ("body binary", {"topic": "t", "sendTimeoutMs": "soon"}, "sendTimeoutMs must be"),
        ("body binary", {"topic": "no_such_topic_sink", "proxy": "P"}, "does not exist (option"),
        ("body binary, delayLevel int", {"topic": "t", "proxy": "P"}, "through a Proxy use"),
        # Spark's own options (path, queryName, checkpointLocation) pass; a misspelt one not
        ("body binary", {"topic": "t", "path": "p", "topik": "t"}, "sink option(s): topik"),
    ],
)
def test_clear_errors_at_save(
    spark: SparkSession, rocketmq: LocalRocketMQ, ddl: str, options: dict[str, str], needle: str
) -> None:
    df = spark.createDataFrame([], ddl)
    writer = df.write.format("rocketmq")
    if options.get("proxy") == "P":  # the same through the local Proxy
        options = {**options, "proxy": rocketmq.proxy_grpc}
    else:
        writer = writer.option("nameServer", rocketmq.namesrv_addr)
    for k, v in options.items():
        writer = writer.option(k, v)
    with pytest.raises(Exception, match=r"(?s)ConfigError.*" + re.escape(needle)):
        writer.mode("append").save()


def test_delay_level_and_delivery_time_columns(
    spark: SparkSession, rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    topic = unique_name("sinkdelay")
    anyio.run(lambda: rocketmq.create_topic(topic, queues=1))
    at = int(time.time() * 1000) + 2000
    df = spark.createDataFrame(
        [(b"level", 1, None), (b"timer", None, at), (b"now", None, None)],
        "body binary, delayLevel int, deliverTimeMs bigint",
    )
    df.write.format("rocketmq").option("nameServer", rocketmq.namesrv_addr).option(
        "topic", topic
    ).mode("append").save()
    got = {m.body: m for m in consume_all(rocketmq.namesrv_addr, topic, 3)}
    # Delayed messages are stored again in the topic when they are due.
    assert got[b"level"].store_timestamp - got[b"level"].born_timestamp >= 900  # level 1: 1 s
    assert got[b"timer"].store_timestamp >= at - 100  # the timer wheel's tick
    assert got[b"now"].store_timestamp - got[b"now"].born_timestamp < 900


def test_write_and_stream_through_the_proxy(
    spark: SparkSession, rocketmq: LocalRocketMQ, unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:  # fmt: skip
    """Option proxy: the rows go out over gRPC (a 5.x Proxy) with the same tags, keys,
    properties and deterministic ids as through the NameServer."""
    from tests.spark.conftest import create_and_fill
    from tests.spark.test_stream import run_available_now, stream

    topic = unique_name("sinkgrpc")
    anyio.run(lambda: rocketmq.create_topic(topic, queues=2))
    rows = [(f"body-{i}".encode(), f"tag{i % 3}", [f"k{i}"], {"n": str(i)}) for i in range(20)]
    df = spark.createDataFrame(
        rows, "body binary, tags string, keys array<string>, properties map<string,string>"
    )
    df.repartition(2).write.format("rocketmq").option("proxy", rocketmq.proxy_grpc).option(
        "topic", topic
    ).mode("append").save()
    got = {m.body: m for m in consume_all(rocketmq.namesrv_addr, topic, len(rows))}
    assert sorted(got) == sorted(r[0] for r in rows)
    for body, tags, keys, props in rows:
        m = got[body]
        assert (m.tags, m.keys, m.properties["n"]) == (tags, keys, props["n"])
    assert len({m.properties[DEDUP] for m in got.values()}) == len(rows)

    # A stream into the Proxy: every source row once (no fault), keyed by batch and row.
    filled = create_and_fill(rocketmq, unique_name("srcgrpc"), 12)
    out = unique_name("outgrpc")
    anyio.run(lambda: rocketmq.create_topic(out, queues=2))
    sdf = stream(filled, spark, maxOffsetsPerTrigger="5").select("body")
    run_available_now(sdf, "rocketmq", tmp_path / "ckpt", proxy=rocketmq.proxy_grpc, topic=out)
    streamed = consume_all(rocketmq.namesrv_addr, out, 12)
    assert sorted(m.body for m in streamed) == sorted(m.body for m in filled.messages)
