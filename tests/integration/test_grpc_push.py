"""The consumer over a Proxy (``Consumer(group, proxy=...)``) against the real Proxy of
the local cluster (broker-a, local mode): the shared runtime with the gRPC source.

Settle semantics as the remoting Consumer: success acks, failure comes back after the
server policy's backoff and reaches %DLQ%<group> at max attempts, FIFO groups in order,
two members share the messages with none lost, closing loses nothing. The contract
tests of the runtime over gRPC (renewal, FIFO retries, acks at close, the consume
timeout, ``break``) are in test_grpc_runtime.py.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, cast

import anyio
import pytest

from aiorocket.client.broker import PULL_SUBSCRIPTION
from aiorocket.client.instance import ClientInstance
from aiorocket.client.results import PullStatus
from aiorocket.consumer import Consumer, ConsumerMessage
from aiorocket.consumer.backend import PopBackend
from aiorocket.errors import ProxyUnavailableError, UnsupportedTransportError
from aiorocket.integrations.health import consumer_health
from aiorocket.message import Message, MessageQueue
from aiorocket.producer import Producer
from aiorocket.testing.broker import LocalRocketMQ

pytest.importorskip("grpclib")

from aiorocket.consumer.pop.runtime import PopRuntime
from aiorocket.grpc import PopMessage

pytestmark = [pytest.mark.anyio, pytest.mark.integration]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # grpclib is asyncio-only


async def _send(rocketmq: LocalRocketMQ, topic: str, bodies: list[bytes], **kw: str) -> None:
    async with Producer("pg-push", proxy=rocketmq.proxy_grpc) as producer:
        for body in bodies:
            await producer.send(Message(topic, body), **kw)


async def _dead_letters(rocketmq: LocalRocketMQ, group: str) -> list[bytes]:
    found: list[bytes] = []
    async with ClientInstance(rocketmq.namesrv_addr) as client:
        for addr in rocketmq.broker_addrs.values():
            try:
                res = await client.broker.pull(
                    addr, "dlq-reader", MessageQueue(f"%DLQ%{group}", "", 0), 0,
                    sys_flag=PULL_SUBSCRIPTION, subscription="*", suspend_timeout_ms=0, timeout=5,
                )  # fmt: skip
            except Exception:  # no DLQ topic on that broker
                continue
            if res.status is PullStatus.FOUND:
                found += [m.body for m in res.messages]
    return found


def grpc_consumer(
    rocketmq: LocalRocketMQ, group: str, topic: str, handler: Any = None, **settings: Any
) -> Consumer:
    consumer = Consumer(group, proxy=rocketmq.proxy_grpc, handler=handler,
                        long_poll_timeout=5, **settings)  # fmt: skip
    consumer.subscribe(topic)
    return consumer


def runtime_of(consumer: Consumer) -> PopRuntime:
    runtime = cast(PopBackend, consumer._backend).runtime
    assert runtime is not None
    return runtime


def spy_changes(consumer: Consumer) -> list[tuple[bytes, float]]:
    """The open ``consumer``'s ChangeInvisibleDuration requests the Proxy took, as (body,
    seconds): its releases (0) and nacks. What a test counts where the time a message
    took to come back would not tell (the Proxy makes what a session held visible
    about 1 s after the session ends, released or not)."""
    source = runtime_of(consumer).source
    change = source.change_invisible
    changes: list[tuple[bytes, float]] = []

    async def spy(msg: PopMessage, seconds: float) -> None:
        await change(msg, seconds)
        changes.append((msg.body, seconds))

    source.change_invisible = spy  # type: ignore[method-assign]
    return changes


async def test_two_members_share_the_messages_none_lost(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    topic, group = unique_name("gpush"), unique_name("g")
    await rocketmq.create_topic(topic, queues=4, brokers=[rocketmq.state["proxy_broker"]])
    await rocketmq.create_group(group)
    bodies = [f"m{i}".encode() for i in range(60)]
    await _send(rocketmq, topic, bodies)
    seen: dict[str, list[bytes]] = {"a": [], "b": []}
    done = anyio.Event()

    def handler(name: str) -> Callable[[ConsumerMessage], object]:
        async def handle(msg: ConsumerMessage) -> None:
            seen[name].append(msg.body)
            await anyio.sleep(0.05)  # both members get a share
            if len(set(seen["a"]) | set(seen["b"])) == len(bodies):
                done.set()

        return handle

    # A small cache: the first member up cannot pop everything before the second starts.
    a = grpc_consumer(rocketmq, group, topic, handler("a"), pull_batch_size=8,
                      consume_concurrency=4, pull_threshold_for_all=8)  # fmt: skip
    b = grpc_consumer(rocketmq, group, topic, handler("b"), pull_batch_size=8,
                      consume_concurrency=4, pull_threshold_for_all=8)  # fmt: skip
    async with a, b:
        with anyio.fail_after(30):
            await done.wait()
    assert sorted(set(seen["a"]) | set(seen["b"])) == sorted(bodies)
    assert seen["a"] and seen["b"]


async def test_failure_comes_back_by_the_policy_then_goes_to_the_dlq(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    topic, group = unique_name("gpfail"), unique_name("g")
    await rocketmq.create_topic(topic, queues=1, brokers=[rocketmq.state["proxy_broker"]])
    await rocketmq.create_group(group, retry_max_times=1)  # the Proxy's max attempts: 2
    await _send(rocketmq, topic, [b"ok", b"bad"])
    attempts: list[tuple[int, float]] = []
    ok, second = anyio.Event(), anyio.Event()

    async def handle(msg: ConsumerMessage) -> bool:
        assert isinstance(msg, PopMessage)
        if msg.body == b"ok":
            ok.set()
            return True
        attempts.append((msg.delivery_attempt, time.monotonic()))
        if len(attempts) == 2:
            second.set()
        return False

    async with grpc_consumer(rocketmq, group, topic, handle) as consumer:
        runtime = runtime_of(consumer)
        assert runtime.settler.max_attempts == 2 and not runtime.fifo
        with anyio.fail_after(40):
            await ok.wait()
            await second.wait()
            while b"bad" not in await _dead_letters(rocketmq, group):  # noqa: ASYNC110
                await anyio.sleep(0.5)
    assert [a for a, _ in attempts] == [1, 2]
    # The default (customized) policy's first retry delay is 1 s.
    assert attempts[1][1] - attempts[0][1] >= 0.9
    assert b"ok" not in await _dead_letters(rocketmq, group)


async def test_fifo_groups_in_order_with_local_retries_then_dlq(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    topic, group = unique_name("gpfifo"), unique_name("g")
    await rocketmq.create_topic(topic, queues=2, message_type="FIFO")
    await rocketmq.create_group(group, orderly=True, retry_max_times=1)
    order = {"A": [f"A{i}".encode() for i in range(6)], "B": [f"B{i}".encode() for i in range(6)]}
    async with Producer(unique_name("pg"), proxy=rocketmq.proxy_grpc) as producer:
        for a, b in zip(order["A"], order["B"], strict=True):
            await producer.send(Message(topic, a), sharding_key="A")
            await producer.send(Message(topic, b), sharding_key="B")
    seen: dict[str, list[bytes]] = {"A": [], "B": []}
    done = anyio.Event()

    async def handle(msg: ConsumerMessage) -> None:
        assert isinstance(msg, PopMessage) and msg.message_group is not None
        seen[msg.message_group].append(msg.body)
        if sum(map(len, seen.values())) >= 13:  # A2 twice (one local retry)
            done.set()
        if msg.body == b"A2":
            raise RuntimeError("A2 always fails")

    async with grpc_consumer(rocketmq, group, topic, handle) as consumer:
        assert runtime_of(consumer).fifo
        with anyio.fail_after(40):
            await done.wait()
    a = order["A"]
    assert seen["A"] == [*a[:3], a[2], *a[3:]]  # retried locally, then the group moved on
    assert seen["B"] == order["B"]
    assert await _dead_letters(rocketmq, group) == [b"A2"]


async def test_fifo_group_under_async_for_retries_in_place(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    """``async for`` over a FIFO group: a message the loop fails comes back before its
    group's next one (retried in place), as with a handler; before, the next one was
    handed out and acked at once and the failed one came back after it."""
    topic, group = unique_name("gpfifoit"), unique_name("g")
    await rocketmq.create_topic(topic, queues=1, message_type="FIFO")
    await rocketmq.create_group(group, orderly=True)
    await _send(rocketmq, topic, [b"step-1", b"step-2", b"step-3"], sharding_key="order-42")
    seen: list[tuple[bytes, int]] = []
    consumer = grpc_consumer(rocketmq, group, topic, pull_batch_size=8)
    async with consumer:
        assert runtime_of(consumer).fifo
        with anyio.fail_after(30):
            async for msg in consumer:
                assert isinstance(msg, PopMessage)
                seen.append((msg.body, msg.delivery_attempt))
                if msg.body == b"step-1" and msg.delivery_attempt == 1:
                    await msg.nack()  # step 1 failed: it must come back before step 2
                    continue
                if msg.body == b"step-3":
                    break
    assert seen == [(b"step-1", 1), (b"step-1", 2), (b"step-2", 1), (b"step-3", 1)]


async def test_async_for_and_close_loses_nothing(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    topic, group = unique_name("gpiter"), unique_name("g")
    await rocketmq.create_topic(topic, queues=1, brokers=[rocketmq.state["proxy_broker"]])
    await rocketmq.create_group(group)
    bodies = [f"m{i}".encode() for i in range(10)]
    await _send(rocketmq, topic, bodies)
    first: list[bytes] = []
    received: set[bytes] = set()
    # request_timeout: the Proxy's first answers on a loaded machine (load 30: over 3 s)
    consumer = grpc_consumer(rocketmq, group, topic, pull_batch_size=10, request_timeout=30)
    async with consumer:
        changes = spy_changes(consumer)
        source = runtime_of(consumer).source
        receive = source.receive

        async def spy_receive(*args: Any) -> list[PopMessage]:
            got = await receive(*args)
            received.update(m.body for m in got)
            return got

        source.receive = spy_receive  # type: ignore[method-assign]
        with anyio.fail_after(60):
            async for msg in consumer:
                first.append(msg.body)
                if len(first) == 3:
                    break  # the 3rd is released; the 4th.. were never handed out
    # Released at the close (visible again at once), not left to the invisible time:
    # the 3rd and every message received but not handed out, none acked.
    released = {body for body, seconds in changes if seconds == 0}
    assert first[2] in released and not released & set(first[:2]), changes
    assert received - set(first[:2]) <= released and len(changes) == len(released), changes
    rest: list[bytes] = []
    async with grpc_consumer(rocketmq, group, topic, request_timeout=30) as c:
        with anyio.fail_after(60):
            async for msg in c:
                rest.append(msg.body)
                if len(set(first[:2] + rest)) == len(bodies):
                    break
        await msg.ack()
    assert sorted(set(first[:2] + rest)) == sorted(bodies)
    assert not set(first[:2]) & set(rest)  # acked when the loop asked for the next


async def test_unreachable_endpoint_and_trio(unique_name: Callable[[str], str]) -> None:
    consumer = Consumer("g", proxy="127.0.0.1:1", request_timeout=2.0)
    consumer.subscribe("t")
    with anyio.fail_after(10), pytest.raises(ProxyUnavailableError):
        async with consumer:
            pass


@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_trio_gets_a_clear_error() -> None:
    consumer = Consumer("g", proxy="127.0.0.1:8081")
    consumer.subscribe("t")
    with pytest.raises(UnsupportedTransportError, match="asyncio"):
        async with consumer:
            pass


@pytest.mark.smoke
async def test_the_consumer_class_over_a_proxy_endpoint_handler_and_async_for(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    """``Consumer(group, proxy=...)``: the one argument that picks the transport. The
    same handler (here a plain function, run in a worker thread) and ``async for`` API."""
    topic, group = unique_name("gpconsumer"), unique_name("g")
    await rocketmq.create_topic(topic, queues=1, brokers=[rocketmq.state["proxy_broker"]])
    await rocketmq.create_group(group)
    await _send(rocketmq, topic, [b"h0", b"h1"])
    got: list[bytes] = []
    done = anyio.Event()

    def handle(msg: ConsumerMessage) -> None:  # sync: a worker thread
        got.append(msg.body)
        if len(got) == 2:
            anyio.from_thread.run_sync(done.set)

    consumer = Consumer(group, proxy=rocketmq.proxy_grpc, handler=handle, long_poll_timeout=5)
    consumer.subscribe(topic)
    async with consumer:
        assert consumer.transport == "grpc" and consumer.started and consumer.has_joined
        with anyio.fail_after(30):
            await done.wait()
        with pytest.raises(UnsupportedTransportError, match="remoting"):
            consumer.assignment()
        report = await consumer_health(consumer, stuck_after=60)  # a service's health route
        assert (report["joined"], report["live"], report["queues"]) == (True, True, [])
    assert sorted(got) == [b"h0", b"h1"]

    await _send(rocketmq, topic, [b"i0"])
    iterated = Consumer(group, rocketmq.proxy_grpc, transport="grpc", long_poll_timeout=5)
    iterated.subscribe(topic)
    async with iterated:
        with anyio.fail_after(30):
            async for msg in iterated:
                assert msg.body == b"i0"
                break
        await msg.ack()
