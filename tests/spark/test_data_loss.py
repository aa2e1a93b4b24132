"""Data loss below the broker's min offset, on a real broker that really deleted it.

A throw-away single broker (its own store: the shared cluster's data must not go) with
64 KiB commit-log files and no retention (``fileReservedTime=0``). Once the test asks
for it (DELETE_EXPIRED_COMMITLOG, what ``mqadmin deleteExpiredCommitLog`` sends), the
broker's cleaner deletes every commit-log file but the one being written, and the queue's
min offset moves past what a checkpoint or a batch read asked for. The cleaner's first
run comes 60 s after the broker started (fixed in RocketMQ 5.5): the broker starts as
the first test of tests/spark sets up (``PRESTART``), so that those 60 s run while the
Spark session starts and the tests before this one run.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import anyio
import pytest
from pyspark.sql import SparkSession

from aiorocket._message_id import commit_log_offset_of
from aiorocket._send_result import SendResult
from aiorocket.client.admin import AdminRequests
from aiorocket.client.instance import ClientInstance
from aiorocket.message import Message, MessageQueue
from aiorocket.protocol.codes import ResponseCode
from aiorocket.testing.broker import LocalRocketMQ
from tests.integration.helpers import prestarted
from tests.spark.conftest import Filled, fill, message
from tests.spark.test_stream import run_available_now, stream

pytestmark = pytest.mark.integration

#: RequestCode.DELETE_EXPIRED_COMMITLOG: run the broker's file cleaner now.
DELETE_EXPIRED_COMMITLOG = 329
TOPIC = "spark_data_loss"
COMMIT_LOG_FILE = 64 * 1024


PRESTART = ("spark-loss", {"brokers": 1, "proxy": False, "broker_props": {
    "mappedFileSizeCommitLog": COMMIT_LOG_FILE, "mappedFileSizeConsumeQueue": 100 * 20,
    "fileReservedTime": 0, "deleteWhen": "99", "cleanResourceInterval": 1000,
}})  # fmt: skip


@pytest.fixture(scope="module")
def small_store(request: pytest.FixtureRequest) -> Iterator[LocalRocketMQ]:
    yield from prestarted(request.module)


async def delete_expired(namesrv: str, sent: list[SendResult]) -> int:
    """Ask the broker to delete its old commit-log files; its queue's new min offset,
    once the cleaner has deleted every file but the one being written and the queue's
    min offset has followed (not its first move: the cleaner deletes a file at a time and
    corrects the consume queue on its own schedule, so an early reading moved on under
    the test once, ``27 == 239``)."""
    mq = MessageQueue(TOPIC, "broker-a", 0)
    async with ClientInstance(namesrv) as client:
        addr = (await client.namesrv.query_route(TOPIC)).group_addrs()["broker-a"]
        resp = await client.broker.call(addr, DELETE_EXPIRED_COMMITLOG, {})
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        admin = AdminRequests(client.broker)
        # No event to wait for: the broker's cleaner runs on its own schedule.
        with anyio.fail_after(150):
            while True:
                info = await admin.runtime_info(addr)
                phy_min, phy_max = int(info["commitLogMinOffset"]), int(info["commitLogMaxOffset"])
                last_file = (phy_max - 1) // COMMIT_LOG_FILE * COMMIT_LOG_FILE
                if phy_min == last_file:  # every file deleted but the one being written
                    # The first message stored in that file is the queue's min offset to be.
                    low = min((r.queue_offset for r in sent
                               if commit_log_offset_of(r.offset_msg_id) >= phy_min),
                              default=len(sent))  # fmt: skip
                    if await client.broker.get_min_offset(addr, mq) == low:
                        return low
                await anyio.sleep(0.5)
    raise AssertionError("unreachable")


def test_offsets_below_the_brokers_min_offset(
    spark: SparkSession, small_store: LocalRocketMQ, tmp_path: Path
) -> None:
    namesrv = small_store.namesrv_addr
    anyio.run(partial(small_store.create_topic, TOPIC, queues=1))
    first = [message(TOPIC, i) for i in range(10)]
    sent = anyio.run(fill, namesrv, TOPIC, first)
    filled = Filled(namesrv, TOPIC, [], first)
    ckpt, out = tmp_path / "ckpt", tmp_path / "out"
    assert sum(run_available_now(stream(filled, spark).select("body"), "parquet", ckpt,
                                 path=str(out))) == 10  # fmt: skip
    # ~390 KiB more: six commit-log files, all but the last deleted below.
    rest = [Message(TOPIC, b"%04d" % i + b"x" * 1020) for i in range(10, 300)]
    sent += anyio.run(fill, namesrv, TOPIC, rest)
    low = anyio.run(delete_expired, namesrv, sent)
    kept = 300 - low
    assert 0 < kept < 290  # the checkpoint's next offset (10) is gone, so are many after it

    # The checkpoint's next offset is below the min offset: failOnDataLoss (default true)
    # fails the query, naming the option.
    query = (
        stream(filled, spark).select("body").writeStream.format("parquet")
        .option("checkpointLocation", str(ckpt)).option("path", str(out))
        .trigger(availableNow=True).start()
    )  # fmt: skip
    with pytest.raises(Exception, match=r"(?s)DataLossError.*failOnDataLoss"):
        query.awaitTermination(180)
    # false: the query skips ahead to the min offset and reads what is still there.
    sizes = run_available_now(stream(filled, spark, failOnDataLoss="false").select("body"),
                              "parquet", ckpt, path=str(out))  # fmt: skip
    assert sum(sizes) == kept
    bodies = {r.body for r in spark.read.parquet(str(out)).collect()}
    assert {m.body for m in first} <= bodies
    assert {m.body for m in rest[-kept:]} <= bodies and len(bodies) == 10 + kept

    # A batch read from offset 0: the same choice.
    start = json.dumps({TOPIC: {"broker-a": {"0": 0}}})
    with pytest.raises(Exception, match=r"(?s)DataLossError.*no longer available"):
        filled.reader(spark, startingOffsets=start).load().collect()
    rows = filled.reader(spark, startingOffsets=start, failOnDataLoss="false").load()
    assert sorted(r.queueOffset for r in rows.select("queueOffset").collect()) == list(
        range(low, 300)
    )
