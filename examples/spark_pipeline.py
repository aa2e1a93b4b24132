"""A Spark pipeline over RocketMQ: orders in, per-customer totals out (a topic + Parquet).

Create the topics once, then run it (local Spark, ``local[2]``)::

    python -m aiorocket.testing.broker topic spark-orders
    python -m aiorocket.testing.broker topic spark-order-totals
    AIOROCKET_NAMESRV_ADDR=127.0.0.1:9876 python examples/spark_pipeline.py

It sends 200 JSON orders with aiorocket's producer, then a Structured Streaming query
reads the orders of this run (stored since it began, ``startingTimestamp``, and carrying
its run id, matched by an SQL92 ``filterSql``: other runs may share the topics) in
micro-batches of at most 100 offsets (``maxOffsetsPerTrigger``) until it has caught up
(``Trigger.AvailableNow``). Each micro-batch is parsed, aggregated per customer, and
written twice: to Parquet and, as JSON messages keyed by customer, to the totals topic.
Finally a batch read of the totals topic checks the sums against what was sent.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
import uuid
from pathlib import Path

import anyio
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from aiorocket.message import Message
from aiorocket.producer import Producer
from aiorocket.spark import register

ORDER = "customer string, amount double, item string"
CUSTOMERS = ["ada", "grace", "linus", "margaret", "ken"]


async def send_orders(namesrv: str, topic: str, count: int, run_id: str) -> dict[str, float]:
    """``count`` random orders; the expected total per customer."""
    totals: dict[str, float] = {}
    rng = random.Random(7)
    producer = Producer("spark-example-orders", namesrv, auto_batch=True)
    async with producer, anyio.create_task_group() as tg:
        for i in range(count):
            customer = rng.choice(CUSTOMERS)
            amount = round(rng.uniform(1, 100), 2)
            totals[customer] = round(totals.get(customer, 0.0) + amount, 2)
            order = {"customer": customer, "amount": amount, "item": f"sku-{i % 17}"}
            msg = Message(topic, json.dumps(order).encode(), tags="order", keys=[customer],
                          properties={"run": run_id})  # fmt: skip
            await producer.start_send(tg, msg)
    return totals


def session() -> SparkSession:
    # Spark's Python workers must run an interpreter that has aiorocket and pyarrow.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("rocketmq-pipeline")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    # A regular install registers the format by itself (Spark finds pyspark_rocketmq);
    # an editable one (setuptools' import hook hides it from Spark's lookup) needs this.
    register(spark)
    return spark


def run(spark: SparkSession, namesrv: str, orders: str, totals: str, since_ms: int,
        run_id: str, workdir: Path) -> dict[str, float]:  # fmt: skip
    """The pipeline; returns the per-customer totals read back from ``totals``."""
    stream = (
        spark.readStream.format("rocketmq")
        .option("nameServer", namesrv)
        .option("subscribe", orders)
        .option("filterSql", f"run = '{run_id}'")
        .option("startingTimestamp", str(since_ms))
        .option("maxOffsetsPerTrigger", "100")
        .load()
    )
    parsed = stream.select(F.from_json(F.col("body").cast("string"), ORDER).alias("o")).select(
        "o.*"
    )

    def per_batch(batch: DataFrame, batch_id: int) -> None:
        agg = batch.groupBy("customer").agg(
            F.count("*").alias("orders"), F.round(F.sum("amount"), 2).alias("amount")
        )
        agg = agg.withColumn("batch", F.lit(batch_id)).cache()
        agg.write.mode("append").parquet(str(workdir / "totals.parquet"))
        (
            agg.select(
                F.to_json(F.struct("customer", "orders", "amount", "batch")).alias("body"),
                F.col("customer").alias("keys"),
                F.lit(f"totals-{run_id}").alias("tags"),
            )
            .write.format("rocketmq")
            .option("nameServer", namesrv)
            .option("topic", totals)
            .mode("append")
            .save()
        )
        agg.unpersist()

    query = (
        parsed.writeStream.foreachBatch(per_batch)
        .option("checkpointLocation", str(workdir / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    batches = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    print(f"streamed {sum(batches)} orders in {len(batches)} micro-batches: {batches}")

    back = (
        spark.read.format("rocketmq")
        .option("nameServer", namesrv)
        .option("subscribe", totals)
        .option("subExpression", f"totals-{run_id}")
        .option("startingTimestamp", str(since_ms))
        .load()
        .select(
            F.from_json(F.col("body").cast("string"), "customer string, amount double").alias("t")
        )
        .groupBy("t.customer")
        .agg(F.round(F.sum("t.amount"), 2).alias("amount"))
    )
    return {row.customer: row.amount for row in back.collect()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--namesrv", default=os.environ.get("AIOROCKET_NAMESRV_ADDR"))
    parser.add_argument("--orders-topic", default="spark-orders")
    parser.add_argument("--totals-topic", default="spark-order-totals")
    parser.add_argument("--count", type=int, default=200)
    args = parser.parse_args()
    if not args.namesrv:
        parser.error("set AIOROCKET_NAMESRV_ADDR or pass --namesrv")
    since_ms = int(time.time() * 1000)
    run_id = uuid.uuid4().hex[:12]
    expected = anyio.run(send_orders, args.namesrv, args.orders_topic, args.count, run_id)
    print(f"sent {args.count} orders for {len(expected)} customers")
    spark = session()
    try:
        with tempfile.TemporaryDirectory(prefix="rocketmq-pipeline-") as tmp:
            got = run(spark, args.namesrv, args.orders_topic, args.totals_topic, since_ms,
                      run_id, Path(tmp))  # fmt: skip
            lake = spark.read.parquet(str(Path(tmp) / "totals.parquet")).count()
    finally:
        spark.stop()
    print(f"{lake} per-batch totals written to Parquet and to {args.totals_topic}")
    for customer in sorted(expected):
        mark = "ok" if abs(got.get(customer, 0.0) - expected[customer]) < 0.01 else "MISMATCH"
        print(
            f"  {customer:<10} {expected[customer]:>10.2f} {got.get(customer, 0.0):>10.2f}  {mark}"
        )
    return 0 if all(abs(got.get(c, 0.0) - v) < 0.01 for c, v in expected.items()) else 1


if __name__ == "__main__":
    sys.exit(main())
