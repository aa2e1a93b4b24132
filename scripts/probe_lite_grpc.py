"""How soon a lite consumer gets lite messages sent three ways (RocketMQ 5.5.0).

One lite consumer over gRPC (through a cluster-mode Proxy started here beside the local
cluster) subscribes to 8 lite topics; 8 messages, one per lite topic, are then sent
through the cluster-mode Proxy, through the cluster's own local-mode Proxy and over
remoting, and the time until all 8 were handled is printed for each. Measured
2026-11-26: 0.49 s, 29.25 s, 0.11 s: the local-mode Proxy stores lite messages where
they wait for the brokers' full dispatch.

    .venv/bin/python scripts/probe_lite_grpc.py
"""

from __future__ import annotations

import time
import uuid

import anyio

from aiorocket.admin import Admin
from aiorocket.consumer import Consumer, ConsumerMessage
from aiorocket.message import Message
from aiorocket.producer import Producer
from aiorocket.testing.broker import LocalRocketMQ
from aiorocket.testing.cluster_proxy import ClusterProxy


async def main(cluster: LocalRocketMQ, proxy: str) -> None:
    topic, group = f"lite_probe_{uuid.uuid4().hex[:6]}", f"g_probe_{uuid.uuid4().hex[:6]}"
    async with Admin(cluster.namesrv_addr) as admin:
        await admin.create_topic(topic, queues=2, message_type="LITE")
        await admin.create_group(group, lite_bind_topic=topic)
    names = [f"t{i}" for i in range(8)]
    handled = 0
    changed = anyio.Event()

    async def handle(msg: ConsumerMessage) -> None:
        nonlocal handled, changed
        handled += 1
        changed.set()
        changed = anyio.Event()

    ways = [
        ("cluster-mode Proxy", Producer("lite-probe", proxy=proxy)),
        ("local-mode Proxy", Producer("lite-probe", proxy=cluster.proxy_grpc)),
        ("remoting", Producer("lite-probe", cluster.namesrv_addr)),
    ]
    consumer = Consumer(group, proxy=proxy, handler=handle, bind_topic=topic, long_poll_timeout=5)
    async with consumer:
        for name in names:
            await consumer.subscribe_lite(name)
        for label, producer in ways:
            before, started = handled, time.monotonic()
            async with producer:
                for name in names:
                    await producer.send(Message(topic, label.encode(), lite_topic=name))
            with anyio.fail_after(120):
                while handled < before + len(names):
                    await changed.wait()
            print(f"{label:<20} all {len(names)} handled after {time.monotonic() - started:.2f} s")


if __name__ == "__main__":
    local = LocalRocketMQ.attach()
    if local is None:
        raise SystemExit("no local cluster: python -m aiorocket.testing.broker start")
    with ClusterProxy(local) as cluster_proxy:
        anyio.run(main, local, cluster_proxy.grpc_addr)
