"""Producer throughput and latency: 1 KiB messages with a bounded number in flight.

    python benchmarks/produce.py [--namesrv HOST:PORT] [--topic T] [--messages N]
                                 [--size BYTES] [--in-flight K] [--backend asyncio|trio]
                                 [--auto-batch]

Without ``--namesrv`` it uses the local cluster of ``python -m aiorocket.testing.broker``
(started with ``start --brokers 2``) and creates a fresh 8-queue topic on every broker.

Two phases, each after a short warm-up:

* ``workers``: K tasks, each awaiting ``send`` in a loop, so exactly K requests are in
  flight; every send's latency is recorded (p50/p90/p99/p99.9/max).
* ``start_send``: one loop feeding a task group with :meth:`Producer.start_send`, which
  waits for one of K in-flight slots before spawning: the backpressured fire-and-collect
  pattern. Latency is measured from the moment the send was spawned.

Not a test: it prints its figures and asserts nothing about them.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable

import anyio

from aiorocket.client.results import SendResult
from aiorocket.message import Message
from aiorocket.producer import Producer
from aiorocket.testing.broker import LocalRocketMQ


def percentile(sorted_values: list[float], p: float) -> float:
    if not sorted_values:
        return float("nan")
    index = min(len(sorted_values) - 1, max(0, round(p / 100 * len(sorted_values)) - 1))
    return sorted_values[index]


def report(
    name: str, count: int, size: int, elapsed: float, cpu: float, latencies: list[float]
) -> None:
    """``cpu``: this process's CPU seconds, to tell a busy client from a busy broker."""
    lat = sorted(x * 1000 for x in latencies)
    rate = count / elapsed
    print(
        f"{name:<11} {count} msgs in {elapsed:.2f}s: {rate:,.0f} msgs/s, "
        f"{rate * size / 1e6:.1f} MB/s, client CPU {cpu / count * 1e6:.0f} us/msg "
        f"({cpu / elapsed:.0%} of a core) | latency ms p50 {percentile(lat, 50):.2f} "
        f"p90 {percentile(lat, 90):.2f} p99 {percentile(lat, 99):.2f} "
        f"p99.9 {percentile(lat, 99.9):.2f} max {lat[-1]:.2f} mean {statistics.fmean(lat):.2f}"
    )


async def run_workers(
    producer: Producer, topic: str, body: bytes, count: int, workers: int
) -> tuple[float, list[float]]:
    latencies: list[float] = []
    per_worker = count // workers

    async def worker() -> None:
        for _ in range(per_worker):
            t0 = time.perf_counter()
            await producer.send(Message(topic, body))
            latencies.append(time.perf_counter() - t0)

    started = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for _ in range(workers):
            tg.start_soon(worker)
    return time.perf_counter() - started, latencies


async def run_start_send(
    producer: Producer, topic: str, body: bytes, count: int
) -> tuple[float, list[float]]:
    latencies: list[float] = []

    def on_result_since(t0: list[float]) -> Callable[[SendResult], None]:
        def done(_: SendResult) -> None:
            latencies.append(time.perf_counter() - t0[0])

        return done

    started = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for _ in range(count):
            t0 = [0.0]
            await producer.start_send(tg, Message(topic, body), on_result=on_result_since(t0))
            t0[0] = time.perf_counter()  # the spawned send has not run yet: no await since
    return time.perf_counter() - started, latencies


async def main(args: argparse.Namespace, cluster: LocalRocketMQ | None) -> None:
    namesrv, topic = args.namesrv, args.topic
    if namesrv is None:
        if cluster is None:
            sys.exit("no --namesrv and no local cluster: python -m aiorocket.testing.broker "
                     "start --brokers 2")  # fmt: skip
        namesrv = cluster.namesrv_addr
    if topic is None:
        if cluster is None:
            sys.exit("--topic is needed with --namesrv")
        topic = f"bench_produce_{uuid.uuid4().hex[:8]}"
        await cluster.create_topic(topic, queues=8)
    body = os.urandom(args.size)
    print(
        f"namesrv {namesrv} topic {topic}: {args.messages} x {args.size} B, "
        f"{args.in_flight} in flight, backend {args.backend}"
    )
    settings = {"max_in_flight": args.in_flight, "auto_batch": args.auto_batch or None}
    async with Producer("bench_producer", namesrv, **settings) as producer:
        await run_workers(producer, topic, body, args.warmup, args.in_flight)  # warm-up
        cpu = time.process_time()
        elapsed, lat = await run_workers(producer, topic, body, args.messages, args.in_flight)
        report("workers", len(lat), args.size, elapsed, time.process_time() - cpu, lat)
        await run_start_send(producer, topic, body, args.warmup)  # warm-up
        cpu = time.process_time()
        elapsed, lat = await run_start_send(producer, topic, body, args.messages)
        report("start_send", len(lat), args.size, elapsed, time.process_time() - cpu, lat)
        if producer.batcher is not None:
            b = producer.batcher
            print(f"batches {b.batches}, mean {b.batched_messages / max(b.batches, 1):.1f} msgs")


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--namesrv", default=os.environ.get("AIOROCKET_NAMESRV_ADDR"))
    p.add_argument("--topic", default=None, help="an existing topic (default: a new one)")
    p.add_argument("--messages", type=int, default=20_000)
    p.add_argument("--size", type=int, default=1024)
    p.add_argument("--in-flight", type=int, default=64)
    p.add_argument("--warmup", type=int, default=1000)
    p.add_argument("--backend", choices=["asyncio", "trio"], default="asyncio")
    p.add_argument("--auto-batch", action="store_true", help="auto_batch=True (compare.py's)")
    return p.parse_args(argv)


if __name__ == "__main__":
    arguments = parse()
    # attach() checks the cluster's health with its own event loop: before ours starts.
    local = LocalRocketMQ.attach() if arguments.namesrv is None or arguments.topic is None else None
    anyio.run(main, arguments, local, backend=arguments.backend)
