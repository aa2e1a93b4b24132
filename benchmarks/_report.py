"""compare.py's output: the summary rows, the printed table, the PNG chart."""

from __future__ import annotations

import math
import statistics
from typing import Any

Row = tuple[str, str, dict[str, float], str]  # metric, unit, value per client, target

CLIENTS = ("aiorocket", "aiorocket-iter", "aiorocket-plain", "java", "official")


def median(runs: list[dict[str, Any]], key: str) -> float:
    xs = [r[key] for r in runs if isinstance(r.get(key), int | float)]
    return statistics.median(xs) if xs else math.nan


def rows(results: dict[str, Any]) -> list[Row]:
    out: list[Row] = []
    cons, prod, lat = results["consume"], results["produce"], results["latency"]
    for key, name, unit, target in (
        ("msgs_per_s", "consume rate", "msg/s", ">=50k; >=0.7x java; >=5x official"),
        ("cpu_per_100k", "consume CPU / 100k msgs", "s", "<=2 s (20 us/msg)"),
        ("peak_rss_mb", "consume peak RSS", "MiB", ""),
    ):
        vals = {cl: median(cons.get(cl, []), key) for cl in CLIENTS}
        if key == "msgs_per_s":
            target += "; iter within 20% of handler"
        out.append((name, unit, vals, target))
    for key, name, unit, target in (
        ("msgs_per_s", "produce rate", "msg/s", ">=30k; >=0.5x java"),
        ("cpu_per_100k", "produce CPU / 100k msgs", "s", ""),
        ("peak_rss_mb", "produce peak RSS", "MiB", ""),
    ):
        out.append((name, unit, {cl: median(prod.get(cl, []), key) for cl in CLIENTS}, target))
    # A run without steady-state samples (its consumer got nothing until the producer
    # was done) measured no latency at all: it is listed in the notes, not in a median.
    steady = {cl: [r for r in lat.get(cl, []) if r.get("lat_samples", 0) > 0] for cl in CLIENTS}
    for key, name in (("lat_p50_ms", "e2e latency p50"), ("lat_p99_ms", "e2e latency p99")):
        target = "<10 ms" if key == "lat_p99_ms" else ""
        out.append((name, "ms", {cl: median(steady[cl], key) for cl in CLIENTS}, target))
    return out


def fmt(x: float) -> str:
    if math.isnan(x):
        return "-"
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.2f}"


def ratio(a: float, b: float) -> str:
    return "-" if math.isnan(a) or math.isnan(b) or b == 0 else f"{a / b:.2f}x"


def table(results: dict[str, Any]) -> str:
    head = (
        "metric",
        "unit",
        "aiorocket",
        "async for",
        "plain send",
        "java",
        "aio/java",
        "official",
        "aio/official",
        "target",
    )
    lines = [head]
    for name, unit, v, target in rows(results):
        a = v["aiorocket"]
        lines.append(
            (
                name,
                unit,
                fmt(a),
                fmt(v["aiorocket-iter"]),
                fmt(v["aiorocket-plain"]),
                fmt(v["java"]),
                ratio(a, v["java"]),
                fmt(v["official"]),
                ratio(a, v["official"]),
                target,
            )
        )
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
            f"{i['rss_growth_idle_mb']:.1f} while idle); target <2% and <50 MB"
        )
    if "max_cached_msgs" in results.get("backlog", {}):
        b = results["backlog"]
        extra.append(
            f"backlog: {b['backlog']:,} waiting, slow handler ({b['delay'] * 1e3:.0f} ms)"
            f" for {b['seconds']:.0f}s: peak RSS {b['peak_rss_mb']:.0f} MiB, "
            f"max cached {b['max_cached_msgs']:,} msgs; target <300 MB"
        )
    return "\n".join(text + extra)


def notes(results: dict[str, Any]) -> list[str]:
    """Failures and caveats that the medians hide."""
    out = []
    for case in ("consume", "produce", "latency"):
        for client, runs in results.get(case, {}).items():
            for r in runs:
                if "error" in r:
                    out.append(f"{case} {client}: FAILED: {r['error'].splitlines()[0][:150]}")
                elif case == "latency":
                    p = r.get("producer", {})
                    out.append(
                        f"latency {client}: {r.get('lat_samples', 0):,} steady samples of "
                        f"{r['count']:,} received / {r['messages']:,} paced at {r['rate']:,}/s; "
                        f"sends failed: {p.get('failed', 0):,}; producer took "
                        f"{p.get('elapsed', 0):.1f}s"
                        + ("" if r.get("lat_samples") else " (no latency measured: not in medians)")
                    )
    return out


def chart(results: dict[str, Any], path: str) -> bool:
    """Bar charts of the main rows; False when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    data = rows(results)
    fig, axes = plt.subplots(2, 4, figsize=(16, 7))
    colors = ["#1f77b4", "#6baed6", "#9ecae1", "#d62728", "#2ca02c"]
    for ax, (name, unit, v, _target) in zip(axes.flat, data, strict=False):
        vals = [0.0 if math.isnan(v[cl]) else v[cl] for cl in CLIENTS]
        ax.bar(range(len(CLIENTS)), vals, color=colors)
        ax.set_xticks(range(len(CLIENTS)), ["aio", "aio iter", "aio plain", "java", "official"])
        ax.set_title(f"{name} ({unit})", fontsize=10)
        for i, x in enumerate(vals):
            ax.text(i, x, fmt(x) if x else "n/a", ha="center", va="bottom", fontsize=8)
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
