"""The FastStream layer's cost against FastStream's own Kafka broker (issue 43, goal 7):
one subscriber, the same on both sides (a JSON body validated into the same pydantic
model from the handler's type hint, the same logging), run through each broker's
in-memory test broker (aiorocket's ``TestRocketBroker``, FastStream's
``TestKafkaBroker``): ``--count`` messages published by ``broker.publish`` and handled,
the two sides alternating round by round in one process. Prints this process's CPU time
per message (publish and handling together: the test brokers deliver in the publishing
call) for each side, per round and the medians, and the ratio ours / Kafka's.

    .venv/bin/python benchmarks/faststream_testbroker.py [--count 20000] [--rounds 5] [--log both]

No cluster: everything runs in memory. Needs FastStream's Kafka broker (aiokafka): the
``bench`` dependency group (``pip install --group bench``) installs it.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import BaseModel

try:
    from faststream.kafka import KafkaBroker, TestKafkaBroker
except ImportError as exc:  # aiokafka is a benchmark-only dependency
    raise SystemExit(f"{exc}: pip install --group bench (faststream[kafka])") from None

from aiorocket.faststream import RocketBroker
from aiorocket.faststream.testing import TestRocketBroker

TOPIC = "bench-orders"


class Order(BaseModel):
    id: int
    customer: str
    amount: float


def bench_logger(log: bool) -> logging.Logger | None:
    """FastStream's access log formatted and handled but written nowhere, or none."""
    if not log:
        return None
    logger = logging.getLogger("bench.faststream")
    logger.handlers = [logging.NullHandler()]
    logger.propagate = False
    logger.setLevel(logging.INFO)
    return logger


def bodies(count: int) -> list[dict[str, Any]]:
    return [{"id": i, "customer": f"c{i % 97}", "amount": 9.5} for i in range(count)]


Side = Callable[[list[dict[str, Any]], bool], Awaitable[float]]


async def drive(broker: Any, test_broker: Any, messages: list[dict[str, Any]],
                **group: str) -> float:  # fmt: skip
    """CPU seconds to publish and handle every message (one warm-up message first)."""
    handled = 0

    @broker.subscriber(TOPIC, **group)
    async def handle(order: Order) -> None:
        nonlocal handled
        handled += 1

    async with test_broker(broker) as br:
        await br.publish(messages[0], TOPIC)  # the first call's lazy set-up left out
        gc.collect()
        start = time.process_time()
        for body in messages:
            await br.publish(body, TOPIC)
        cpu = time.process_time() - start
    if handled != len(messages) + 1:
        raise SystemExit(f"{type(broker).__name__}: {handled} of {len(messages) + 1} handled")
    return cpu


async def rocket(messages: list[dict[str, Any]], log: bool) -> float:
    return await drive(RocketBroker("127.0.0.1:9876", logger=bench_logger(log)),
                       TestRocketBroker, messages, group="bench")  # fmt: skip


async def kafka(messages: list[dict[str, Any]], log: bool) -> float:
    return await drive(KafkaBroker("127.0.0.1:9092", logger=bench_logger(log)),
                       TestKafkaBroker, messages, group_id="bench")  # fmt: skip


async def main_async(count: int, rounds: int, logs: list[bool]) -> None:
    messages = bodies(count)
    sides: dict[str, Side] = {"aiorocket TestRocketBroker": rocket,
                              "FastStream TestKafkaBroker": kafka}  # fmt: skip
    for log in logs:
        per: dict[str, list[float]] = {name: [] for name in sides}
        for r in range(rounds):
            # alternate which side goes first, so that neither always runs second
            order = list(sides.items()) if r % 2 == 0 else list(sides.items())[::-1]
            for name, side in order:
                per[name].append(await side(messages, log) / count * 1e6)
        label = "access log on (NullHandler)" if log else "logger=None"
        print(f"{count:,} messages x {rounds} rounds, {label}: µs CPU per message")
        for name, runs in per.items():
            shown = ", ".join(f"{x:.1f}" for x in runs)
            print(f"  {name:28} median {statistics.median(runs):6.1f}   ({shown})")
        ours, theirs = per["aiorocket TestRocketBroker"], per["FastStream TestKafkaBroker"]
        ratios = ", ".join(f"{a / b:.3f}" for a, b in zip(ours, theirs, strict=True))
        ratio = statistics.median(ours) / statistics.median(theirs)
        print(f"  ratio ours / Kafka's (medians) {ratio:.3f}   (per round {ratios})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--log", choices=["on", "off", "both"], default="both")
    args = ap.parse_args()
    logs = {"on": [True], "off": [False], "both": [True, False]}[args.log]
    asyncio.run(main_async(args.count, args.rounds, logs))


if __name__ == "__main__":
    main()
