"""A consumer over a Proxy that is killed and restarted (a cluster-mode Proxy beside the
local cluster, ``aiorocket.testing.cluster_proxy``, restarted on the same ports)."""

from __future__ import annotations

import time
from collections.abc import Callable

import anyio
import pytest

from aiorocket.consumer import Consumer, ConsumerMessage
from aiorocket.message import Message
from aiorocket.producer import Producer
from aiorocket.testing.broker import LocalRocketMQ
from aiorocket.testing.logs import capture_logs

pytest.importorskip("grpclib")

from aiorocket.testing.cluster_proxy import ClusterProxy

pytestmark = [pytest.mark.anyio, pytest.mark.integration]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # grpclib is asyncio-only


async def test_a_consumer_receives_soon_after_a_restarted_proxy_answers(
    rocketmq: LocalRocketMQ, cluster_proxy: ClusterProxy, unique_name: Callable[[str], str]
) -> None:
    """The first receive on the new connection waits for the settings on the new
    telemetry stream, which it makes the session send at once. Before: it went out
    first, the Proxy refused it (INTERNAL_SERVER_ERROR, '"settings" is null') and the
    receivers' and the session's backoffs had grown meanwhile: 5.7-8.1 s. A receive now
    waits for the session, and while it waits the session retries every 0.5 s."""
    topic, group = unique_name("grestart"), unique_name("g")
    await rocketmq.create_topic(topic, queues=2)
    await rocketmq.create_group(group)
    got: dict[bytes, float] = {}
    arrived = {b"before": anyio.Event(), b"after": anyio.Event()}

    async def handle(msg: ConsumerMessage) -> None:
        got[msg.body] = time.monotonic()
        arrived[msg.body].set()

    # request_timeout: a cold Proxy JVM on a loaded machine
    consumer = Consumer(group, proxy=cluster_proxy.grpc_addr, handler=handle,
                        long_poll_timeout=5, request_timeout=10)  # fmt: skip
    consumer.subscribe(topic)
    async with consumer, Producer(unique_name("p"), rocketmq.namesrv_addr) as producer:
        await producer.send(Message(topic, b"before"))
        with anyio.fail_after(20):
            await arrived[b"before"].wait()
        with capture_logs() as logs:
            # the session's Proxy (the lite tests'): one JVM start less than a Proxy of
            # its own; returns once it routes and answers a gRPC client's settings
            await anyio.to_thread.run_sync(cluster_proxy.restart)
            back = time.monotonic()
            await producer.send(Message(topic, b"after"))
            with anyio.fail_after(30):
                await arrived[b"after"].wait()
        took = got[b"after"] - back
        print(f"handled {took:.2f} s after the restarted Proxy answered")
        failed = [e["error"] for e in logs if e["event"] == "receive_failed"]
        # none went out before the settings
        assert not [e for e in failed if "settings" in e.lower()]
        # The Proxy's own first answers take a second or two on a loaded machine;
        # before, the backoffs grown during the outage (its restart takes 15-45 s
        # here) added up to 10 s (receivers) or 30 s (telemetry).
        assert took < 6.0
