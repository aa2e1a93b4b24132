"""Batch reads of a topic on both brokers: every message once, fields, offsets, filters."""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

import pytest
from pyspark.sql import SparkSession

from aiorocket.testing.broker import LocalRocketMQ
from tests.spark.conftest import Filled, create_and_fill

COUNT = 40


@pytest.fixture(scope="module")
def filled(rocketmq: LocalRocketMQ) -> Filled:
    return create_and_fill(rocketmq, f"spark_batch_{uuid.uuid4().hex[:8]}", COUNT, split=True)


def _pos(row: Any) -> tuple[str, int, int]:
    return (row.brokerName, row.queueId, row.queueOffset)


def test_reads_every_message_once_with_its_fields(spark: SparkSession, filled: Filled) -> None:
    rows = filled.reader(spark).load().collect()
    assert len(rows) == COUNT
    by_pos = {_pos(r): r for r in rows}
    assert len(by_pos) == COUNT
    assert {r.brokerName for r in rows} == {"broker-a", "broker-b"}
    for i, (sent, msg) in enumerate(zip(filled.sent, filled.messages, strict=True)):
        row = by_pos[(sent.queue.broker_name, sent.queue.queue_id, sent.queue_offset)]
        assert row.topic == filled.topic
        assert row.msgId == sent.msg_id
        assert row.body == msg.body
        assert row.tags == msg.tags
        assert row.keys == f"key-{i} alt-{i}"
        assert row.properties == msg.properties  # system properties left out
        assert row.storeTimestamp >= row.bornTimestamp.replace(microsecond=0)
        assert row.storeHost and row.bornHost
        assert row.reconsumeTimes == 0 and row.flag == 0


def test_system_properties_on_request(spark: SparkSession, filled: Filled) -> None:
    row = filled.reader(spark, includeSystemProperties="true").load().first()
    assert row is not None
    assert row.properties["UNIQ_KEY"] == row.msgId
    assert row.properties["TAGS"] == row.tags


def test_offset_json_selects_exact_rows(spark: SparkSession, filled: Filled) -> None:
    q = filled.sent[0].queue
    start = {filled.topic: {q.broker_name: {str(q.queue_id): 1}}}
    end = {filled.topic: {q.broker_name: {str(q.queue_id): 3}}}
    assign = {filled.topic: {q.broker_name: [q.queue_id]}}
    rows = (
        filled.reader(spark, assign=json.dumps(assign), startingOffsets=json.dumps(start),
                      endingOffsets=json.dumps(end))
        .load().collect()
    )  # fmt: skip
    assert sorted(_pos(r) for r in rows) == [
        (q.broker_name, q.queue_id, 1),
        (q.broker_name, q.queue_id, 2),
    ]
    # Unnamed queues start at earliest / end at latest; -2 is earliest.
    start_all = {filled.topic: {q.broker_name: {str(q.queue_id): -2}}}
    end_one = {filled.topic: {q.broker_name: {str(q.queue_id): 1}}}
    rows = filled.reader(spark, startingOffsets=json.dumps(start_all),
                         endingOffsets=json.dumps(end_one)).load().collect()  # fmt: skip
    in_q = [r for r in rows if (r.brokerName, r.queueId) == (q.broker_name, q.queue_id)]
    assert [r.queueOffset for r in in_q] == [0]
    assert len(rows) == COUNT - sum(1 for s in filled.sent if s.queue == q) + 1


def test_timestamps_select_exact_rows(spark: SparkSession, filled: Filled) -> None:
    half = COUNT // 2
    late = {s.msg_id for s in filled.sent[half:]}
    rows = filled.reader(spark, startingTimestamp=str(filled.split_ms)).load().collect()
    assert {r.msgId for r in rows} == late
    rows = filled.reader(spark, endingTimestamp=str(filled.split_ms)).load().collect()
    assert {r.msgId for r in rows} == {s.msg_id for s in filled.sent[:half]}
    q = filled.sent[0].queue
    by_ts = {filled.topic: {q.broker_name: {str(q.queue_id): filled.split_ms}}}
    rows = filled.reader(spark, startingOffsetsByTimestamp=json.dumps(by_ts)).load().collect()
    expected = {s.msg_id for i, s in enumerate(filled.sent) if s.queue != q or i >= half}
    assert {r.msgId for r in rows} == expected


def test_tag_and_sql_filters(spark: SparkSession, filled: Filled) -> None:
    rows = filled.reader(spark, subExpression="even").load().collect()
    assert sorted(int(r.properties["n"]) for r in rows) == list(range(0, COUNT, 2))
    rows = filled.reader(spark, filterSql="color = 'red' AND n > 10").load().collect()
    expected = [i for i in range(COUNT) if i % 3 == 0 and i > 10]
    assert sorted(int(r.properties["n"]) for r in rows) == expected


def test_pattern_subscription(spark: SparkSession, filled: Filled) -> None:
    df = filled.reader(spark, subscribePattern=filled.topic[:-3] + "...").load()
    assert df.count() == COUNT


def test_partitions_split_and_narrow_schema(spark: SparkSession, filled: Filled) -> None:
    plain = filled.reader(spark).load()
    assert plain.rdd.getNumPartitions() == 4  # one per queue (2 brokers x 2)
    df = filled.reader(spark, maxRecordsPerPartition="3").load()
    assert df.rdd.getNumPartitions() >= COUNT // 3
    assert df.count() == COUNT
    df = filled.reader(spark, minPartitions="9").load()
    assert df.rdd.getNumPartitions() >= 9
    narrow = filled.reader(spark).schema("queueOffset bigint, body binary").load()
    assert narrow.columns == ["queueOffset", "body"]
    assert sorted(r.body for r in narrow.collect()) == sorted(m.body for m in filled.messages)


@pytest.mark.parametrize(
    ("options", "needle"),
    [
        ({"nameServer": "127.0.0.1:1"}, "NameServer"),
        ({"subscribe": "no_such_topic_spark"}, "topic 'no_such_topic_spark' does not exist"),
        ({"startingOffsets": '{"t": {"broker-a": {"0": 1}'}, "startingOffsets is not valid JSON"),
        ({"startingOffsets": '{"t": [1]}'}, "startingOffsets must look like"),
        ({"maxRecordsPerPartition": "many"}, "maxRecordsPerPartition must be an integer"),
        ({"failOnDataLoss": "yes"}, "failOnDataLoss must be true or false"),
        ({"startingOffset": "earliest"}, "unknown rocketmq source option(s): startingoffset"),
        ({"subExpression": "a", "filterSql": "a > 1"}, "cannot be combined"),
    ],
)
def test_clear_errors_at_load(
    spark: SparkSession, filled: Filled, options: dict[str, str], needle: str
) -> None:
    reader = spark.read.format("rocketmq").option("nameServer", filled.namesrv)
    if "subscribe" not in options:
        reader = reader.option("subscribe", filled.topic)
    for k, v in options.items():
        reader = reader.option(k, v)
    with pytest.raises(Exception, match=r"(?s)ConfigError.*" + re.escape(needle)):
        reader.load()


def test_empty_reads_return_no_rows(
    spark: SparkSession, filled: Filled, rocketmq: LocalRocketMQ
) -> None:
    """A read that plans no partitions runs Spark's placeholder task, which reads nothing."""
    empty = create_and_fill(rocketmq, f"spark_empty_{uuid.uuid4().hex[:8]}", 0)
    assert empty.reader(spark).load().count() == 0
    assert empty.reader(spark).load().collect() == []
    after_last = filled.reader(spark, startingTimestamp=str(2**41)).load()  # year 2039
    assert after_last.count() == 0
    q = filled.sent[0].queue
    same = json.dumps({filled.topic: {q.broker_name: {str(q.queue_id): 1}}})
    assign = json.dumps({filled.topic: {q.broker_name: [q.queue_id]}})
    df = filled.reader(spark, assign=assign, startingOffsets=same, endingOffsets=same).load()
    assert df.count() == 0


def test_ending_before_starting_names_the_queue(spark: SparkSession, filled: Filled) -> None:
    q = filled.sent[0].queue
    start = json.dumps({filled.topic: {q.broker_name: {str(q.queue_id): 3}}})
    end = json.dumps({filled.topic: {q.broker_name: {str(q.queue_id): 1}}})
    df = filled.reader(spark, startingOffsets=start, endingOffsets=end).load()
    needle = f"queue {q}: starting offset 3 > ending offset 1"
    with pytest.raises(Exception, match=r"(?s)ConfigError.*endingOffsets before.*"
                       + re.escape(needle)):  # fmt: skip
        df.count()


def test_batch_only_mistakes_fail_the_first_action(spark: SparkSession, filled: Filled) -> None:
    """Spark tells a source that a read is a batch read only when it plans the read."""
    df = filled.reader(spark, startingOffsets="latest").load()
    with pytest.raises(Exception, match=r"(?s)ConfigError.*startingOffsets='latest' is not"):
        df.collect()
