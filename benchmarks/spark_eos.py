"""The rocketmq sink's delivery guarantees compared (issue 31): rows/s and visibility.

    python benchmarks/spark_eos.py [--count 40000] [--size 256] [--per-batch 10000]
                                   [--cores 2] [--rounds 2] [--transports remoting,grpc]

Pre-fills a topic (8 queues on each broker) with ``--count`` messages of ``--size``
bytes, then runs the same streaming query on it in each mode, alternating for
``--rounds`` rounds after a warm-up run: ``readStream`` (AvailableNow,
``maxOffsetsPerTrigger=--per-batch``) ``-> select(body) -> writeStream.format("rocketmq")``
into a fresh topic, with
``deliveryGuarantee`` at-least-once, then exactly-once, through the NameServer
(``remoting``) and through the Proxy (``grpc``: option ``proxy``; exactly-once into a
``TRANSACTION`` topic, its rows committed by the driver's answers to the broker's
check-backs, which come every ``transactionCheckInterval``, 30 s on the test cluster).
Per run it prints:

* rows/s: rows over the query's wall time (session start excluded; the read is the
  same in both modes);
* batch end -> visible: for each micro-batch, from the moment its last task finished
  (the driver's commit starts) to the moment a consumer of the output topic (a
  ``PullConsumer`` polling in this process) has seen every row of it; median and max
  over the batches. At-least-once rows are visible as soon as sent, so this is near 0
  or negative; exactly-once rows only once the commit ended them.

Writes ``benchmarks/results/spark-eos-<time>.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import _common as c
import anyio

from aiorocket.consumer.config import ConsumeFromWhere
from aiorocket.consumer.pull_consumer import PullConsumer

RESULTS = os.path.join(c.HERE, "results")


def watch(namesrv: str, topic: str, count: int, seen: dict[str, list[float]],
          stop: threading.Event) -> None:  # fmt: skip
    """Record when each row (by its micro-batch, from the dedup key) is first pulled."""

    async def run() -> None:
        consumer = PullConsumer(
            f"bench_eos_watch_{uuid.uuid4().hex[:8]}", namesrv, auto_commit=False,
            consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
        )  # fmt: skip
        consumer.subscribe(topic)
        got = 0
        async with consumer:
            while got < count and not stop.is_set():
                batches = await consumer.getmany(timeout=0.2, max_records=1024)
                now = time.time()
                for msgs in batches.values():
                    for m in msgs:
                        key = m.properties.get("sparkDedupKey", "")
                        batch = key.split("-")[-3] if key.count("-") >= 3 else "?"
                        seen[batch].append(now)
                        got += 1

    anyio.run(run)


def session(cores: int) -> Any:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from aiorocket.spark import register
    from aiorocket.spark._options import parse_write
    from aiorocket.spark.sink import RocketMQStreamWriter
    from aiorocket.spark.source import RocketMQDataSource

    class TimedWriter(RocketMQStreamWriter):
        """Notes when each batch's commit starts (its tasks are done) and ends."""

        def commit(self, messages: list[Any], batchId: int) -> None:
            started = time.time()
            super().commit(messages, batchId)
            with open(os.environ["BENCH_COMMITS"], "a") as f:  # set before the JVM started
                f.write(json.dumps([self._sender.opts.topic, batchId, started, time.time()]))
                f.write("\n")

    class TimedSource(RocketMQDataSource):
        @classmethod
        def name(cls) -> str:
            return "rocketmq_timed"

        def streamWriter(self, schema: Any, overwrite: bool) -> Any:
            return TimedWriter(parse_write(self.options), schema)

    spark = (
        SparkSession.builder.master(f"local[{cores}]").appName("aiorocket-spark-eos-bench")
        .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(cores)).config("spark.driver.memory", "2g")
        .getOrCreate()
    )  # fmt: skip
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    spark.dataSource.register(TimedSource)
    return spark


def run_mode(spark: Any, cl: Any, source: str, args: Any, mode: str,
             workdir: str, transport: str = "remoting") -> dict[str, Any]:  # fmt: skip
    target = f"bench_eos_out_{uuid.uuid4().hex[:8]}"
    kind = "TRANSACTION" if transport == "grpc" and mode == "exactly-once" else "NORMAL"
    anyio.run(lambda: cl.create_topic(target, queues=8, message_type=kind))
    via = ("proxy", cl.proxy_grpc) if transport == "grpc" else ("nameServer", cl.namesrv_addr)
    commits = os.environ["BENCH_COMMITS"]
    seen: dict[str, list[float]] = defaultdict(list)
    stop = threading.Event()
    watcher = threading.Thread(target=watch, args=(cl.namesrv_addr, target, args.count, seen, stop))
    watcher.start()
    df = (
        spark.readStream.format("rocketmq").option("nameServer", cl.namesrv_addr)
        .option("subscribe", source).option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(args.per_batch)).load().select("body")
    )  # fmt: skip
    started = time.perf_counter()
    query = (
        df.writeStream.format("rocketmq_timed").option(*via)
        .option("topic", target).option("deliveryGuarantee", mode)
        .option("checkpointLocation", os.path.join(workdir, target))
        .trigger(availableNow=True).start()
    )  # fmt: skip
    query.awaitTermination()
    seconds = time.perf_counter() - started
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))
    watcher.join(120)
    stop.set()
    watcher.join()
    rows = sum(len(v) for v in seen.values())
    if rows != args.count:
        raise RuntimeError(f"{mode}: the consumer saw {rows} rows, expected {args.count}")
    lags = []
    commit_ms = []
    with open(commits) as f:
        for line in f:
            topic, batch, began, ended = json.loads(line)
            if topic != target:
                continue
            commit_ms.append((ended - began) * 1000)
            if seen.get(str(batch)):
                lags.append((max(seen[str(batch)]) - began) * 1000)
    return {"mode": f"{mode} {transport}", "rows": rows, "seconds": seconds,
            "rows_per_s": rows / seconds,
            "batches": len(lags), "visible_ms_median": statistics.median(lags),
            "visible_ms_max": max(lags),
            "commit_ms_median": statistics.median(commit_ms)}  # fmt: skip


def table(runs: list[dict[str, Any]]) -> Iterator[str]:
    yield (f"{'mode':<24} {'rows':>8} {'seconds':>8} {'rows/s':>8} {'batches':>7} "
           f"{'end->visible ms (median, max)':>30} {'commit ms':>10}")  # fmt: skip
    for r in runs:
        yield (f"{r['mode']:<24} {r['rows']:>8} {r['seconds']:>8.1f} {r['rows_per_s']:>8,.0f} "
               f"{r['batches']:>7} {r['visible_ms_median']:>18,.0f} {r['visible_ms_max']:>11,.0f} "
               f"{r['commit_ms_median']:>10,.0f}")  # fmt: skip


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--count", type=int, default=40_000)
    p.add_argument("--size", type=int, default=256)
    p.add_argument("--per-batch", type=int, default=10_000)
    p.add_argument("--cores", type=int, default=2)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--transports", default="remoting,grpc")
    args = p.parse_args()
    transports = [t.strip() for t in args.transports.split(",") if t.strip()]
    cl = c.cluster()
    source = f"bench_eos_src_{uuid.uuid4().hex[:8]}"
    anyio.run(lambda: cl.create_topic(source, queues=8))
    c.log(f"pre-filling {source} with {args.count:,} x {args.size} B")
    anyio.run(lambda: c.prefill(cl.namesrv_addr, source, args.count, args.size))
    workdir = os.path.join(RESULTS, f"spark-eos-{uuid.uuid4().hex[:8]}")
    os.makedirs(workdir)
    os.environ["BENCH_COMMITS"] = os.path.join(workdir, "commits.jsonl")
    spark = session(args.cores)
    runs = []
    try:
        c.log("warm-up (not counted): at-least-once")
        run_mode(spark, cl, source, args, "at-least-once", workdir)
        for rnd in range(args.rounds):
            for transport in transports:
                for mode in ("at-least-once", "exactly-once"):
                    c.log(f"round {rnd + 1}: {mode} {transport}")
                    forced = c.forced_ends(cl)
                    runs.append(run_mode(spark, cl, source, args, mode, workdir, transport))
                    runs[-1]["forced_ends"] = c.forced_ends(cl) - forced
                    c.warn_forced(f"{mode} {transport}", runs[-1]["forced_ends"])
                    c.log("  " + list(table(runs[-1:]))[-1])
    finally:
        spark.stop()
    print(f"{args.count:,} x {args.size} B rows, {args.per_batch:,} per micro-batch, "
          f"local[{args.cores}], 16 queues in and out")
    for line in table(runs):
        print(line)
    path = os.path.join(RESULTS, f"spark-eos-{time.strftime('%Y%m%d-%H%M%S')}.json")
    with open(path, "w") as f:
        json.dump({"args": vars(args), "runs": runs}, f, indent=1)
    print(f"saved {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
