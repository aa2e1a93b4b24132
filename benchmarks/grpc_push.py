"""The gRPC push consumer's own cost: ``Consumer(group, proxy=...)`` with a no-op handler
draining a pre-filled topic through the local Proxy; prints msg/s and the process's user
and system CPU per message (getrusage).

    .venv/bin/python benchmarks/grpc_push.py [--count 20000] [--size 1024]

Uses the running local cluster (``python -m aiorocket.testing.broker start``); the topic
lives on the Proxy's own broker only (a local-mode Proxy serves no other).
"""

from __future__ import annotations

import argparse
import resource
import time

import anyio

from aiorocket import Message
from aiorocket.consumer import Consumer, ConsumerMessage
from aiorocket.producer import Producer
from aiorocket.testing.broker import LocalRocketMQ


async def run(rmq: LocalRocketMQ, count: int, size: int) -> None:
    stamp = int(time.time() * 1000)
    topic, group = f"bench_gpush_{stamp}", f"bench_gpush_g_{stamp}"
    await rmq.create_topic(topic, queues=8, brokers=[rmq.state["proxy_broker"]])
    producer = Producer("bench-gpush", rmq.namesrv_addr, auto_batch=True)
    async with producer, anyio.create_task_group() as tg:
        for _ in range(count):
            await producer.start_send(tg, Message(topic, b"x" * size))
    await rmq.set_group_offsets(topic, group, 0)  # pop starts a new group at the end
    seen, done = 0, anyio.Event()

    async def handle(msg: ConsumerMessage) -> None:
        nonlocal seen
        seen += 1
        if seen >= count:
            done.set()

    consumer = Consumer(group, proxy=rmq.proxy_grpc, handler=handle, long_poll_timeout=5)
    consumer.subscribe(topic)
    before, start = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    async with consumer:
        await done.wait()
        wall, after = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_SELF)
    user = (after.ru_utime - before.ru_utime) / count * 1e6
    system = (after.ru_stime - before.ru_stime) / count * 1e6
    print(f"push consumer over gRPC: {count / wall:,.0f} msg/s, "
          f"{user:.0f} µs user + {system:.0f} µs system CPU per message")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=20_000)
    ap.add_argument("--size", type=int, default=1024)
    args = ap.parse_args()
    rmq = LocalRocketMQ.attach()
    if rmq is None:
        raise SystemExit("no local cluster: python -m aiorocket.testing.broker start")
    anyio.run(run, rmq, args.count, args.size)


if __name__ == "__main__":
    main()
