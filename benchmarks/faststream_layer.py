"""The FastStream layer's cost: one pre-filled topic consumed by a plain aiorocket
``Consumer`` handler and by ``RocketBroker`` subscribers (FastStream's access log on,
then off), each a new group from the first offset, in one run: msg/s and this process's
CPU time per message. Every handler does the same work: the JSON body validated into a
pydantic model (FastStream does it from the type hint; the plain handler by hand).

    .venv/bin/python benchmarks/faststream_layer.py [--count 20000] [--rounds 2] [--concurrency 20]

Uses the running local cluster (``python -m aiorocket.testing.broker start``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import time
import uuid
from collections.abc import Awaitable, Callable

from pydantic import BaseModel

from aiorocket.consumer import ConsumeFromWhere, Consumer, ConsumerMessage
from aiorocket.faststream import RocketBroker
from aiorocket.message import Message
from aiorocket.producer import Producer
from aiorocket.testing.broker import LocalRocketMQ

FIRST = ConsumeFromWhere.FIRST_OFFSET


class Order(BaseModel):
    id: int
    customer: str
    amount: float


async def prefill(namesrv: str, topic: str, count: int) -> None:
    async with Producer("bench-faststream", namesrv) as producer:
        for start in range(0, count, 64):
            batch = [
                Message(topic, json.dumps({"id": i, "customer": f"c{i % 97}", "amount": 9.5})
                        .encode(), properties={"content-type": "application/json"})
                for i in range(start, min(count, start + 64))
            ]  # fmt: skip
            await producer.send_batch(batch)


class Countdown:
    """Counts handled messages; the window from the first to the last one is measured
    (the consumers' start and close are left out)."""

    def __init__(self, count: int) -> None:
        self.left = count
        self.done = asyncio.Event()
        self.first = (0.0, 0.0)
        self.last = (0.0, 0.0)

    def hit(self) -> None:
        if self.first == (0.0, 0.0):
            self.first = (time.perf_counter(), time.process_time())
        self.left -= 1
        if self.left == 0:
            self.last = (time.perf_counter(), time.process_time())
            self.done.set()

    def window(self) -> tuple[float, float]:
        return self.last[0] - self.first[0], self.last[1] - self.first[1]


Case = Callable[[Countdown], Awaitable[None]]


def plain(namesrv: str, topic: str, concurrency: int) -> Case:
    async def run(countdown: Countdown) -> None:
        async def handle(msg: ConsumerMessage) -> None:
            Order.model_validate_json(msg.body)
            countdown.hit()

        consumer = Consumer(f"bench-plain-{uuid.uuid4().hex[:8]}", namesrv, handler=handle,
                            consume_from_where=FIRST, consume_concurrency=concurrency)  # fmt: skip
        consumer.subscribe(topic)
        async with consumer:
            await countdown.done.wait()

    return run


def faststream(namesrv: str, topic: str, concurrency: int, *, log: bool) -> Case:
    async def run(countdown: Countdown) -> None:
        # The access log formatted and handled, but written nowhere (a NullHandler).
        logger = logging.getLogger("bench.faststream")
        logger.handlers = [logging.NullHandler()]
        logger.propagate = False
        logger.setLevel(logging.INFO)
        broker = RocketBroker(namesrv, logger=logger if log else None)

        @broker.subscriber(topic, group=f"bench-fs-{uuid.uuid4().hex[:8]}",
                           consume_from_where=FIRST, concurrency=concurrency)  # fmt: skip
        async def handle(order: Order) -> None:
            countdown.hit()

        async with broker:
            await broker.start()
            await countdown.done.wait()

    return run


async def main_async(rmq: LocalRocketMQ, count: int, rounds: int, concurrency: int) -> None:
    topic = f"bench_fs_{uuid.uuid4().hex[:8]}"
    await rmq.create_topic(topic, queues=8)
    await prefill(rmq.namesrv_addr, topic, count)
    namesrv = rmq.namesrv_addr
    cases = {
        "aiorocket handler": plain(namesrv, topic, concurrency),
        "FastStream subscriber (access log)": faststream(namesrv, topic, concurrency, log=True),
        "FastStream subscriber (logger=None)": faststream(namesrv, topic, concurrency, log=False),
    }
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in cases}
    for _ in range(rounds):
        for name, run in cases.items():
            countdown = Countdown(count)
            await run(countdown)
            results[name].append(countdown.window())
    print(f"{count:,} messages x {rounds} round(s), consume_concurrency={concurrency}")
    print(f"{'':40} {'msg/s':>9} {'µs CPU/msg':>11}")
    base = 0.0
    for name, runs in results.items():
        wall = sorted(w for w, _ in runs)[len(runs) // 2]
        cpu = sorted(c for _, c in runs)[len(runs) // 2]
        per = cpu / count * 1e6
        base = base or per
        print(f"{name:40} {count / wall:9.0f} {per:11.1f}   (x{per / base:.2f} CPU)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--concurrency", type=int, default=20)
    args = ap.parse_args()
    rmq = LocalRocketMQ.attach()
    if rmq is None:
        raise SystemExit("no local cluster: python -m aiorocket.testing.broker start")
    asyncio.run(main_async(rmq, args.count, args.rounds, args.concurrency))


if __name__ == "__main__":
    main()
