"""compare.py's output: the summary rows, the printed table, the PNG chart.

A run is *invalid* when it failed, any of its sends failed (its own, or those of the
paced producer feeding it), or its consumer handled fewer messages than it was given
(or, in a membership run, lost any): it is left out of the medians, and a client whose
every run is invalid shows ``INVALID`` instead of a figure (the reason is in the notes).
"""

from __future__ import annotations

import math
import statistics
from typing import Any

Value = float | str  # a median, or INVALID
Row = tuple[str, str, dict[str, Value], str]  # metric, unit, value per client, target

INVALID = "INVALID"
# aiorocket-plain: aiorocket's producer without auto_batch; java-batch: Java's producer
# with its own batching (setAutoBatch). Consumer cases fill the columns they have.
CLIENTS = ("aiorocket", "aiorocket-iter", "aiorocket-plain", "java", "java-batch", "official")
HEAD = ("aiorocket", "async for", "plain send", "java", "java batch", "official")


def invalid_reason(r: dict[str, Any]) -> str | None:
    """Why run ``r`` gives no figure, or None when it is valid."""
    if "error" in r:
        return "failed: " + str(r["error"]).splitlines()[0][:150] if r["error"] else "failed"
    failed = int(r.get("failed", 0) or 0) + int((r.get("producer") or {}).get("failed", 0) or 0)
    if failed:
        return f"{failed:,} failed sends"
    expected = r.get("expected")
    if expected is not None and int(r.get("count", 0) or 0) < expected:
        return f"handled {int(r.get('count', 0) or 0):,} of {expected:,} messages"
    if r.get("unhandled_after_kill"):
        return f"{r['unhandled_after_kill']:,} messages sent after the kill never handled"
    return None


def valid(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in runs if invalid_reason(r) is None]


def median(runs: list[dict[str, Any]], key: str) -> Value:
    """Median of ``key`` over the valid runs; INVALID when every run is invalid, NaN when
    there is no run (or no run has the figure)."""
    good = valid(runs)
    if runs and not good:
        return INVALID
    xs = [r[key] for r in good if isinstance(r.get(key), int | float)]
    return statistics.median(xs) if xs else math.nan


def spread(runs: list[dict[str, Any]], key: str) -> tuple[float, float, int] | None:
    """(min, max, n) of ``key`` over the valid runs, None without any."""
    xs = [r[key] for r in valid(runs) if isinstance(r.get(key), int | float)]
    return (min(xs), max(xs), len(xs)) if xs else None


def rows(results: dict[str, Any]) -> list[Row]:
    out: list[Row] = []
    cons, prod = results["consume"], results["produce"]
    for key, name, unit, target in (
        ("msgs_per_s", "consume rate", "msg/s", ">=1.5x java; iter within 20% of handler"),
        ("us_cpu_per_msg", "consume CPU / msg", "us", "<=0.4x java"),
        ("peak_rss_mb", "consume peak RSS", "MiB", ""),
    ):
        out.append((name, unit, {cl: median(cons.get(cl, []), key) for cl in CLIENTS}, target))
    for key, name, unit, target in (
        ("msgs_per_s", "produce rate", "msg/s", ">=50k auto; >=1.5x java batch; plain >=1.2x java"),
        ("cpu_per_100k", "produce CPU / 100k msgs", "s", ""),
        ("send_p99_ms", "send latency p99", "ms", "same sends in flight for all"),
        ("peak_rss_mb", "produce peak RSS", "MiB", ""),
    ):
        out.append((name, unit, {cl: median(prod.get(cl, []), key) for cl in CLIENTS}, target))
    send = results.get("send", {})
    for key, name in (("send_p50_ms", "paced send p50"), ("send_p99_ms", "paced send p99")):
        out.append((name, "ms", {cl: median(send.get(cl, []), key) for cl in CLIENTS}, ""))
    # A run without steady-state samples (its consumer got nothing until the producer
    # was done) measured no latency at all: it is listed in the notes, not in a median.
    lat = results["latency"]
    steady = {
        cl: [r for r in lat.get(cl, []) if r.get("lat_samples", 0) > 0 or invalid_reason(r)]
        for cl in CLIENTS
    }
    for key, name in (("lat_p50_ms", "e2e latency p50"), ("lat_p99_ms", "e2e latency p99")):
        target = "<5 ms at 5k/s, <10 ms at 20k/s" if key == "lat_p99_ms" else ""
        out.append((name, "ms", {cl: median(steady[cl], key) for cl in CLIENTS}, target))
    # The tail split at the broker's store time, every consumer that reports it (Java's
    # remoting one too): the producer's and broker's side, and the consumer's.
    for key, name, target in (
        ("send_to_store_p99_ms", "p99 send -> stored", ""),
        ("store_to_user_p99_ms", "p99 stored -> user", "consumer's share <3 ms at 20k/s"),
    ):
        out.append((name, "ms", {cl: median(steady[cl], key) for cl in CLIENTS}, target))
    return out


def fmt(x: Value) -> str:
    if isinstance(x, str):
        return x
    if math.isnan(x):
        return "-"
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.2f}"


def ratio(a: Value, b: Value) -> str:
    if isinstance(a, str) or isinstance(b, str) or math.isnan(a) or math.isnan(b) or b == 0:
        return "-"
    return f"{a / b:.2f}x"


def table(results: dict[str, Any]) -> str:
    head = ("metric", "unit", *HEAD, "aio/java", "aio/java batch", "aio/official", "target")
    lines = [head]
    for name, unit, v, target in rows(results):
        a = v["aiorocket"]
        cells = tuple(fmt(v[cl]) for cl in CLIENTS)
        ratios = (ratio(a, v["java"]), ratio(a, v["java-batch"]), ratio(a, v["official"]))
        lines.append((name, unit, *cells, *ratios, target))
    widths = [max(len(r[i]) for r in lines) for i in range(len(head))]
    text = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in lines]
    text.insert(1, "  ".join("-" * w for w in widths))
    extra = notes(results)
    if "queues" in results.get("idle", {}):
        i = results["idle"]
        extra.append(
            f"scale: {i['queues']} idle queues: CPU {i['cpu_percent']:.2f}% over "
            f"{i['seconds']:.0f}s, RSS {i['rss_before_mb']:.0f} -> "
            f"{i['rss_end_mb']:.0f} MiB (growth {i['rss_growth_mb']:.1f} MiB, "
            f"{i['rss_growth_idle_mb']:.1f} while idle); target <0.5% CPU (issue 17)"
        )
    if "max_cached_msgs" in results.get("backlog", {}):
        b = results["backlog"]
        extra.append(
            f"backlog: {b['backlog']:,} waiting, slow handler ({b['delay'] * 1e3:.0f} ms)"
            f" for {b['seconds']:.0f}s: peak RSS {b['peak_rss_mb']:.0f} MiB, "
            f"max cached {b['max_cached_msgs']:,} msgs; target peak RSS <100 MB (issue 17)"
        )
    return "\n".join(text + extra)


def _split_note(split: dict[str, float] | None) -> str:
    """A consumer's stored -> handler split (benchmarks/_receive_split.py, _pull_split.py)."""
    if not split:
        return ""
    parts = ("wait", "server", "stream", "dispatch")
    each = ", ".join(f"{p} {split[f'{p}_p50_ms']:.1f}/{split[f'{p}_p99_ms']:.1f}" for p in parts)
    tail = ", ".join(f"{p} {split[f'tail_{p}_ms']:.1f}" for p in parts)
    receives = ""
    if "early_pct" in split:  # the gRPC split: how the receives went
        receives = (f"; {split.get('mean_batch', 0):.1f} a receive, "
                    f"{split.get('full_pct', 0):.0f}% full, {split['early_pct']:.1f}% handled "
                    f"before their stream's end")  # fmt: skip
    own = ""
    if "own_cpu_p99_ms" in split:  # the remoting split: the consumer's CPU in its share
        share = ""
        if "share_p99_ms" in split:
            share = (f"; the consumer's share (stream + dispatch of a message) p50/p99 "
                     f"{split['share_p50_ms']:.2f}/{split['share_p99_ms']:.2f} ms, wait "
                     f"after its queue's previous answer was read p50/p99 "
                     f"{split['wait_client_p50_ms']:.2f}/{split['wait_client_p99_ms']:.2f} "
                     f"ms (slowest 1%: {split['tail_wait_client_ms']:.2f})")  # fmt: skip
        own = (f"{share}; the consumer's CPU in stream + dispatch p50/p99 "
               f"{split['own_cpu_p50_ms']:.2f}/{split['own_cpu_p99_ms']:.2f} ms (slowest 1%: "
               f"{split['tail_own_cpu_ms']:.2f}), handler calls ahead p50/p99 "
               f"{split['ahead_p50']:.0f}/{split['ahead_p99']:.0f}")  # fmt: skip
    if "tail_dispatch_cpu_ms" in split:  # dispatch's make-up over its own slowest 1%
        d, cpu, gc = (split[f"tail_dispatch{k}_ms"] for k in ("", "_cpu", "_gc"))
        receives += (f"; dispatch's slowest 1% ({d:.1f} ms): the loop's CPU {cpu:.1f}, "
                     f"GC {gc:.1f}, off a core {max(0.0, d - cpu - gc):.1f}")  # fmt: skip
    return (
        f"; stored->user by part, p50/p99 ms: {each}; its slowest 1% "
        f"({split['tail_stored_to_user_ms']:.1f} ms on average): {tail}{receives}{own}"
    )


def notes(results: dict[str, Any]) -> list[str]:
    """Invalid runs, spreads and caveats that the medians hide."""
    out = []
    keys = {
        "consume": "msgs_per_s",
        "produce": "msgs_per_s",
        "send": "send_p99_ms",
        "latency": "lat_p99_ms",
    }
    for case, key in keys.items():
        for client, runs in results.get(case, {}).items():
            for i, r in enumerate(runs, 1):
                reason = invalid_reason(r)
                if reason:
                    out.append(f"{case} {client} run {i}: INVALID ({reason})")
            sp = spread(runs, key)
            if sp and sp[2] > 1:
                out.append(f"{case} {client}: {key} {fmt(sp[0])}-{fmt(sp[1])} over {sp[2]} runs")
            for r in runs:
                if case == "latency" and "error" not in r:
                    p = r.get("producer", {})
                    out.append(
                        f"latency {client}: {r.get('lat_samples', 0):,} steady samples of "
                        f"{r['count']:,} received / {r['messages']:,} paced at {r['rate']:,}/s "
                        f"by {r.get('sender', '?')}; sends failed: {p.get('failed', 0):,}; "
                        f"producer took {p.get('elapsed', 0):.1f}s"
                        + ("" if r.get("lat_samples") else " (no latency measured: not in medians)")
                        + (
                            f"; p99 send->stored {r['send_to_store_p99_ms']:.1f} ms, "
                            f"stored->user {r['store_to_user_p99_ms']:.1f} ms"
                            if "store_to_user_p99_ms" in r
                            else ""
                        )
                        + _split_note(r.get("receive_split"))
                    )
    out += _floor_notes(results)
    return out


def _floor_notes(results: dict[str, Any]) -> list[str]:
    """The common paced producer alone (``_runs.latency_floor``) against the same
    producer beside each side's consumer: send p99 per run and their medians. The
    producer's own send p99 (its request's round trip) goes with send -> stored; alone,
    it is what the brokers and the machine give without any consumer."""
    out = []
    for i, r in enumerate(results.get("latency_floor", []), 1):
        reason = invalid_reason(r)
        if reason:
            out.append(f"latency floor run {i}: INVALID ({reason})")
    floor = valid(results.get("latency_floor", []))
    if not floor:
        return out

    def p99s(runs: list[dict[str, Any]]) -> list[float]:
        xs = (r.get("producer", {}).get("send_p99_ms") for r in runs if not invalid_reason(r))
        return [float(x) for x in xs if isinstance(x, int | float)]

    def show(xs: list[float]) -> str:
        return f"{statistics.median(xs):.1f} ms (runs {' / '.join(f'{x:.1f}' for x in xs)})"

    alone = p99s(floor)
    if not alone:
        return out
    line = f"latency floor: the common paced producer alone, send p99 {show(alone)}"
    beside = []
    for client, runs in results.get("latency", {}).items():
        xs = p99s(runs)
        if xs:
            beside.append(f"{client} {show(xs)}")
    if beside:
        line += "; beside each consumer: " + ", ".join(beside)
    return [*out, line]


#: aiorocket-grpc-batch: the producer with auto_batch (requests shared); a producer column
GRPC_CLIENTS = ("aiorocket-grpc", "aiorocket-grpc-batch", "java-grpc", "official")
#: the cluster process that runs the Proxy (local mode: the Proxy and broker-a, one JVM)
PROXY_PROCESS = "broker-a+proxy"


def _per_msg(runs: list[dict[str, Any]], fn: Any) -> Value:
    """Median of ``fn(run)`` over the valid runs (INVALID / NaN as :func:`median`)."""
    good = valid(runs)
    if runs and not good:
        return INVALID
    xs = [x for x in (fn(r) for r in good) if isinstance(x, int | float)]
    return statistics.median(xs) if xs else math.nan


def _proxy_cpu(r: dict[str, Any]) -> float | None:
    value = (r.get("cluster_cpu_us_per_msg") or {}).get(PROXY_PROCESS)
    return float(value) if isinstance(value, int | float) else None


def grpc_rows(results: dict[str, Any]) -> list[Row]:
    """compare.py's gRPC case: every client through the one Proxy."""
    cons, prod, lat = results["consume"], results["produce"], results["latency"]
    out: list[Row] = []

    def add(name: str, unit: str, runs: dict[str, Any], fn: Any, target: str = "") -> None:
        out.append((name, unit, {c: _per_msg(runs.get(c, []), fn) for c in GRPC_CLIENTS}, target))

    add("consume rate", "msg/s", cons, lambda r: r.get("msgs_per_s"), ">=1.5x java, >=5x official")
    add("consume client CPU / msg", "us", cons, lambda r: r.get("us_cpu_per_msg"), "<=80")
    add("consume Proxy+broker JVM CPU / msg", "us", cons, _proxy_cpu)
    add("produce rate", "msg/s", prod, lambda r: r.get("msgs_per_s"), ">=1.5x java, >=5x official")
    add("produce client CPU / msg", "us", prod,
        lambda r: r["cpu_per_100k"] * 10 if "cpu_per_100k" in r else None)  # fmt: skip
    add("produce Proxy+broker JVM CPU / msg", "us", prod, _proxy_cpu)
    add("send latency p99", "ms", prod, lambda r: r.get("send_p99_ms"))
    steady = {c: [r for r in lat.get(c, []) if r.get("lat_samples", 0) > 0] for c in GRPC_CLIENTS}
    add("e2e latency p50", "ms", steady, lambda r: r.get("lat_p50_ms"))
    add("e2e latency p99", "ms", steady, lambda r: r.get("lat_p99_ms"), "<20 ms at 5k/s, <=java")
    # Java's gRPC MessageView has no store time: aiorocket's split only.
    add("p99 send -> stored", "ms", steady, lambda r: r.get("send_to_store_p99_ms"))
    add("p99 stored -> user", "ms", steady, lambda r: r.get("store_to_user_p99_ms"))
    return out


def grpc_table(results: dict[str, Any]) -> str:
    # "aiorocket": the consumer, and the producer with auto_batch=False (one message per
    # request, as Java); "auto-batch": the gRPC producer's default.
    head = ("gRPC (one Proxy)", "unit", "aiorocket", "auto-batch (default)", "java",
            "official", "aio/java", "batch/java", "aio/official", "batch/official",
            "target")  # fmt: skip
    lines = [head]
    for name, unit, v, target in grpc_rows(results):
        a, b = v["aiorocket-grpc"], v["aiorocket-grpc-batch"]
        java, official = v["java-grpc"], v["official"]
        ratios = (ratio(a, java), ratio(b, java), ratio(a, official), ratio(b, official))
        lines.append((name, unit, *(fmt(v[c]) for c in GRPC_CLIENTS), *ratios, target))
    widths = [max(len(r[i]) for r in lines) for i in range(len(head))]
    text = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in lines]
    text.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(["", *text, *("grpc " + n for n in notes(results))])


def chart(results: dict[str, Any], path: str) -> bool:
    """Bar charts of the main rows; False when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    data = rows(results)
    fig, axes = plt.subplots(3, 4, figsize=(20, 10))
    colors = ["#1f77b4", "#6baed6", "#9ecae1", "#d62728", "#ff9896", "#2ca02c"]
    labels = ["aio", "aio iter", "aio plain", "java", "java batch", "official"]
    for ax, (name, unit, v, _target) in zip(axes.flat, data, strict=False):
        vals = [x if isinstance(x, float) and x > 0 else 0.0 for x in (v[cl] for cl in CLIENTS)]
        ax.bar(range(len(CLIENTS)), vals, color=colors)
        ax.set_xticks(range(len(CLIENTS)), labels, fontsize=8)
        # rates and latencies span three orders of magnitude: a log scale keeps the
        # small bars readable
        if any(vals) and max(vals) > 20 * min(x for x in vals if x > 0):
            ax.set_yscale("log")
        ax.set_title(f"{name} ({unit}{', log' if ax.get_yscale() == 'log' else ''})", fontsize=10)
        for i, cl in enumerate(CLIENTS):
            if vals[i]:
                ax.text(i, vals[i], fmt(v[cl]), ha="center", va="bottom", fontsize=8)
            else:  # no bar (INVALID or no figure): the label sits at the axis
                label = v[cl] if isinstance(v[cl], str) else "n/a"
                at = ax.get_xaxis_transform()
                ax.text(i, 0.02, label, ha="center", va="bottom", fontsize=8, transform=at)
    for ax in list(axes.flat)[len(data) :]:
        ax.axis("off")
    meta = results["meta"]
    fig.suptitle(
        f"aiorocket vs Java / official Python client, RocketMQ {meta['version']}, "
        f"{meta['count']:,} x {meta['size']} B (lower is better for CPU, RSS, "
        "latency)"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return True


#: compare.py's POP case: the pull consumer, POP over remoting, the Java POP consumer
POP_CLIENTS = ("aiorocket", "aiorocket-pop", "java-pop")


def pop_rows(results: dict[str, Any]) -> list[Row]:
    """compare.py's POP case (issue 33), one column per consumer."""
    cons, join = results["consume"], results["join"]

    def steady(case: str) -> dict[str, list[dict[str, Any]]]:
        runs = results.get(case, {})
        return {c: [r for r in runs.get(c, []) if r.get("lat_samples", 0) > 0] for c in POP_CLIENTS}

    lat, low = steady("latency"), steady("low")
    rate = next((r["rate"] for runs in low.values() for r in runs), 0)
    out: list[Row] = []
    for name, unit, runs, key, target in (
        ("consume rate", "msg/s", cons, "msgs_per_s", "pop >=1.5x java pop"),
        ("consume client CPU / msg", "us", cons, "us_cpu_per_msg", "pop <=0.4x java pop"),
        ("e2e latency p50", "ms", lat, "lat_p50_ms", ""),
        ("e2e latency p99", "ms", lat, "lat_p99_ms", ""),
        ("p99 send -> stored", "ms", lat, "send_to_store_p99_ms", ""),
        ("p99 stored -> handler", "ms", lat, "store_to_user_p99_ms", ""),
        (f"e2e p50 at {rate}/s, 2 brokers", "ms", low, "lat_p50_ms", ""),
        (f"e2e p99 at {rate}/s, 2 brokers", "ms", low, "lat_p99_ms", ""),
        ("longest gap while B joins", "ms", join, "join_gap_ms", "pop <1,000"),
        ("longest gap before the join", "ms", join, "gap_before_join_ms", ""),
    ):
        out.append((name, unit, {c: median(runs.get(c, []), key) for c in POP_CLIENTS}, target))
    return out


def pop_validity(results: dict[str, Any]) -> list[str]:
    """One line per side and measurement: every run valid (the same work, no failures)?
    Empty when they all are."""
    out = []
    for case in ("consume", "latency", "low", "join"):
        for client, runs in results.get(case, {}).items():
            bad = [(i, invalid_reason(r)) for i, r in enumerate(runs, 1)]
            out += [f"pop {case} {client} run {i}: INVALID ({why})" for i, why in bad if why]
    return out


def pop_table(results: dict[str, Any]) -> str:
    head = ("POP over remoting", "unit", "pull", "pop", "java pop", "pop/java pop", "target")
    lines = [head]
    for name, unit, v, target in pop_rows(results):
        cells = tuple(fmt(v[c]) for c in POP_CLIENTS)
        lines.append((name, unit, *cells, ratio(v["aiorocket-pop"], v["java-pop"]), target))
    widths = [max(len(r[i]) for r in lines) for i in range(len(head))]
    text = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in lines]
    text.insert(1, "  ".join("-" * w for w in widths))
    invalid = pop_validity(results)
    verdict = (
        ["VALID: every side handled every message it was given, no send failed"]
        if not invalid else ["NOT A VALID COMPARISON where a run is INVALID:", *invalid]
    )  # fmt: skip
    spreads = []
    for case, key in (
        ("consume", "msgs_per_s"),
        ("latency", "lat_p99_ms"),
        ("low", "lat_p99_ms"),
        ("join", "join_gap_ms"),
    ):
        for client, runs in results.get(case, {}).items():
            sp = spread(runs, key)
            if sp:
                spreads.append(
                    f"pop {case} {client}: {key} {fmt(sp[0])}-{fmt(sp[1])} over {sp[2]} runs"
                )
    return "\n".join(["", *text, *verdict, *spreads])
