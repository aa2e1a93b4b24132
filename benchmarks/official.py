"""The official Python client's side of compare.py (rocketmq-python-client, gRPC to the proxy).

Runs in its own venv (benchmarks/.venv-official), so it imports nothing from aiorocket.
Same line protocol as the other children: READY, PROGRESS n, RESULT {json}.

    official.py consume ENDPOINT TOPIC GROUP EXPECTED [--latency] [--idle-timeout S]
    official.py produce ENDPOINT TOPIC COUNT SIZE IN_FLIGHT
    official.py paced   ENDPOINT TOPIC COUNT SIZE RATE [IN_FLIGHT]   (default: unbounded)
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
from typing import Any

from rocketmq.v5.client import ClientConfiguration, Credentials
from rocketmq.v5.consumer import ConsumeResult, MessageListener, PushConsumer
from rocketmq.v5.model import FilterExpression, Message
from rocketmq.v5.producer import Producer


def emit(line: str) -> None:
    if line == "READY":  # as every child: start-up heap collected and frozen
        import gc  # (see _common.settle_heap; this file runs in the official venv)

        gc.collect()
        gc.freeze()
    print(line, flush=True)


def now_us() -> int:
    return time.time_ns() // 1000


def pct(xs: list[int], p: float) -> float:
    if not xs:
        return float("nan")
    return float(xs[min(len(xs) - 1, max(0, round(p / 100 * len(xs)) - 1))])


class Counter(MessageListener):  # type: ignore[misc]
    def __init__(self, expected: int, latency: bool) -> None:
        self.expected, self.latency = expected, latency
        self.count = 0
        self.first = self.last = 0.0
        self.lat: list[int] = []
        self.steady_us = 0  # latency counts only messages sent 1 s after the first arrived
        self.lock = threading.Lock()
        self.done = threading.Event()

    def consume(self, message: Message) -> ConsumeResult:
        with self.lock:
            self.count += 1
            if self.count == 1:
                self.first = time.perf_counter()
                self.steady_us = now_us() + 1_000_000
            stamp = int.from_bytes(message.body[:8], "big")
            if self.latency and stamp >= self.steady_us:
                self.lat.append(now_us() - stamp)
            if self.count == self.expected:
                self.last = time.perf_counter()
                self.done.set()
        return ConsumeResult.SUCCESS


def consume(a: argparse.Namespace) -> dict[str, Any]:
    listener = Counter(a.expected, a.latency)
    config = ClientConfiguration(a.endpoint, Credentials())
    consumer = PushConsumer(config, a.group, listener, {a.topic: FilterExpression()})
    cpu0, t0 = time.process_time(), time.perf_counter()
    consumer.startup()
    emit("READY")
    shown, idle = -1, 0.0
    while not listener.done.wait(0.5):
        n = listener.count
        idle = 0.0 if n != shown else idle + 0.5
        if n != shown:
            emit(f"PROGRESS {n}")
        shown = n
        if n and idle >= a.idle_timeout:
            break
        if not n and time.perf_counter() - t0 > a.start_timeout:
            break
    cpu, end = time.process_time() - cpu0, time.perf_counter()
    n = min(listener.count, a.expected)
    out: dict[str, Any] = {
        "count": n,
        "elapsed": end - t0,
        "first_to_last": (listener.last or end) - listener.first if n else 0.0,
        "startup": listener.first - t0 if listener.first else -1.0,
        "cpu": cpu,
    }
    if a.latency:
        lat = sorted(listener.lat)
        out["lat_p50_ms"], out["lat_p99_ms"] = pct(lat, 50) / 1000, pct(lat, 99) / 1000
        out["lat_samples"] = len(lat)
    emit("RESULT " + json.dumps(out))
    os._exit(0)  # shutdown() can take long with receives in flight; nothing left to flush


def make_producer(a: argparse.Namespace) -> Producer:
    producer = Producer(ClientConfiguration(a.endpoint, Credentials()), (a.topic,))
    producer.startup()
    return producer


def message(topic: str, body: bytes) -> Message:
    m = Message()
    m.topic = topic
    m.body = body
    return m


def produce(a: argparse.Namespace) -> dict[str, Any]:
    producer = make_producer(a)
    payload = os.urandom(a.size)
    slots = threading.Semaphore(a.in_flight)
    failed = [0]

    def done(f: Any) -> None:
        if f.exception() is not None:
            failed[0] += 1
        slots.release()

    def run(n: int) -> None:
        for i in range(n):
            slots.acquire()
            producer.send_async(message(a.topic, payload)).add_done_callback(done)
            if i % 10_000 == 0:
                emit(f"PROGRESS {i}")
        for _ in range(a.in_flight):
            slots.acquire()
        for _ in range(a.in_flight):
            slots.release()

    run(min(2000, a.count))  # warm-up
    emit("READY")
    cpu0, t0 = time.process_time(), time.perf_counter()
    run(a.count)
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    out = {"count": a.count, "elapsed": elapsed, "cpu": cpu, "failed": failed[0]}
    emit("RESULT " + json.dumps(out))
    os._exit(0)


def paced(a: argparse.Namespace) -> dict[str, Any]:
    """Send at ``a.rate``; with ``a.in_flight`` > 0 at most that many sends outstanding
    (the pacing waits for a slot). Send latency counts sends after the first second."""
    producer = make_producer(a)
    payload = os.urandom(a.size)
    slots = threading.Semaphore(a.in_flight) if a.in_flight > 0 else None
    failed = [0]
    lat: list[int] = []  # µs

    def done_since(start: float, counted: bool) -> Any:
        def done(f: Any) -> None:
            if f.exception() is not None:
                failed[0] += 1
            elif counted:
                lat.append(int((time.perf_counter() - start) * 1e6))
            if slots is not None:
                slots.release()

        return done

    emit("READY")
    cpu0, t0 = time.process_time(), time.perf_counter()
    futures = []
    sent = 0
    while sent < a.count:
        due = min(a.count, int((time.perf_counter() - t0) * a.rate) + 1)
        while sent < due:
            body = now_us().to_bytes(8, "big") + payload[8:]
            if slots is not None:
                slots.acquire()
            start = time.perf_counter()
            future = producer.send_async(message(a.topic, body))
            future.add_done_callback(done_since(start, start - t0 >= 1.0))
            futures.append(future)
            sent += 1
        time.sleep(0.0005)
    elapsed = time.perf_counter() - t0
    for f in futures:
        f.exception(timeout=10)  # wait for every answer
    lat.sort()
    out = {
        "count": a.count,
        "elapsed": elapsed,
        "cpu": time.process_time() - cpu0,
        "failed": failed[0],
        "send_p50_ms": pct(lat, 50) / 1000,
        "send_p99_ms": pct(lat, 99) / 1000,
    }
    emit("RESULT " + json.dumps(out))
    os._exit(0)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("consume")
    for name in ("endpoint", "topic", "group"):
        c.add_argument(name)
    c.add_argument("expected", type=int)
    c.add_argument("--latency", action="store_true")
    c.add_argument("--idle-timeout", type=float, default=20.0)
    c.add_argument("--start-timeout", type=float, default=90.0)
    for name, last in (("produce", "in_flight"), ("paced", "rate")):
        s = sub.add_parser(name)
        s.add_argument("endpoint")
        s.add_argument("topic")
        s.add_argument("count", type=int)
        s.add_argument("size", type=int)
        s.add_argument(last, type=int)
        if name == "paced":
            s.add_argument("in_flight", type=int, nargs="?", default=0)
    a = p.parse_args()
    {"consume": consume, "produce": produce, "paced": paced}[a.cmd](a)


if __name__ == "__main__":
    main()
