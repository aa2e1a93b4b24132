"""Lite topics (RocketMQ 5.5, RIP-83) over gRPC, against real 5.5.0 Proxies. Issue 33.

Lite consumers need a Proxy in cluster mode (``lite_proxy``: RocketMQ 5.5.0's local-mode
Proxy, the cluster's own, has no lite subscription service and cannot pop lite
messages), which the session starts beside the cluster. The local-mode Proxy does store
lite messages, but they reach a subscriber only at the brokers' next full dispatch
(~30 s; through the cluster-mode Proxy 0.5 s, over remoting 0.1 s:
scripts/probe_lite_grpc.py), so the tests send through the cluster-mode one. The
behaviours both transports share are tested over both in tests/integration/test_lite.py;
here what is the Proxy's own.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import anyio
import pytest

from aiorocket.client.instance import ClientInstance
from aiorocket.client.lite import LiteRequests
from aiorocket.consumer import Consumer, ConsumerMessage, LiteOffset
from aiorocket.consumer.pop import lite as lite_module
from aiorocket.errors import ConfigError, UnsupportedTransportError
from aiorocket.message import Message
from aiorocket.producer import Producer
from aiorocket.testing.broker import LocalRocketMQ
from aiorocket.testing.faultproxy import FaultProxy
from tests.integration.test_grpc import spy_decoded
from tests.integration.test_lite import (  # noqa: F401 (lite_brokers: a fixture)
    Lite,
    Seen,
    committed,
    lite_brokers,
    lite_setup,
    send,
)

#: the brokers dispatch lite messages (enableLmq, enableMultiDispatch)
pytestmark = [pytest.mark.anyio, pytest.mark.integration, pytest.mark.usefixtures("lite_brokers")]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # grpclib


def grpc_lite_consumer(
    proxy: str, group: str, topic: str, handler: Any = None, **settings: Any
) -> Consumer:
    return Consumer(
        group, proxy=proxy, handler=handler, bind_topic=topic, long_poll_timeout=5, **settings
    )  # fmt: skip


async def test_a_local_mode_proxy_refuses_a_lite_consumer_clearly(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    """The cluster's own Proxy (local mode) cannot serve a lite consumer in 5.5.0: the
    start fails with UnsupportedTransportError naming the way out, not a NullPointerException."""
    topic, group = unique_name("lite"), unique_name("g")
    await lite_setup(rocketmq, topic, group)
    consumer = grpc_lite_consumer(rocketmq.proxy_grpc, group, topic, Seen().handle)
    await consumer.subscribe_lite("a")
    with pytest.raises(UnsupportedTransportError, match="cluster"):
        async with consumer:
            pass


async def test_grpc_lite_message_types_do_not_mix(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    """A lite message is of no other type (ConfigError before sending), and the Proxy
    types the parent topic: a plain message to it is refused."""
    topic = unique_name("lite")
    await lite_setup(rocketmq, topic, unique_name("g"))
    async with Producer("lite-grpc-producer", proxy=rocketmq.proxy_grpc) as producer:
        with pytest.raises(ConfigError, match="lite"):
            await producer.send(Message(topic, b"x", lite_topic="a", priority=1))
        with pytest.raises(ConfigError):
            await producer.send(Message(topic, b"x", lite_topic="a b"))
        from aiorocket.errors import RocketMQError

        with pytest.raises(RocketMQError, match="LITE"):
            await producer.send(Message(topic, b"plain"))
        result = await producer.send(Message(topic, b"ok", lite_topic="a"))
        assert result.msg_id


async def test_grpc_lite_messages_handled_past_their_invisible_time_are_renewed(
    rocketmq: LocalRocketMQ, lite_proxy: str, unique_name: Callable[[str], str]
) -> None:
    """The Proxy's own renewal fails for lite messages (5.5.0: NO_EXIST, the message
    comes back while still being handled), so the client renews them, naming the lite
    topic: a handler slower than the invisible time sees each message once, and the rest
    of its receive batch, acked after the renewals, is settled for good: a later member
    of the group gets only what is sent after."""
    topic, group = unique_name("lite"), unique_name("g")
    await lite_setup(rocketmq, topic, group)
    seen: list[tuple[bytes, int]] = []
    done = anyio.Event()

    async def slow_first(msg: ConsumerMessage) -> None:
        seen.append((msg.body, msg.delivery_attempt))
        if msg.body == b"m-0":
            await anyio.sleep(12)  # past the 10 s invisible time
        if msg.body == b"m-4":
            done.set()

    bodies = [f"m-{i}".encode() for i in range(5)]
    async with grpc_lite_consumer(
        lite_proxy, group, topic, slow_first, invisible_duration=10
    ) as consumer:
        await consumer.subscribe_lite("x")
        await send(Lite(rocketmq, lite_proxy), topic, [("x", b) for b in bodies])
        with anyio.fail_after(40):
            await done.wait()
    assert seen == [(b, 1) for b in bodies]
    later = Seen()
    async with grpc_lite_consumer(lite_proxy, group, topic, later.handle) as member:
        await member.subscribe_lite("x")
        await send(Lite(rocketmq, lite_proxy), topic, [("x", b"fresh")])
        await later.wait_body("x", b"fresh")
    assert later.by_lite == {"x": [b"fresh"]}


async def _held_by_brokers(rocketmq: LocalRocketMQ, topic: str, group: str,
                           client_id: str) -> set[str]:  # fmt: skip
    """The lite topics of ``topic`` the brokers hold for ``client_id`` (the union)."""
    async with ClientInstance(rocketmq.namesrv_addr) as client:
        route = await client.namesrv.get_route(topic)
        requests = LiteRequests(client.broker)
        held: set[str] = set()
        for name in sorted({q.broker_name for q in route.write_queues()}):
            topics = await requests.client_lite_topics(
                route.master_addr(name), group=group, topic=topic, client_id=client_id
            )
            held |= topics or set()
        return held


async def test_a_lite_consumer_is_served_again_at_once_after_its_connection_breaks(
    rocketmq: LocalRocketMQ, lite_proxy: str, unique_name: Callable[[str], str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """The 5.5.0 Proxy drops a client's lite subscriptions when it handles the end of
    its old session stream (ClientActivity.handleGrpcCancel:
    offlineClientLiteSubscription, a COMPLETE_REMOVE by client id), in no order with
    the new stream's settings and the client's resync: a cold Proxy may drop them after
    the resync (CI). Here the Proxy learns of the break 5.5 s after the client did (its
    side of the old connection silent until then), so the removal surely lands after
    the client reconnected and resynced: the consumer sends its set again shortly after
    (RESYNC_AFTER_RECONNECT), so what is sent once the brokers dropped it reaches it
    within seconds, not at the next periodic resync: that one is an hour away here
    (RESYNC_INTERVAL), far past the 60 s the message is awaited.

    Why 5.5 s: the receives cut by the break keep their pops on the brokers for the
    Proxy's shortest long poll (5 s); one that took the message would write it into the
    dead stream, and 5.5.0 holds a lite message written so for its invisible time
    (30 s). By 5.5 s they ended, empty, before the Proxy learnt of the break."""
    monkeypatch.setattr(lite_module, "RESYNC_INTERVAL", 3600.0)
    topic, group = unique_name("lite"), unique_name("g")
    await lite_setup(rocketmq, topic, group)
    seen = Seen()
    async with FaultProxy(lite_proxy) as link:
        consumer = grpc_lite_consumer(link.address, group, topic, seen.handle,
                                      request_timeout=10)  # a cold Proxy
        await consumer.subscribe_lite("x")
        async with consumer:
            await send(Lite(rocketmq, lite_proxy), topic, [("x", b"before")])
            await seen.wait_body("x", b"before")
            await committed(rocketmq, group, topic, "x", 1)  # its ack is not cut
            accepted = link.accepted
            link.drop(server_after=5.5)  # the Proxy learns of it 5.5 s after the client
            link.heal()
            broke = time.monotonic()
            await link.wait_accepted(accepted + 1)  # the client's new connection
            with anyio.fail_after(60):  # the removal reached the brokers
                while await _held_by_brokers(rocketmq, topic, group, consumer.client_id):  # noqa: ASYNC110 - no event
                    await anyio.sleep(0.05)
            dropped = time.monotonic()
            await send(Lite(rocketmq, lite_proxy), topic, [("x", b"after")])
            await seen.wait_body("x", b"after", timeout=60)  # the periodic resync: 1 h
            took = time.monotonic() - dropped
    print(f"dropped by the Proxy {dropped - broke:.2f} s after the break, "
          f"served again {took:.2f} s after")  # fmt: skip
    assert seen.by_lite["x"] == [b"before", b"after"]


async def test_what_the_proxy_wrote_to_a_broken_lite_stream_comes_back_after_its_invisible_time(
    rocketmq: LocalRocketMQ, lite_proxy: str, unique_name: Callable[[str], str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """A lite consumer's link breaks while a receive streams its batch. Its receives are
    not auto-renewed (the client renews lite messages), so the 5.5.0 Proxy holds what
    it wrote after the break only for the receive's invisible time (it registers a
    handle for renewal only for an auto-renewed receive): the consumer, open all along,
    handles every message once that time is over, with no release of its own (the
    issue's worry: held up to the renewal limit, 3 h, like a push consumer's)."""
    n, invisible = 12, 10
    topic, group = unique_name("lite"), unique_name("g")
    await lite_setup(rocketmq, topic, group)
    lite_topics = [f"l{i}" for i in range(n)]
    bodies = [(lt, lt.encode() + b":" + os.urandom(16 * 1024)) for lt in lite_topics]
    await send(Lite(rocketmq, lite_proxy), topic, bodies)
    decoded = spy_decoded(monkeypatch)
    handled: set[bytes] = set()
    every = anyio.Event()

    async def handle(msg: ConsumerMessage) -> None:
        handled.add(msg.body.split(b":", 1)[0])
        if len(handled) == n:
            every.set()

    async with FaultProxy(lite_proxy) as link:
        link.bandwidth = 32 * 1024
        consumer = grpc_lite_consumer(link.address, group, topic, handle, request_timeout=10,
                                      invisible_duration=invisible, pull_batch_size=32)  # fmt: skip
        for lt in lite_topics:
            await consumer.subscribe_lite(lt, offset=LiteOffset.EARLIEST)
        async with consumer:
            with anyio.fail_after(30):
                while not decoded:  # noqa: ASYNC110 - the decoder has no event
                    await anyio.sleep(0.02)
            link.drop()  # the receive stream breaks mid-batch
            link.heal()
            broke = time.monotonic()
            with anyio.fail_after(invisible + 20):
                await every.wait()
            took = time.monotonic() - broke
    print(f"every lite message handled {took:.1f} s after the break")
    assert handled == {lt.encode() for lt in lite_topics}
