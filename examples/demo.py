"""aiorocket demo: send N messages to the local RocketMQ, then consume them back.

Run through ``./scripts/demo.sh`` (which starts the broker first) or, with a broker
already running, ``python examples/demo.py --count 20000``.
"""

from __future__ import annotations

import argparse
import sys
import time

import anyio

from aiorocket.consumer import ConsumeFromWhere, Consumer
from aiorocket.message import Message
from aiorocket.producer import Producer
from aiorocket.testing.broker import LocalRocketMQ


class Progress:
    """A one-line progress display with the running rate."""

    def __init__(self, label: str, total: int) -> None:
        self.label, self.total, self.done = label, total, 0
        self.start = time.perf_counter()
        self._last_draw = 0.0

    def advance(self, n: int = 1) -> None:
        self.done += n
        now = time.perf_counter()
        if now - self._last_draw > 0.1 or self.done >= self.total:
            self._last_draw = now
            self.draw()

    @property
    def rate(self) -> float:
        return self.done / max(time.perf_counter() - self.start, 1e-9)

    def draw(self) -> None:
        width = 30
        filled = int(width * self.done / max(self.total, 1))
        bar = "#" * filled + "-" * (width - filled)
        sys.stdout.write(
            f"\r{self.label:<9} [{bar}] {self.done:>7}/{self.total} {self.rate:>10,.0f} msg/s"
        )
        sys.stdout.flush()

    def finish(self) -> None:
        self.draw()
        sys.stdout.write("\n")


async def produce(namesrv: str, topic: str, count: int, size: int) -> float:
    """Send ``count`` messages with at most 256 in flight (round-robin over all queues)."""
    progress = Progress("produce", count)
    body = b"x" * size
    producer = Producer("demo-producer", namesrv, max_in_flight=256)
    async with producer, anyio.create_task_group() as tg:
        for i in range(count):
            msg = Message(topic, body, tags="demo", keys=[f"k{i}"])
            await producer.start_send(tg, msg, on_result=lambda _: progress.advance())
    progress.finish()
    return progress.rate


async def consume(namesrv: str, topic: str, count: int) -> float:
    progress = Progress("consume", count)
    consumer = Consumer(f"demo-{topic}", namesrv, consume_from_where=ConsumeFromWhere.FIRST_OFFSET)
    consumer.subscribe(topic, "demo")
    first: list[str] = []
    async with consumer:
        with anyio.fail_after(120):
            async for msg in consumer:
                if len(first) < 3:
                    first.append(
                        f"  {msg.msg_id}  {msg.broker_name}:{msg.queue_id}@{msg.queue_offset}"
                        f"  keys={msg.keys} {len(msg.body)} B"
                    )
                progress.advance()
                if progress.done >= count:
                    await msg.ack()
                    break
    progress.finish()
    print("first messages:", *first, sep="\n")
    return progress.rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--count", type=int, default=20_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--namesrv", help="NameServer address (default: the local broker)")
    args = parser.parse_args()
    local = LocalRocketMQ.attach()
    if args.namesrv is None and local is None:
        sys.exit("no local broker: run `python -m aiorocket.testing.broker start` first")
    namesrv = args.namesrv or (local.namesrv_addr if local else "")
    topic = f"demo-{int(time.time())}"
    anyio.run(run, local, namesrv, topic, args.count, args.size)


async def run(local: LocalRocketMQ | None, namesrv: str, topic: str, count: int, size: int) -> None:
    if local is not None:
        await local.create_topic(topic, queues=8)
    print(f"aiorocket demo: {count} messages of {size} B on {topic} via {namesrv}")
    sent = await produce(namesrv, topic, count, size)
    got = await consume(namesrv, topic, count)
    print(f"produced {sent:,.0f} msg/s, consumed {got:,.0f} msg/s")


if __name__ == "__main__":
    main()
