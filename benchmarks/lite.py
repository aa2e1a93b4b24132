"""Lite topics (RocketMQ 5.5, issue 33): many small topics, one lite consumer.

    python benchmarks/lite.py [--topics 1000] [--per-topic 5] [--transport remoting]

A fresh LITE parent topic and lite group; one consumer subscribes to ``--topics`` lite
topics (half before its start, sent as one COMPLETE_ADD; half at run time, one
PARTIAL_ADD each), then a producer sends ``--per-topic`` messages to each lite topic,
round-robin over the lite topics. Prints the time of the run-time subscriptions (per
subscription), of the sends, and from the first send to the last message handled
(messages/s), and the send-to-handle latency p50/p99/max; ``--transport grpc`` goes
through a cluster-mode Proxy (started here; the cluster's local-mode one serves no
lite consumer in 5.5.0).

Figures, not assertions: the tests check behaviour (tests/integration/test_lite.py).
"""

from __future__ import annotations

import argparse
import contextlib
import time
import uuid
from collections.abc import Iterator
from typing import Any

import _common as c
import anyio

from aiorocket import Message
from aiorocket.admin import Admin
from aiorocket.consumer import Consumer, ConsumerMessage
from aiorocket.producer import Producer
from aiorocket.testing.broker import LocalRocketMQ


@contextlib.contextmanager
def endpoint(cl: LocalRocketMQ, transport: str) -> Iterator[dict[str, Any]]:
    if transport == "remoting":
        yield {"namesrv": cl.namesrv_addr}
        return
    from aiorocket.testing.cluster_proxy import ClusterProxy

    with ClusterProxy(cl) as proxy:
        yield {"proxy": proxy.grpc_addr}


async def run(cl: LocalRocketMQ, topics: int, per_topic: int, transport: str) -> None:
    tag = uuid.uuid4().hex[:8]
    parent, group = f"bench_lite_{tag}", f"bench_lite_g_{tag}"
    async with Admin(cl.namesrv_addr) as admin:
        await admin.create_topic(parent, queues=4, message_type="LITE")
        await admin.create_group(group, lite_bind_topic=parent, lite_quota=topics)
    try:
        await consume(cl, parent, group, topics, per_topic, transport)
    finally:  # its lite topics' files stay open on the brokers until the parent goes
        async with Admin(cl.namesrv_addr) as admin:
            await admin.delete_topic(parent)


async def consume(
    cl: LocalRocketMQ, parent: str, group: str, topics: int, per_topic: int, transport: str
) -> None:
    tag = uuid.uuid4().hex[:8]
    names = [f"t{i}" for i in range(topics)]
    total = topics * per_topic
    latencies: list[float] = []
    done = anyio.Event()

    def handle(msg: ConsumerMessage) -> None:
        latencies.append((c.now_us() - c.sent_us(msg.body)) / 1000)
        if len(latencies) == total:
            done.set()

    with endpoint(cl, transport) as where:
        consumer = Consumer(group, handler=handle, bind_topic=parent, long_poll_timeout=5,
                            **where)  # fmt: skip
        for name in names[: topics // 2]:
            await consumer.subscribe_lite(name)
        async with consumer, Producer(f"bench-lite-{tag}", **where) as producer:
            t0 = time.perf_counter()
            for name in names[topics // 2 :]:
                await consumer.subscribe_lite(name)
            sub_s = time.perf_counter() - t0
            t1 = time.perf_counter()
            for i in range(per_topic):
                for name in names:
                    body = c.stamped(b"%d" % i)
                    await producer.send(Message(parent, body, lite_topic=name))
            send_s = time.perf_counter() - t1
            with anyio.fail_after(300):
                await done.wait()
            all_s = time.perf_counter() - t1
    latencies.sort()
    n = topics - topics // 2
    c.log(
        f"{transport}: {topics} lite topics; {n} run-time subscriptions in {sub_s:.2f} s "
        f"({sub_s / max(n, 1) * 1000:.1f} ms each); {total:,} messages sent in {send_s:.2f} s, "
        f"all handled {all_s:.2f} s after the first send ({total / all_s:,.0f} msgs/s); "
        f"send-to-handle p50 {c.percentile(latencies, 50):.1f} ms, "
        f"p99 {c.percentile(latencies, 99):.1f} ms, max {latencies[-1]:.1f} ms"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--topics", type=int, default=1000)
    p.add_argument("--per-topic", type=int, default=5)
    p.add_argument("--transport", choices=["remoting", "grpc"], default="remoting")
    a = p.parse_args()
    anyio.run(run, c.cluster(), a.topics, a.per_topic, a.transport)


if __name__ == "__main__":
    main()
