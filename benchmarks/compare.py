"""aiorocket vs the Java client and the official Python client on one local cluster (issue 6).

    .venv/bin/python benchmarks/compare.py                 # full: 500,000 x 1 KiB, 1M backlog
    .venv/bin/python benchmarks/compare.py --quick         # 50,000 msgs, shorter cases
    .venv/bin/python benchmarks/compare.py --only pop      # POP over remoting (issue 33)

Uses the local RocketMQ of ``python -m aiorocket.testing.broker`` (starts one with 2
brokers when none runs). Every client runs in its own process; benchmarks/README.md says
what is measured and how. Prints a table, writes benchmarks/results/compare-<time>.json
and a PNG chart beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import _common as c
import _report
import _runs
import _setup
import anyio
from _pop import membership

RESULTS = os.path.join(c.HERE, "results")
CASES = {"consume", "produce", "send", "latency", "idle", "backlog", "grpc", "pop"}
#: the gRPC case's clients, all through the one Proxy (official: only when not skipped)
GRPC_CLIENTS = ("aiorocket-grpc", "java-grpc", "official")


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add = p.add_argument
    add("--quick", action="store_true", help="50k messages, shorter cases")
    add("--count", type=int, help="pre-filled messages (default 500000, quick 50000)")
    add("--size", type=int, default=1024)
    add("--runs", type=int, default=3, help="repeat consume/produce/latency; the table: medians")
    add("--official-count", type=int, help="the official client consumes min(count, this)")
    add("--produce-count", type=int, help="messages per producer (default count/2)")
    add("--in-flight", type=int, default=64)
    add("--rate", type=int, default=5000, help="paced rate of the e2e latency case")
    add("--latency-seconds", type=float, help="measured paced seconds (default 10, quick 5)")
    add("--latency-warmup", type=float, default=5.0, help="paced seconds before that")
    add("--send-seconds", type=float, help="paced seconds of the send case (default 10, quick 5)")
    add(
        "--no-consume-warm-pass",
        dest="consume_warm_pass",
        action="store_false",
        help="skip the unrecorded consume run that warms the brokers before the measured ones",
    )
    add(
        "--no-produce-warm-pass",
        dest="produce_warm_pass",
        action="store_false",
        help="skip the unrecorded produce run of every sender before the measured ones",
    )
    add(
        "--no-latency-warm-pass",
        dest="latency_warm_pass",
        action="store_false",
        help="skip the unrecorded paced run that warms the brokers before the latency runs",
    )
    add(
        "--no-latency-floor",
        dest="latency_floor",
        action="store_false",
        help="skip the common paced producer's run alone (no consumer) before each latency run",
    )
    add(
        "--no-grpc-warm-pass",
        dest="grpc_warm_pass",
        action="store_false",
        help="skip the unrecorded short gRPC runs (every gRPC side) before the measured ones",
    )
    add("--idle-topics", type=int, default=125, help="x 8 queues for the scale case")
    add("--idle-seconds", type=float, help="default 30, quick 15")
    add("--backlog-count", type=int, help="default 1,000,000 (quick: --count)")
    add("--backlog-seconds", type=float, help="default 30, quick 15")
    add("--backlog-delay", type=float, default=0.01, help="the slow handler's sleep")
    add("--grpc-count", type=int, help="messages per gRPC consume/produce run (default 50000)")
    add("--pop-count", type=int, help="messages per POP-case consume run (default 50000)")
    add("--join-rate", type=int, default=2000, help="paced msg/s of the POP case's join run")
    add("--low-rate", type=int, default=20, help="POP case: e2e msg/s on a topic of 2 brokers")
    add("--join-window", type=float, default=24.0, help="seconds of that run (join at 1/3)")
    add("--skip", default="", help="comma list of java,official and/or cases")
    add("--only", default="", help="comma list of cases: " + ",".join(sorted(CASES)))
    a = p.parse_args()
    q = a.quick
    a.count = a.count or (50_000 if q else 500_000)
    a.official_count = min(a.count, a.official_count or 50_000)
    a.grpc_count = min(a.count, a.grpc_count or 50_000)
    a.pop_count = min(a.count, a.pop_count or 50_000)
    a.produce_count = a.produce_count or max(10_000, a.count // 2)
    a.latency_seconds = a.latency_seconds or (5.0 if q else 10.0)
    a.send_seconds = a.send_seconds or (5.0 if q else 10.0)
    a.idle_seconds = a.idle_seconds or (15.0 if q else 30.0)
    a.backlog_count = max(a.count, a.backlog_count or (a.count if q else 1_000_000))
    a.backlog_seconds = a.backlog_seconds or (15.0 if q else 30.0)
    a.skip = set(filter(None, a.skip.split(",")))
    if a.only:
        a.skip |= CASES - set(a.only.split(","))
    return a


LAT_KEYS = ("lat_p50_ms", "lat_p99_ms", "error")


def measure(name: str, fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    c.log(f"{name} ...")
    try:
        r = fn()
    except Exception as exc:  # one client failing must not lose the others' figures
        c.log(f"  FAILED: {exc}")
        return {"error": str(exc)[-2000:]}
    keys = ("msgs_per_s", "cpu_per_100k", "peak_rss_mb", "send_p99_ms", "lat_p50_ms", "lat_p99_ms",
            "join_gap_ms")  # fmt: skip
    c.log("  " + ", ".join(f"{k} {r[k]:,.2f}" for k in keys if k in r))
    return r


def main() -> None:
    a = parse()
    cl = c.cluster()
    broker = str(cl.state.get("proxy_broker", next(iter(cl.broker_addrs))))
    java = None if "java" in a.skip else _setup.build_java(cl.version)
    official = "official" not in a.skip and _setup.ensure_official()
    env = _runs.Env(cl, broker, java, a.size)
    clients = ["aiorocket", "aiorocket-iter"] + ["java"] * bool(java) + ["official"] * official
    # aiorocket produces with auto_batch on; "aiorocket-plain" is the same without it;
    # "java-batch" is Java's producer with its own batching (setAutoBatch), "java" without.
    senders = ["aiorocket", "aiorocket-plain"] + ["java", "java-batch"] * bool(java)
    senders += ["official"] * official
    stamp = time.strftime("%Y%m%d-%H%M%S")
    meta = {k: v for k, v in vars(a).items() if k != "skip"}
    meta.update(version=cl.version, started=stamp, broker=broker, cpus=os.cpu_count())
    meta.update(loadavg_start=os.getloadavg(), calibrate_ms_start=c.calibrate())
    meta.update(cluster_idle_cpu_pct=_setup.cluster_idle_cpu(cl))
    res: dict[str, Any] = {"meta": meta, "consume": {}, "produce": {}, "send": {}, "latency": {}}
    res["grpc"] = {"consume": {}, "produce": {}, "latency": {}}
    res["pop"] = {"consume": {}, "latency": {}, "low": {}, "join": {}}

    topic = _setup.new_topic(cl, "bench_compare", broker)
    if not a.skip >= {"consume", "backlog", "grpc", "pop"}:
        _setup.prefill(cl, topic, a.count, a.size)
    if "consume" not in a.skip and a.consume_warm_pass:
        # Not recorded: the first consume run after the cluster starts was always the
        # slowest (the brokers' JIT compiles the pull path during it). The whole topic, as
        # every measured run reads it: after a pass of 100,000 the first side measured
        # (aiorocket's handler run) was still the slowest run of its side in every
        # sitting, while the sides after it were not (benchmarks/README.md, "The first
        # consume run and the warm-up pass").
        # Every side once, not aiorocket alone: after aiorocket's pass alone its handler
        # run 1 was still its side's slowest in a fresh cluster (173k against 312k/276k
        # msg/s, 2026-11-30 19:47), the brokers still compiling the pull path for the
        # sides that came after it (benchmarks/README.md, "Round 17's sittings").
        n = a.count
        meta["consume_warm_pass_result"] = {}
        for cli in [cli for cli in clients if cli != "official"]:
            title = f"consume warm-up pass (not recorded): {cli} ({n:,} msgs)"
            warm_consume = measure(title, partial(_runs.consume, env, cli, topic, n))
            meta["consume_warm_pass_result"][cli] = {
                k: warm_consume.get(k) for k in ("msgs_per_s", "error")
            }
    for run in range(0 if "consume" in a.skip else a.runs):
        for cli in clients:
            if cli == "official" and run > 0:
                continue  # ~100x slower than the others: once is enough
            n = a.official_count if cli == "official" else a.count
            title = f"consume run {run + 1}: {cli} ({n:,} msgs)"
            r = measure(title, partial(_runs.consume, env, cli, topic, n))
            res["consume"].setdefault(cli, []).append(r)
    if "produce" not in a.skip:
        ptopic = _setup.new_topic(cl, "bench_produce", broker)
        if a.produce_warm_pass:
            # Not recorded: after a cluster restart the first produce run met cold brokers
            # (33,201 msg/s against 70-72k in the runs after it, 2026-11-30 22:21), as the
            # consume case's first run did before its warm pass. Every sender once, a fifth
            # of a run each (the official client is ~20x slower and sends once anyway).
            n = max(1, a.produce_count // 5)
            meta["produce_warm_pass_result"] = {}
            for cli in [cli for cli in senders if cli != "official"]:
                title = f"produce warm-up pass (not recorded): {cli} ({n:,} msgs)"
                warm = measure(title, partial(_runs.produce, env, cli, ptopic, n, a.in_flight))
                meta["produce_warm_pass_result"][cli] = {
                    k: warm.get(k) for k in ("msgs_per_s", "error")
                }
        for run in range(a.runs):
            for cli in senders:
                n = min(a.produce_count, a.official_count) if cli == "official" else a.produce_count
                title = f"produce run {run + 1}: {cli} ({n:,} msgs, {a.in_flight} in flight)"
                r = measure(title, partial(_runs.produce, env, cli, ptopic, n, a.in_flight))
                res["produce"].setdefault(cli, []).append(r)
    if "send" not in a.skip:
        stopic = _setup.new_topic(cl, "bench_send", broker)
        for run in range(a.runs):
            for cli in senders:
                if cli == "official" and run > 0:
                    continue  # ~20x slower than the others: once is enough
                title = (
                    f"send latency run {run + 1}: {cli} at {a.rate:,} msg/s, "
                    f"at most {a.in_flight} in flight"
                )
                args = (env, cli, stopic, a.rate, a.send_seconds, a.in_flight)
                res["send"].setdefault(cli, []).append(
                    measure(title, partial(_runs.send_latency, *args))
                )
    if "latency" not in a.skip:
        secs, warm = a.latency_seconds, a.latency_warmup
        if a.latency_warm_pass:
            # Not recorded. The brokers' JIT compiles the paced path (long-polling wake-up,
            # small sends and pulls) during the first paced run: their C2 threads took
            # 0.3-0.6 of a core then, and that run's p99 was the worst of every full run.
            title = "e2e latency warm-up pass (not recorded): aiorocket"
            warm_pass = measure(title, partial(_runs.latency, env, "aiorocket", a.rate, secs, warm))
            meta["latency_warm_pass_result"] = {k: warm_pass.get(k) for k in LAT_KEYS}
        for run in range(a.runs):
            pace = f"{a.rate:,} msg/s for {warm:.0f}+{secs:.0f}s"
            if a.latency_floor:
                # the common producer alone, each run (the machine's share of send->stored)
                title = f"e2e latency run {run + 1}: common producer alone at {pace}"
                floor = partial(_runs.latency_floor, env, a.rate, secs, warm)
                res.setdefault("latency_floor", []).append(measure(title, floor))
            # The sides' order turns each run: the run after the floor's (a producer alone,
            # its messages never read) is each side's in turn, not always aiorocket's.
            turn = run % len(clients)
            for cli in clients[turn:] + clients[:turn]:  # all fed by the one common producer
                if cli == "official" and run > 0:
                    continue
                title = f"e2e latency run {run + 1}: common producer -> {cli} at {pace}"
                r = measure(title, partial(_runs.latency, env, cli, a.rate, secs, warm))
                res["latency"].setdefault(cli, []).append(r)
    if "grpc" not in a.skip:
        grpc_case(a, env, topic, official, res["grpc"])
    if "pop" not in a.skip:
        pop_case(a, env, topic, res["pop"])
    if "idle" not in a.skip:
        title = f"scale: 1 consumer, {a.idle_topics} x 8 idle queues"
        res["idle"] = measure(title, partial(_runs.idle, env, a.idle_topics, a.idle_seconds))
    if "backlog" not in a.skip:
        if a.backlog_count > a.count:
            _setup.prefill(cl, topic, a.backlog_count - a.count, a.size)
        title = f"backlog: {a.backlog_count:,} waiting, slow handler"
        args = (env, topic, a.backlog_count, a.backlog_seconds, a.backlog_delay)
        res["backlog"] = measure(title, partial(_runs.backlog, *args))
    meta.update(loadavg_end=os.getloadavg(), calibrate_ms_end=c.calibrate(), topic=topic)
    os.makedirs(RESULTS, exist_ok=True)
    path = os.path.join(RESULTS, f"compare-{stamp}.json")
    with open(path, "w") as f:
        json.dump(res, f, indent=1, default=str)
    if any(res[case] for case in ("consume", "produce", "send", "latency")):
        print(_report.table(res))
    if res["grpc"]["consume"] or res["grpc"]["produce"]:
        print(_report.grpc_table(res["grpc"]))
    if any(res["pop"].values()):
        print(_report.pop_table(res["pop"]))
    print(f"\nJSON  {path}")
    png = path.replace(".json", ".png")
    print(f"chart {png}" if _report.chart(res, png) else "no chart: pip install matplotlib")


def grpc_case(
    a: argparse.Namespace, env: _runs.Env, topic: str, official: bool, out: dict[str, Any]
) -> None:
    """Every client through the one Proxy: consume the pre-filled topic, produce, and the
    e2e latency of the common paced producer; with the cluster's CPU (the Proxy runs in
    broker-a's JVM, local mode) per message beside each client's own."""
    env.java_grpc = None if "java" in a.skip else _setup.build_java_grpc()
    clients = [cli for cli in GRPC_CLIENTS if cli != "official" or official]
    if env.java_grpc is None:
        clients.remove("java-grpc")
    n = a.grpc_count
    ptopic = _setup.new_topic(env.cl, "bench_grpc_produce", env.broker)
    if a.grpc_warm_pass:
        grpc_warm_pass(a, env, topic, ptopic, [cli for cli in clients if cli != "official"], out)
    for run in range(a.runs):
        for cli in clients:
            if cli == "official" and run > 0:
                continue  # slow: once is enough
            title = f"gRPC consume run {run + 1}: {cli} ({n:,} msgs)"
            r = with_cluster_cpu(env, n, partial(_runs.consume, env, cli, topic, n))
            out["consume"].setdefault(cli, []).append(measure(title, lambda r=r: r))
            for sender in (cli, "aiorocket-grpc-batch")[: 2 if cli == "aiorocket-grpc" else 1]:
                title = (
                    f"gRPC produce run {run + 1}: {sender} ({n:,} msgs, {a.in_flight} in flight)"
                )
                produce = partial(_runs.produce, env, sender, ptopic, n, a.in_flight)
                r = with_cluster_cpu(env, n, produce)
                out["produce"].setdefault(sender, []).append(measure(title, lambda r=r: r))
            if cli == "official":
                continue  # its e2e latency is the main latency case's column
            pace = f"{a.rate:,} msg/s for {a.latency_warmup:.0f}+{a.latency_seconds:.0f}s"
            title = f"gRPC e2e latency run {run + 1}: common producer -> {cli} at {pace}"
            args = (env, cli, a.rate, a.latency_seconds, a.latency_warmup)
            out["latency"].setdefault(cli, []).append(measure(title, partial(_runs.latency, *args)))


#: the gRPC warm pass: messages per consume/produce, paced seconds (warm-up + measured)
GRPC_WARM_COUNT = 5000
GRPC_WARM_SECONDS = (2.0, 2.0)


def grpc_warm_pass(
    a: argparse.Namespace,
    env: _runs.Env,
    topic: str,
    ptopic: str,
    clients: list[str],
    out: dict[str, Any],
) -> None:
    """Not recorded: a short consume, single-message produce and paced e2e run of every
    gRPC side before the measured runs. Without it the side that ran first met a cold
    Proxy (its receive, send and pop paths not yet JIT-compiled): round 6's first runs
    sent at 0.75x / 0.86x Java's where the later ones ran 1.21-1.36x, and the first e2e
    p99 was 0.5-2 s. Each side goes through every path, so neither is measured cold."""
    n = min(a.grpc_count, GRPC_WARM_COUNT)
    warm, secs = GRPC_WARM_SECONDS
    started, done = time.monotonic(), {}
    for cli in clients:
        title = f"gRPC warm-up pass (not recorded): {cli}"
        runs = {
            "consume": partial(_runs.consume, env, cli, topic, n),
            "produce": partial(_runs.produce, env, cli, ptopic, n, a.in_flight),
            "latency": partial(_runs.latency, env, cli, a.rate, secs, warm),
        }
        for case, fn in runs.items():
            r = measure(f"{title}: {case}", fn)
            done[f"{cli} {case}"] = {k: r.get(k) for k in ("msgs_per_s", *LAT_KEYS) if k in r}
    out["warm_pass"] = {"seconds": time.monotonic() - started, "runs": done}
    c.log(f"gRPC warm-up pass: {out['warm_pass']['seconds']:.0f} s")


def pop_case(a: argparse.Namespace, env: _runs.Env, topic: str, out: dict[str, Any]) -> None:
    """POP over remoting beside the pull consumer and the Java push consumer in POP mode
    (issue 33): drain ``--pop-count`` of the pre-filled topic, the e2e latency of the
    common paced producer at ``--rate`` (and at ``--low-rate`` on a topic of both
    brokers), and the longest consumption gap while a member
    joins (pull and POP; benchmarks/pop.py's membership run). Each round runs the sides
    in turn, every other round in reverse order, so that none always runs first on a
    machine whose load drifts."""
    sides = ["aiorocket", "aiorocket-pop"] + ["java-pop"] * bool(env.java)
    n = a.pop_count
    pace = f"{a.rate:,} msg/s for {a.latency_warmup:.0f}+{a.latency_seconds:.0f}s"
    for run in range(a.runs):
        order = sides if run % 2 == 0 else sides[::-1]
        for cli in order:
            title = f"POP case consume run {run + 1}: {cli} ({n:,} msgs)"
            r = measure(title, partial(_runs.consume, env, cli, topic, n))
            out["consume"].setdefault(cli, []).append(r)
        for cli in order:
            title = f"POP case e2e latency run {run + 1}: common producer -> {cli} at {pace}"
            args = (env, cli, a.rate, a.latency_seconds, a.latency_warmup)
            out["latency"].setdefault(cli, []).append(measure(title, partial(_runs.latency, *args)))
        for cli in order:  # a low rate on both brokers: an idle broker must hold up nothing
            title = f"POP case e2e latency run {run + 1}: {a.low_rate} msg/s, 2 brokers -> {cli}"
            args = (env, cli, a.low_rate, a.latency_seconds, a.latency_warmup)
            r = measure(title, partial(_runs.latency, *args, spread=True))
            out["low"].setdefault(cli, []).append(r)
        for cli in [cli for cli in order if cli != "java-pop"]:  # pull and POP
            mode = "pop" if cli == "aiorocket-pop" else "pull"
            title = f"POP case join run {run + 1}: {mode} at {a.join_rate:,} msg/s"
            args = (env.cl, mode, a.join_rate, a.join_window)
            out["join"].setdefault(cli, []).append(
                measure(title, lambda args=args: anyio.run(membership, *args))
            )


def with_cluster_cpu(env: _runs.Env, n: int, fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """``fn()``'s result with each cluster process's CPU during it, in µs per message."""
    before = _setup.cluster_cpu(env.cl)
    try:
        r = fn()
    except Exception as exc:  # reported by measure(), as a failed run
        return {"error": str(exc)[-2000:]}
    after = _setup.cluster_cpu(env.cl)
    count = r.get("count") or n
    r["cluster_cpu_us_per_msg"] = {k: (after[k] - before[k]) / count * 1e6 for k in before}
    return r


if __name__ == "__main__":
    main()
