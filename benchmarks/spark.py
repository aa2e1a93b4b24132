"""Spark connector throughput (issue 18): batch read, sink, and a plain PullConsumer.

    python benchmarks/spark.py [--count 1000000] [--size 1024] [--cores 2]
                               [--per-core 1,2,4] [--sink-count N] [--eos-count N]
                               [--skip pull,read,sink,stream,produce]
                               [--send-timeout-ms MS] [--arrow-batch ROWS]

Pre-fills a fresh topic with 8 queues on each of the two brokers (16 queues) with
``--count`` messages of ``--size`` bytes, then measures, each once:

* ``pull``: one plain aiorocket ``PullConsumer`` process (a child) draining the topic,
  so Spark's overhead is visible;
* ``read``: ``spark.read.format("rocketmq")`` in local mode (``local[--cores]``),
  aggregating the body lengths so that every row is materialised, with ``cores x k``
  Spark partitions for each ``k`` of ``--per-core`` (fewer partitions than queues:
  ``coalesce``, each task reads several queues in turn; more: ``minPartitions`` splits
  the queue ranges), plus the natural one-partition-per-queue plan;
* ``sink``: ``df.write.format("rocketmq")`` of ``--sink-count`` generated rows of the
  same size into a fresh topic;
* ``stream``: the same rows through ``writeStream.format("rocketmq")``, once with
  ``deliveryGuarantee`` at-least-once and once exactly-once (half messages the driver's
  commit ends), each a one-micro-batch query (``availableNow``) reading them from a
  Parquet copy written before the timing (exactly-once exists only for streaming
  writes; ``--eos-count`` gives it fewer rows: a fresh cluster's brokers stall their
  transactional op queue within ~45,000 ends, benchmarks/README.md);
* ``produce``: as many messages of the same size from one auto-batched ``Producer``
  process, compare.py's ``aiorocket`` produce child (64 in flight), into a fresh topic:
  issue 43 asks for the sink at >= 0.5x of it, measured in the same run.

Rows/s are rows over the wall time of the Spark action or query (or of the consumer's
drain), session start-up excluded. For the sink cases it also gives the CPU per row of
Spark's Python workers (where the sink runs) and of its JVM (rows into Arrow batches,
the driver), read from ``/proc`` for the processes under this one, and the load
average (the machine is shared). Prints a table, writes ``benchmarks/results/spark-<time>.json``.
The child alone: ``python benchmarks/spark.py child-pull NAMESRV TOPIC N``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from functools import partial
from typing import Any

import _common as c
import anyio

from aiorocket.consumer.config import ConsumeFromWhere
from aiorocket.consumer.pull_consumer import PullConsumer

RESULTS = os.path.join(c.HERE, "results")


async def drain(namesrv: str, topic: str, expected: int) -> dict[str, Any]:
    consumer = PullConsumer(
        f"bench_spark_pull_{uuid.uuid4().hex[:8]}", namesrv, auto_commit=False,
        consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
    )  # fmt: skip
    consumer.subscribe(topic)
    got = size = 0
    async with consumer:
        started = time.perf_counter()
        cpu0 = time.process_time()
        while got < expected:
            for msgs in (await consumer.getmany(timeout=10.0, max_records=1024)).values():
                got += len(msgs)
                size += sum(len(m.body) for m in msgs)
        seconds = time.perf_counter() - started
        cpu = time.process_time() - cpu0
    return {"rows": got, "bytes": size, "seconds": seconds, "cpu_seconds": cpu,
            "rows_per_s": got / seconds}  # fmt: skip


def run_pull(namesrv: str, topic: str, count: int) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, __file__, "child-pull", namesrv, topic, str(count)],
        capture_output=True, text=True, timeout=3600,
    )  # fmt: skip
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"pull child failed:\n{proc.stdout}\n{proc.stderr}")
    result: dict[str, Any] = json.loads(lines[-1][len("RESULT ") :])
    return result


_TICK = os.sysconf("SC_CLK_TCK")


def _cpu_under(root: int) -> dict[int, tuple[str, float]]:
    """CPU seconds (user + system) of every process under ``root``: pid -> (name, s)."""
    children: dict[int, list[tuple[int, str, list[str]]]] = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
        except OSError:
            continue  # gone
        name, rest = stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") + 2 :]
        fields = rest.split()
        children.setdefault(int(fields[1]), []).append((int(pid), name, fields))
    out: dict[int, tuple[str, float]] = {}
    todo = [root]
    while todo:
        for pid, name, fields in children.get(todo.pop(), []):
            out[pid] = (name, (int(fields[11]) + int(fields[12])) / _TICK)
            todo.append(pid)
    return out


class SparkCpu:
    """CPU per row of Spark's Python workers and of its JVM during one case. A worker
    that exits within the case loses its share (Spark reuses them: none did here)."""

    def __enter__(self) -> SparkCpu:
        self.before = _cpu_under(os.getpid())
        self.load = os.getloadavg()[0]
        return self

    def __exit__(self, *exc: object) -> None:
        after = _cpu_under(os.getpid())
        self.python = self.jvm = 0.0
        for pid, (name, cpu) in after.items():
            spent = cpu - self.before.get(pid, (name, 0.0))[1]
            if name == "java":
                self.jvm += spent
            elif name.startswith("python"):
                self.python += spent
        self.load = max(self.load, os.getloadavg()[0])

    def per_row(self, rows: int) -> dict[str, float]:
        return {"python_cpu_us_per_row": self.python / rows * 1e6,
                "jvm_cpu_us_per_row": self.jvm / rows * 1e6, "load": self.load}  # fmt: skip


def spark_session(cores: int, arrow_batch: int | None = None) -> Any:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from aiorocket.spark import register

    spark = (
        SparkSession.builder.master(f"local[{cores}]")
        .appName("aiorocket-spark-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(cores))
        .config("spark.driver.memory", "2g")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    if arrow_batch is not None:
        # The rows per Arrow batch the JVM hands the sink (10,000 by default): a task
        # sends nothing until its first batch is converted (README, goal 6 round 8).
        spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", str(arrow_batch))
    register(spark)
    return spark


def run_read(spark: Any, namesrv: str, topic: str, count: int, partitions: int | None,
             queues: int) -> dict[str, Any]:  # fmt: skip
    from pyspark.sql import functions as F

    reader = spark.read.format("rocketmq").option("nameServer", namesrv)
    reader = reader.option("subscribe", topic)
    if partitions is not None and partitions > queues:
        reader = reader.option("minPartitions", str(partitions))
    df = reader.load()
    if partitions is not None and partitions < queues:
        df = df.coalesce(partitions)
    planned = df.rdd.getNumPartitions()
    started = time.perf_counter()
    row = df.agg(F.count("*").alias("n"), F.sum(F.length("body")).alias("b")).collect()[0]
    seconds = time.perf_counter() - started
    if row.n != count:
        raise RuntimeError(f"read {row.n} rows, expected {count}")
    return {"partitions": planned, "rows": row.n, "bytes": row.b, "seconds": seconds,
            "rows_per_s": row.n / seconds}  # fmt: skip


def _rows(spark: Any, count: int, size: int) -> Any:
    from pyspark.sql import functions as F

    df = spark.range(count).select(
        F.expr(f"cast(concat(cast(id as string), repeat('x', {size})) as binary)").alias("body")
    )
    return df.select(F.expr(f"substring(body, 1, {size})").alias("body"))


def run_sink(spark: Any, namesrv: str, topic: str, count: int, size: int,
             timeout_ms: int | None = None) -> dict[str, Any]:  # fmt: skip
    df = _rows(spark, count, size)
    with SparkCpu() as cpu:
        started = time.perf_counter()
        writer = df.write.format("rocketmq").option("nameServer", namesrv).option("topic", topic)
        if timeout_ms is not None:
            writer = writer.option("sendTimeoutMs", str(timeout_ms))
        writer.mode("append").save()
        seconds = time.perf_counter() - started
    return {"partitions": df.rdd.getNumPartitions(), "rows": count, "seconds": seconds,
            "rows_per_s": count / seconds, **cpu.per_row(count)}  # fmt: skip


def run_stream(spark: Any, namesrv: str, topic: str, files: str, count: int, mode: str,
               workdir: str, timeout_ms: int | None = None) -> dict[str, Any]:  # fmt: skip
    """One ``availableNow`` query over the Parquet copy of the rows into ``topic``."""
    df = spark.readStream.schema("body binary").parquet(files)
    checkpoint = os.path.join(workdir, f"{topic}-{uuid.uuid4().hex[:6]}")
    with SparkCpu() as cpu:
        started = time.perf_counter()
        writer = (
            df.writeStream.format("rocketmq").option("nameServer", namesrv)
            .option("topic", topic).option("deliveryGuarantee", mode)
            .option("checkpointLocation", checkpoint).trigger(availableNow=True)
        )  # fmt: skip
        if timeout_ms is not None:
            writer = writer.option("sendTimeoutMs", str(timeout_ms))
        query = writer.start()
        query.awaitTermination()
        seconds = time.perf_counter() - started
    if query.exception() is not None:
        raise RuntimeError(f"{mode} query failed: {query.exception()}")
    return {"mode": mode, "rows": count, "seconds": seconds, "rows_per_s": count / seconds,
            **cpu.per_row(count)}  # fmt: skip


def run_produce(namesrv: str, topic: str, count: int, size: int) -> dict[str, Any]:
    script = os.path.join(c.HERE, "aio_children.py")
    argv = [sys.executable, script, "produce", namesrv, topic, str(count), str(size), "64", "auto"]
    r = c.Child("auto-batched producer", argv).start().wait(timeout=3600)
    return {**r, "rows": r["count"], "rows_per_s": r["count"] / r["elapsed"]}


def table(res: dict[str, Any]) -> str:
    meta = res["meta"]
    lines = [
        f"{meta['count']:,} x {meta['size']} B messages, {meta['queues']} queues, "
        f"local[{meta['cores']}]",
        f"{'case':<34} {'partitions':>10} {'seconds':>9} {'rows/s':>10}",
    ]
    if "pull" in res:
        p = res["pull"]
        lines.append(f"{'PullConsumer (1 process)':<34} {'-':>10} {p['seconds']:>9.1f} "
                     f"{p['rows_per_s']:>10,.0f}")  # fmt: skip
    for r in res.get("read", []):
        label = f"spark.read ({r['label']})"
        lines.append(f"{label:<34} {r['partitions']:>10} {r['seconds']:>9.1f} "
                     f"{r['rows_per_s']:>10,.0f}")  # fmt: skip
    sinks = [("df.write (sink)", res["sink"])] if "sink" in res else []
    sinks += [(f"writeStream ({r['mode']})", r) for r in res.get("stream", [])]
    for label, s in sinks:
        lines.append(f"{label:<34} {s.get('partitions', '-'):>10} {s['seconds']:>9.1f} "
                     f"{s['rows_per_s']:>10,.0f}   CPU/row: Python "
                     f"{s['python_cpu_us_per_row']:.1f} us, JVM {s['jvm_cpu_us_per_row']:.1f} us "
                     f"(load {s['load']:.1f})")  # fmt: skip
    if "produce" in res:
        p = res["produce"]
        lines.append(f"{'Producer, auto-batched (1 process)':<34} {'-':>10} "
                     f"{p['elapsed']:>9.1f} {p['rows_per_s']:>10,.0f}   CPU/msg: "
                     f"{p['cpu'] / p['rows'] * 1e6:.1f} us")  # fmt: skip
        for label, s in sinks:
            lines.append(f"{label} / producer: {s['rows_per_s'] / p['rows_per_s']:.2f}x")
    return "\n".join(lines)


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "child-pull":
        namesrv, topic, n = sys.argv[2], sys.argv[3], int(sys.argv[4])
        print("RESULT " + json.dumps(anyio.run(drain, namesrv, topic, n)), flush=True)
        return 0
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--count", type=int, default=1_000_000)
    p.add_argument("--size", type=int, default=1024)
    p.add_argument("--cores", type=int, default=2)
    p.add_argument("--per-core", default="1,2,4")
    p.add_argument("--sink-count", type=int, default=None, help="default: --count / 4")
    p.add_argument("--skip", default="", help="comma list of pull, read, sink, stream, produce")
    p.add_argument("--eos-count", type=int, default=None,
                   help="rows of the exactly-once stream (default: --sink-count; the brokers' "
                        "op queue stalls within ~45,000 ends: benchmarks/README.md)")  # fmt: skip
    p.add_argument("--send-timeout-ms", type=int, default=None,
                   help="the sink's sendTimeoutMs (default: the sink's, 3000)")  # fmt: skip
    p.add_argument("--arrow-batch", type=int, default=None,
                   help="Spark's arrow.maxRecordsPerBatch (default: Spark's, 10000)")  # fmt: skip
    args = p.parse_args()
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    cl = c.cluster()
    queues = 8 * len(cl.broker_addrs)
    topic = f"bench_spark_{uuid.uuid4().hex[:8]}"
    anyio.run(lambda: cl.create_topic(topic, queues=8))
    c.log(f"pre-filling {topic} ({queues} queues) with {args.count:,} x {args.size} B")
    s = anyio.run(lambda: c.prefill(cl.namesrv_addr, topic, args.count, args.size))
    c.log(f"  done in {s:.1f}s")
    res: dict[str, Any] = {"meta": {"count": args.count, "size": args.size, "cores": args.cores,
                                    "queues": queues, "topic": topic,
                                    "arrow_batch": args.arrow_batch,
                                    "time": time.strftime("%Y-%m-%dT%H:%M:%S")}}  # fmt: skip
    if "pull" not in skip:
        c.log("PullConsumer drain")
        res["pull"] = run_pull(cl.namesrv_addr, topic, args.count)
    if not {"read", "sink", "stream"} <= skip:
        started = time.perf_counter()
        spark = spark_session(args.cores, args.arrow_batch)
        res["meta"]["spark_start_seconds"] = time.perf_counter() - started
        try:
            if "read" not in skip:
                run_read(spark, cl.namesrv_addr, topic, args.count, None, queues)  # warm-up
                res["read"] = []
                cases: list[tuple[str, int | None]] = [("one per queue", None)]
                cases += [(f"{k} per core", args.cores * int(k))
                          for k in args.per_core.split(",")]  # fmt: skip
                for label, parts in cases:
                    c.log(f"spark.read, {label}")
                    r = run_read(spark, cl.namesrv_addr, topic, args.count, parts, queues)
                    res["read"].append({"label": label, **r})
            if "sink" not in skip:
                out = f"bench_spark_sink_{uuid.uuid4().hex[:8]}"
                anyio.run(lambda: cl.create_topic(out, queues=8))
                n = args.sink_count or max(1, args.count // 4)
                timeout_ms = args.send_timeout_ms
                run_sink(spark, cl.namesrv_addr, out, 1000, args.size, timeout_ms)  # warm-up
                c.log(f"df.write of {n:,} rows")
                res["sink"] = run_sink(spark, cl.namesrv_addr, out, n, args.size, timeout_ms)
            if "stream" not in skip:
                n = args.sink_count or max(1, args.count // 4)
                timeout_ms = args.send_timeout_ms
                workdir = tempfile.mkdtemp(prefix="bench-spark-stream-")
                files = os.path.join(workdir, "rows")
                _rows(spark, n, args.size).write.parquet(files)
                warm = os.path.join(workdir, "warm")
                _rows(spark, 1000, args.size).write.parquet(warm)
                eos_n = args.eos_count or n
                eos_files = files
                if eos_n != n:
                    eos_files = os.path.join(workdir, "eos_rows")
                    _rows(spark, eos_n, args.size).write.parquet(eos_files)
                res["stream"] = []
                for mode in ("at-least-once", "exactly-once"):
                    rows, rows_n = (eos_files, eos_n) if mode == "exactly-once" else (files, n)
                    out = f"bench_spark_stream_{uuid.uuid4().hex[:8]}"
                    anyio.run(partial(cl.create_topic, out, queues=8))
                    run_stream(spark, cl.namesrv_addr, out, warm, 1000, mode, workdir, timeout_ms)
                    c.log(f"writeStream ({mode}) of {rows_n:,} rows")
                    forced = c.forced_ends(cl)
                    r = run_stream(spark, cl.namesrv_addr, out, rows, rows_n, mode, workdir,
                                   timeout_ms)  # fmt: skip
                    r["forced_ends"] = c.forced_ends(cl) - forced
                    c.warn_forced(mode, r["forced_ends"])
                    res["stream"].append(r)
        finally:
            spark.stop()
    if "produce" not in skip:
        out = f"bench_spark_produce_{uuid.uuid4().hex[:8]}"
        anyio.run(lambda: cl.create_topic(out, queues=8))
        n = args.sink_count or max(1, args.count // 4)
        c.log(f"auto-batched producer, {n:,} messages")
        res["produce"] = run_produce(cl.namesrv_addr, out, n, args.size)
    print(table(res))
    os.makedirs(RESULTS, exist_ok=True)
    path = os.path.join(RESULTS, f"spark-{time.strftime('%Y%m%d-%H%M%S')}.json")
    with open(path, "w") as f:
        json.dump(res, f, indent=1)
    print(f"saved {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
