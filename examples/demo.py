"""aiorocket demo: send N messages to the local RocketMQ, then consume them back.

Run through ``./scripts/demo.sh`` (which starts the broker first) or, with a broker
already running, ``python examples/demo.py --count 20000``.

The producer is used as the docs recommend for throughput: ``auto_batch=True`` and many
tasks awaiting ``send`` at once, so concurrent messages leave together in batch
requests. Progress bars (rich) show on a terminal. Each phase's rate is its message
count over its whole duration, start-up included (the consumer's start-up is also shown on its own).
"""

from __future__ import annotations

import argparse
import sys
import time

import anyio
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from aiorocket.consumer import ConsumeFromWhere, Consumer
from aiorocket.message import Message
from aiorocket.producer import Producer
from aiorocket.testing.broker import LocalRocketMQ

SENDERS = 64  # concurrent send() calls


class Meter:
    """A rich progress bar (on a terminal) with the running rate, and the phase's figures."""

    def __init__(self, progress: Progress, label: str, total: int) -> None:
        self.progress, self.total, self.done = progress, total, 0
        self.start = time.perf_counter()
        self.first_at: float | None = None
        self.task = progress.add_task(label, total=total, rate=0.0)

    def advance(self, n: int = 1) -> None:
        self.done += n
        if self.first_at is None:
            self.first_at = time.perf_counter()
        self.progress.update(self.task, advance=n, rate=self.rate)

    @property
    def elapsed(self) -> float:
        return max(time.perf_counter() - self.start, 1e-9)

    @property
    def rate(self) -> float:
        return self.done / self.elapsed

    def finish(self) -> str:
        return f"{self.done:,} messages in {self.elapsed:.2f} s = {self.rate:,.0f} msg/s"


def progress_bar() -> Progress:
    return Progress(
        TextColumn("{task.description:<9}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[rate]:>10,.0f} msg/s"),
        TimeElapsedColumn(),
    )


async def produce(namesrv: str, topic: str, count: int, size: int) -> str:
    """``SENDERS`` tasks each awaiting ``send`` in a loop, with auto-batching on."""
    bar = progress_bar()
    progress = Meter(bar, "produce", count)
    body = b"x" * size
    next_index = 0

    async def sender(producer: Producer) -> None:
        nonlocal next_index
        while next_index < count:
            i, next_index = next_index, next_index + 1
            await producer.send(Message(topic, body, tags="demo", keys=[f"k{i}"]))
            progress.advance()

    async with Producer("demo-producer", namesrv, auto_batch=True) as producer:
        with bar:
            async with anyio.create_task_group() as tg:
                for _ in range(SENDERS):
                    tg.start_soon(sender, producer)
        batcher = producer.batcher
        assert batcher is not None
        batches, batched = batcher.batches, batcher.batched_messages
    summary = progress.finish()
    per_request = batched / max(batches, 1)
    return (
        f"produced {summary} ({SENDERS} concurrent senders, auto-batching: {batches:,} "
        f"batch requests of {per_request:.1f} messages on average)"
    )


async def consume(namesrv: str, topic: str, count: int) -> str:
    bar = progress_bar()
    progress = Meter(bar, "consume", count)
    consumer = Consumer(f"demo-{topic}", namesrv, consume_from_where=ConsumeFromWhere.FIRST_OFFSET)
    consumer.subscribe(topic, "demo")
    first: list[str] = []
    async with consumer:
        with bar, anyio.fail_after(120):
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
    summary = progress.finish()
    print("first messages:", *first, sep="\n")
    assert progress.first_at is not None
    startup = progress.first_at - progress.start
    after = (count - 1) / max(time.perf_counter() - progress.first_at, 1e-9)
    return (
        f"consumed {summary} (the first message came {startup:.2f} s after start: "
        f"rebalance and first pulls; {after:,.0f} msg/s from there on)"
    )


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
    print(f"aiorocket demo: {count:,} messages of {size} B on {topic} via {namesrv}")
    produced = await produce(namesrv, topic, count, size)
    consumed = await consume(namesrv, topic, count)
    print(produced, consumed, sep="\n")


if __name__ == "__main__":
    main()
