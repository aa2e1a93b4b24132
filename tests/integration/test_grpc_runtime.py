"""The consumer runtime's contract over gRPC, against the real Proxy of the local cluster.

The local cluster's Proxy keeps auto-renewed messages invisible 10 s at a time (the
Proxy's minimum; aiorocket.testing._config), so a handler of 25 s outlives the
invisible time twice and the renewal is exercised in seconds.

Issue 29: the gRPC consumer runs on the shared runtime and keeps the at-least-once
contract as the remoting one does: a message held longer than its invisible time
(cached or handled) is renewed, never delivered twice while it runs; a FIFO group's
retries keep the group in order; the close delivers every ack it owes and hands back
what it did not handle; the consume timeout stops a stuck handler and the message
comes back; ``break`` out of ``async for`` releases the message, never dead-letters it.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from contextlib import aclosing
from typing import Any

import anyio
import pytest

from aiorocket.consumer import Consumer, ConsumerMessage
from aiorocket.message import Message
from aiorocket.producer import Producer
from aiorocket.testing.broker import LocalRocketMQ

pytest.importorskip("grpclib")

from aiorocket.consumer.pop.grpc_source import RECEIVERS, GrpcSource
from aiorocket.grpc import PopMessage
from aiorocket.grpc._push_message import handle_invisible_time
from tests.integration.test_grpc_push import (
    _dead_letters,
    grpc_consumer,
    runtime_of,
    spy_changes,
)

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

#: the Proxy's smallest invisible duration: what the renewal tests use
INVISIBLE = 10.0


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # grpclib is asyncio-only


async def _setup(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str], bodies: list[bytes], **group: Any
) -> tuple[str, str]:
    topic, name = unique_name("grt"), unique_name("g")
    await rocketmq.create_topic(topic, queues=2, brokers=[rocketmq.state["proxy_broker"]])
    await rocketmq.create_group(name, **group)
    async with Producer(unique_name("p"), rocketmq.namesrv_addr) as producer:
        for body in bodies:
            await producer.send(Message(topic, body))
    return topic, name


async def _nothing_comes_back(rocketmq: LocalRocketMQ, group: str, topic: str) -> list[bytes]:
    """What the group receives within the invisible time and a margin: acked messages
    never come back, so this is empty when every ack reached the Proxy."""
    got: list[bytes] = []

    async def record(msg: ConsumerMessage) -> None:
        got.append(msg.body)

    async with grpc_consumer(rocketmq, group, topic, record):
        await anyio.sleep(INVISIBLE + 4)  # the event waited for is an absence: a bound
    return got


async def test_a_handler_longer_than_the_invisible_time_runs_once_and_is_acked_once(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    """A 25 s handler with the Proxy's minimum invisible time (10 s), a second member in
    the group all along: the message is renewed while it runs, never delivered again
    (to either member), and its ack is accepted with the renewed handle."""
    topic, group = await _setup(rocketmq, unique_name, [b"long"])
    seen: Counter[str] = Counter()
    done = anyio.Event()
    invisible: list[float | None] = []

    def slow(name: str) -> Callable[[ConsumerMessage], Any]:
        async def handle(msg: ConsumerMessage) -> None:
            assert isinstance(msg, PopMessage)
            invisible.append(handle_invisible_time(msg.receipt_handle))
            seen[name] += 1
            await anyio.sleep(25)
            done.set()

        return handle

    members = {
        name: grpc_consumer(rocketmq, group, topic, slow(name), invisible_duration=INVISIBLE)
        for name in ("a", "b")
    }
    async with members["a"], members["b"]:
        with anyio.fail_after(60):
            await done.wait()
            (name,) = seen
            runtime = runtime_of(members[name])
            while runtime.acks.acked < 1:  # noqa: ASYNC110 - the flusher's answer
                await anyio.sleep(0.05)
        # The handler outlived the message's invisible time at least twice: renewed.
        assert runtime.source.server_renews and invisible == [INVISIBLE]
        assert runtime.acks.failed == 0
        await anyio.sleep(INVISIBLE + 2)  # had the ack failed, a member would get it now
    assert seen == Counter({name: 1})


async def test_a_backlog_longer_than_the_invisible_time_is_handled_once_each(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    """More cached work than the workers finish within the invisible time (80 messages
    x 0.3 s / 2 workers = 12 s > 10 s): the cached messages are renewed while they
    wait, so none is handled twice, and every ack sticks."""
    bodies = [f"m{i}".encode() for i in range(80)]
    topic, group = await _setup(rocketmq, unique_name, bodies)
    seen: Counter[bytes] = Counter()
    done = anyio.Event()

    async def handle(msg: ConsumerMessage) -> None:
        seen[msg.body] += 1
        await anyio.sleep(0.3)
        if set(seen) == set(bodies):
            done.set()

    consumer = grpc_consumer(rocketmq, group, topic, handle, invisible_duration=INVISIBLE,
                           consume_concurrency=2)  # fmt: skip
    async with consumer:
        with anyio.fail_after(60):
            await done.wait()
        runtime = runtime_of(consumer)
    assert seen == Counter(dict.fromkeys(bodies, 1))
    assert runtime.unsent_acks == 0
    assert await _nothing_comes_back(rocketmq, group, topic) == []


async def test_fifo_retries_outliving_the_invisible_time_keep_each_group_in_order(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    """A FIFO group whose first message fails twice, 4 s a try (12 s > the 10 s
    invisible time): its retries keep it and the rest of its group invisible, so the
    group is handled strictly in order, retries included, and nothing of it starts
    before its predecessor settled."""
    topic, group = unique_name("gfifo"), unique_name("g")
    await rocketmq.create_topic(topic, queues=2, message_type="FIFO")
    await rocketmq.create_group(group, orderly=True, retry_max_times=3)
    async with Producer(unique_name("p"), proxy=rocketmq.proxy_grpc) as producer:
        for i in range(4):
            await producer.send(Message(topic, f"A{i}".encode()), sharding_key="A")
            await producer.send(Message(topic, f"B{i}".encode()), sharding_key="B")
    seen: dict[str, list[str]] = {"A": [], "B": []}
    running: dict[str, int] = {"A": 0, "B": 0}
    overlap: list[str] = []
    fails = Counter[str]()
    done = anyio.Event()

    async def handle(msg: ConsumerMessage) -> None:
        assert isinstance(msg, PopMessage) and msg.message_group is not None
        g = msg.message_group
        running[g] += 1
        if running[g] > 1:
            overlap.append(msg.body.decode())
        seen[g].append(msg.body.decode())
        try:
            if msg.body == b"A0" and fails["A0"] < 2:
                fails["A0"] += 1
                await anyio.sleep(4)
                raise RuntimeError("A0 fails twice")
        finally:
            running[g] -= 1
        if len(seen["A"]) == 6 and len(seen["B"]) == 4:
            done.set()

    consumer = grpc_consumer(rocketmq, group, topic, handle, invisible_duration=INVISIBLE)
    async with consumer:
        assert runtime_of(consumer).fifo
        with anyio.fail_after(60):
            await done.wait()
        await anyio.sleep(INVISIBLE + 2)  # a redelivered copy would show up now
    assert seen["A"] == ["A0", "A0", "A0", "A1", "A2", "A3"]
    assert seen["B"] == ["B0", "B1", "B2", "B3"]
    assert overlap == []
    assert await _dead_letters(rocketmq, group) == []


async def test_the_close_delivers_every_ack_it_owes(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    """200 handlers finish together and the consumer closes at once: the Proxy answers
    all 200 acks (counted from its answers), and nothing comes back afterwards."""
    bodies = [f"m{i}".encode() for i in range(200)]
    topic, group = await _setup(rocketmq, unique_name, bodies)
    gate, all_running = anyio.Event(), anyio.Event()
    running = 0

    async def handle(msg: ConsumerMessage) -> None:
        nonlocal running
        running += 1
        if running == len(bodies):
            all_running.set()
        await gate.wait()

    consumer = grpc_consumer(rocketmq, group, topic, handle, consume_concurrency=200,
                           pull_threshold_for_all=400)  # fmt: skip
    async with consumer:
        with anyio.fail_after(60):
            await all_running.wait()
        runtime = runtime_of(consumer)
        gate.set()  # all finish together; the close starts right away
    assert (runtime.acks.acked, runtime.acks.failed, runtime.unsent_acks) == (200, 0, 0)
    assert await _nothing_comes_back(rocketmq, group, topic) == []


async def test_the_consume_timeout_stops_a_stuck_handler_and_the_message_comes_back(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    topic, group = await _setup(rocketmq, unique_name, [b"stuck"])
    attempts: list[tuple[int, float]] = []
    second = anyio.Event()

    async def handle(msg: ConsumerMessage) -> None:
        assert isinstance(msg, PopMessage)
        attempts.append((msg.delivery_attempt, time.monotonic()))
        if msg.delivery_attempt == 1:
            await anyio.sleep_forever()
        second.set()

    # request_timeout: the Proxy's first answers on a loaded machine (load 30: over 3 s)
    consumer = grpc_consumer(rocketmq, group, topic, handle, consume_timeout=2.0,
                             request_timeout=30)  # fmt: skip
    async with consumer:
        changes = spy_changes(consumer)
        backoff = runtime_of(consumer).source.backoff(1)
        with anyio.fail_after(120):  # left to the Proxy, which renews it: never back
            await second.wait()
    assert [a for a, _ in attempts] == [1, 2]
    # Back after the timeout and the policy's first backoff (the nack's one request),
    # not left to the invisible time.
    assert changes == [(b"stuck", backoff)]
    assert attempts[1][1] - attempts[0][1] >= 1.9


# gRPC on asyncio only (grpclib); remoting on both loops.
@pytest.mark.parametrize(
    ("transport", "anyio_backend"),
    [("grpc", "asyncio"), ("remoting", "asyncio"), ("remoting", "trio")],
)
async def test_break_out_of_async_for_releases_the_message_on_both_transports(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str], transport: str, anyio_backend: str
) -> None:
    """``break`` leaves the message unsettled: once the loop's iterator is closed (at
    once with ``aclosing``; else when Python finalizes it), the next loop gets the same
    message again (not redelivered by a nack: the same attempt), and nothing is
    dead-lettered."""
    topic, group = await _setup(rocketmq, unique_name, [b"x0", b"x1"])
    if transport == "grpc":
        consumer = grpc_consumer(rocketmq, group, topic)
    else:
        consumer = Consumer(group, rocketmq.namesrv_addr,
                            consume_from_where="CONSUME_FROM_FIRST_OFFSET")  # fmt: skip
        consumer.subscribe(topic)
    async with consumer:
        with anyio.fail_after(30):
            async with aclosing(consumer.messages()) as loop:
                async for first in loop:  # noqa: B007
                    break
            async with aclosing(consumer.messages()) as loop:
                async for again in loop:  # noqa: B007
                    break
        assert again is first and not first.settled
        assert again.reconsume_times == 0
        await again.ack()
    assert await _dead_letters(rocketmq, group) == []


async def test_a_handler_cut_off_by_the_close_hands_its_message_back_at_once(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    """A handler still running when ``shutdown_timeout`` ends is cancelled and its
    message released (made visible again): the next member gets it at once, not after
    the invisible time."""
    topic, group = await _setup(rocketmq, unique_name, [b"cut"])
    started = anyio.Event()

    async def hang(msg: ConsumerMessage) -> None:
        started.set()
        await anyio.sleep_forever()

    first = grpc_consumer(rocketmq, group, topic, hang, shutdown_timeout=0.5)
    async with first:
        with anyio.fail_after(30):
            await started.wait()
    closed = time.monotonic()
    again: list[tuple[bytes, float]] = []
    got = anyio.Event()

    async def record(msg: ConsumerMessage) -> None:
        again.append((msg.body, time.monotonic() - closed))
        got.set()

    async with grpc_consumer(rocketmq, group, topic, record):
        with anyio.fail_after(30):
            await got.wait()
    assert again[0][0] == b"cut"
    assert again[0][1] < INVISIBLE  # one receive long poll (5 s) at most


async def test_a_backlog_is_received_by_more_receives_each_handled_once(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 43, goal 5: receives that come back full (a backlog) put the extra receive
    loops out beside the two, through the real Proxy; every message is handled once
    and every ack is sent."""
    bodies = [f"m{i}".encode() for i in range(400)]
    topic, group = unique_name("grt"), unique_name("g")
    await rocketmq.create_topic(topic, queues=8, brokers=[rocketmq.state["proxy_broker"]])
    await rocketmq.create_group(group)
    async with Producer(unique_name("p"), rocketmq.namesrv_addr) as producer:
        for i in range(0, len(bodies), 50):
            await producer.send_batch([Message(topic, b) for b in bodies[i : i + 50]])
    out, most = 0, 0
    receive = GrpcSource.receive

    async def counted(source: GrpcSource, *args: Any) -> list[Any]:
        nonlocal out, most
        out += 1
        most = max(most, out)
        try:
            return await receive(source, *args)
        finally:
            out -= 1

    monkeypatch.setattr(GrpcSource, "receive", counted)
    seen: Counter[bytes] = Counter()
    done = anyio.Event()

    async def handle(msg: ConsumerMessage) -> None:
        seen[msg.body] += 1
        if len(seen) == len(bodies):
            done.set()

    consumer = grpc_consumer(rocketmq, group, topic, handle, pull_batch_size=4)
    async with consumer:
        with anyio.fail_after(60):
            await done.wait()
        runtime = runtime_of(consumer)
    assert seen == Counter(dict.fromkeys(bodies, 1))
    assert most > RECEIVERS
    assert runtime.unsent_acks == 0
