"""Short end-to-end figures over the local Proxy's gRPC endpoint (not the issue's full
comparison): the gRPC producer's send rate with ``start_send``, then a SimpleConsumer
draining the topic (receive 32, one batched ack per receive), each with the client's
CPU time per message.

    .venv/bin/python benchmarks/grpc_simple.py [--count 5000] [--size 1024] [--in-flight 64]

Uses the running local cluster (``python -m aiorocket.testing.broker start``); the topic
lives on the Proxy's own broker only (a local-mode Proxy serves no other).
"""

from __future__ import annotations

import argparse
import time

import anyio

from aiorocket import Message
from aiorocket.grpc import SimpleConsumer
from aiorocket.producer import Producer
from aiorocket.testing.broker import LocalRocketMQ


async def run(rmq: LocalRocketMQ, count: int, size: int, in_flight: int) -> None:
    stamp = int(time.time())
    topic, group = f"bench_grpc_{stamp}", f"bench_grpc_g_{stamp}"
    await rmq.create_topic(topic, queues=8, brokers=[rmq.state["proxy_broker"]])
    await rmq.create_group(group)
    body = b"x" * size
    async with Producer("bench-grpc", proxy=rmq.proxy_grpc, max_in_flight=in_flight) as p:
        await p.send(Message(topic, body))  # settings, route and connection warmed up
        cpu, wall = time.process_time(), time.perf_counter()
        async with anyio.create_task_group() as tg:
            for _ in range(count - 1):
                await p.start_send(tg, Message(topic, body))
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    print(f"produce  {count / wall:9.0f} msg/s   {cpu / count * 1e6:7.1f} µs CPU/msg"
          f"   ({in_flight} in flight)")  # fmt: skip
    got = 0
    async with SimpleConsumer(group, rmq.proxy_grpc, {topic: "*"}, await_duration=5) as c:
        cpu, wall = time.process_time(), time.perf_counter()
        while got < count:
            batch = await c.receive(32, invisible_duration=30)
            if batch:
                await c.ack(batch)
            got += len(batch)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    print(f"consume  {got / wall:9.0f} msg/s   {cpu / got * 1e6:7.1f} µs CPU/msg"
          "   (receive 32, batched ack, one at a time)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=5000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--in-flight", type=int, default=64)
    args = ap.parse_args()
    rmq = LocalRocketMQ.attach()
    if rmq is None:
        raise SystemExit("no local cluster: python -m aiorocket.testing.broker start")
    anyio.run(run, rmq, args.count, args.size, args.in_flight)


if __name__ == "__main__":
    main()
