"""Soak: produce and consume at a steady rate for a long time; memory and tasks must stay flat.

    .venv/bin/python benchmarks/soak.py --minutes 30 --rate 500 [--sample 60] [--png soak.png]

One process runs a Producer (``--rate`` messages/s, ``--size`` bytes) and a Consumer of
the same topic on the local cluster (``python -m aiorocket.testing.broker start``; a
fresh topic and group). Every ``--sample`` seconds it records this process's RSS, open
file descriptors, asyncio task count, CPU used since the last sample, and the end-to-end
latency (send to handler, from a timestamp in the body: p50, p99, max) of the messages
consumed since the last sample. Prints a table as it goes, then a JSON summary: the
RSS and task growth between the first and the last sample, and the totals (produced,
consumed, lost, duplicated). ``--png`` plots the samples (needs matplotlib).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import struct
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import anyio

from aiorocket.consumer import ConsumeFromWhere, Consumer
from aiorocket.message import Message
from aiorocket.producer import Producer
from aiorocket.received import ConsumerMessage
from aiorocket.testing.broker import LocalRocketMQ

_STAMP = struct.Struct(">QQ")  # send time (epoch µs), sequence number


def _rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


class Ledger:
    """Which of the sequence numbers sent so far were consumed, and how often, in one byte
    per message allocated up front: the soak measures the client's memory, so its own
    bookkeeping must not grow with the messages (a set and a Counter of every sequence
    number did: ~150 bytes per message, 110 MiB of the RSS after 12 minutes at 1,000/s)."""

    def __init__(self, expected: int) -> None:
        self.counts = bytearray(expected)  # zero-filled now: its pages count from the start
        self.sent = 0  # sequence numbers 0 .. sent-1 were acknowledged by the broker
        self.distinct = 0
        self.duplicates = 0

    def on_sent(self, seq: int) -> None:
        if seq >= len(self.counts):  # a longer run than planned: grow (and say so in RSS)
            self.counts.extend(bytes(len(self.counts)))
        self.sent = max(self.sent, seq + 1)

    def on_consumed(self, seq: int) -> None:
        if seq >= len(self.counts):
            self.counts.extend(bytes(seq + 1 - len(self.counts)))
        n = self.counts[seq]
        if n:
            self.duplicates += 1
        else:
            self.distinct += 1
        self.counts[seq] = min(n + 1, 255)

    @property
    def lost(self) -> int:
        return self.sent - sum(1 for n in self.counts[: self.sent] if n)

    @property
    def complete(self) -> bool:
        return self.distinct >= self.sent


async def soak(args: argparse.Namespace, cluster: LocalRocketMQ) -> dict[str, Any]:
    topic, group = f"soak_{uuid.uuid4().hex[:8]}", f"soak_g_{uuid.uuid4().hex[:8]}"
    await cluster.create_topic(topic, queues=4)
    ledger = Ledger(int(args.minutes * 60 * args.rate * 1.2) + 10_000)
    stop = anyio.Event()
    latencies: list[float] = []

    drained = anyio.Event()

    async def handle(msg: ConsumerMessage) -> None:
        stamp, seq = _STAMP.unpack_from(msg.body)
        ledger.on_consumed(seq)
        latencies.append(time.time() - stamp / 1e6)
        if stop.is_set() and ledger.complete:
            drained.set()

    consumer = Consumer(group, cluster.namesrv_addr, handler=handle,
                        consume_from_where=ConsumeFromWhere.FIRST_OFFSET)  # fmt: skip
    consumer.subscribe(topic)
    pad = b"x" * max(0, args.size - _STAMP.size)
    samples: list[dict[str, Any]] = []

    async def produce(producer: Producer) -> None:
        seq, interval = 0, 1.0 / args.rate
        next_at = anyio.current_time()
        while not stop.is_set():
            body = _STAMP.pack(time.time_ns() // 1000, seq) + pad
            await producer.send(Message(topic, body))
            ledger.on_sent(seq)
            seq += 1
            next_at += interval
            with anyio.move_on_after(max(0.0, next_at - anyio.current_time())):
                await stop.wait()  # pacing: the soak's load is a rate

    async with consumer, Producer(f"soak_p_{uuid.uuid4().hex[:8]}", cluster.namesrv_addr) as p:
        async with anyio.create_task_group() as tg:
            tg.start_soon(produce, p)
            end = time.monotonic() + args.minutes * 60
            cpu0, t0 = _cpu(), time.monotonic()
            print(f"{'min':>6} {'RSS MiB':>8} {'fds':>5} {'tasks':>6} {'CPU %':>6} "
                  f"{'e2e p50 ms':>10} {'p99 ms':>8} {'max ms':>8} {'consumed':>9}")  # fmt: skip
            while time.monotonic() < end:
                await anyio.sleep(min(args.sample, max(0.0, end - time.monotonic())))
                cpu1, t1 = _cpu(), time.monotonic()
                lat, latencies[:] = list(latencies), []
                row = {
                    "minute": round((t1 - (end - args.minutes * 60)) / 60, 2),
                    "rss_mib": round(_rss_mib(), 1),
                    "fds": _fds(),
                    "tasks": len(asyncio.all_tasks()),
                    "cpu_pct": round(100 * (cpu1 - cpu0) / (t1 - t0), 1),
                    "e2e_p50_ms": round(1000 * _pct(lat, 0.5), 1),
                    "e2e_p99_ms": round(1000 * _pct(lat, 0.99), 1),
                    "e2e_max_ms": round(1000 * max(lat, default=float("nan")), 1),
                    "consumed": ledger.distinct,
                }
                samples.append(row)
                cpu0, t0 = cpu1, t1
                print(f"{row['minute']:>6} {row['rss_mib']:>8} {row['fds']:>5} {row['tasks']:>6} "
                      f"{row['cpu_pct']:>6} {row['e2e_p50_ms']:>10} {row['e2e_p99_ms']:>8} "
                      f"{row['e2e_max_ms']:>8} {row['consumed']:>9}", flush=True)  # fmt: skip
            stop.set()
        if ledger.complete:
            drained.set()
        with anyio.move_on_after(60):  # the tail drains
            await drained.wait()
    first, last = samples[0], samples[-1]
    summary = {
        "minutes": args.minutes, "rate": args.rate, "size": args.size,
        "produced": ledger.sent, "consumed_distinct": ledger.distinct, "lost": ledger.lost,
        "duplicates": ledger.duplicates,
        "rss_growth_mib": round(last["rss_mib"] - first["rss_mib"], 1),
        "task_growth": last["tasks"] - first["tasks"], "fd_growth": last["fds"] - first["fds"],
        "samples": samples,
    }  # fmt: skip
    if args.png:
        _plot(samples, args.png)
    return summary


def _plot(samples: list[dict[str, Any]], path: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("--png needs matplotlib (pip install matplotlib); no plot written", file=sys.stderr)
        return
    minutes = [s["minute"] for s in samples]
    fig, axes = plt.subplots(4, 1, figsize=(8, 10), sharex=True)
    for ax, keys, label in (
        (axes[0], ["rss_mib"], "RSS (MiB)"),
        (axes[1], ["tasks", "fds"], "tasks, fds"),
        (axes[2], ["cpu_pct"], "CPU (%)"),
        (axes[3], ["e2e_p50_ms", "e2e_p99_ms"], "e2e latency (ms)"),
    ):
        for key in keys:
            ax.plot(minutes, [s[key] for s in samples], label=key)
        ax.set_ylabel(label)
        ax.legend(loc="upper left")
    axes[-1].set_xlabel("minutes")
    fig.tight_layout()
    fig.savefig(path)


def main() -> None:
    raw = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=raw)
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--rate", type=float, default=500.0, help="messages per second")
    parser.add_argument("--size", type=int, default=256, help="body bytes")
    parser.add_argument("--sample", type=float, default=60.0, help="seconds between samples")
    parser.add_argument("--png", help="write a plot of the samples here (needs matplotlib)")
    parser.add_argument("--json", help="write the summary here")
    args = parser.parse_args()
    cluster = LocalRocketMQ.attach()  # outside the event loop: it runs one of its own
    if cluster is None:
        raise SystemExit("no local RocketMQ runs: python -m aiorocket.testing.broker start")
    summary = asyncio.run(soak(args, cluster))
    text = json.dumps({k: v for k, v in summary.items() if k != "samples"}, indent=2)
    print(text)
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=2) + "\n")


if __name__ == "__main__":
    main()
