"""Namespaces against the real broker: the client prefixes topic and group names the way
RocketMQ's clients do, and the application never sees the prefix."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
import pytest

from aiorocket.consumer import ConsumeFromWhere, Consumer, ConsumerMessage, PullConsumer
from aiorocket.integrations.health import consumer_health
from aiorocket.message import Message, MessageQueue
from aiorocket.namespace import wrap
from aiorocket.producer import Producer
from aiorocket.testing.broker import LocalRocketMQ
from tests.integration.test_grpc_push import _dead_letters

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

FAST = {"consume_from_where": ConsumeFromWhere.FIRST_OFFSET, "long_poll_timeout": 2.0,
        "pull_request_timeout": 12.0, "rebalance_interval": 2.0}  # fmt: skip


class Received:
    """Messages a handler got, and an event once ``expected`` of them came."""

    def __init__(self, expected: int, *, fail_first: bool = False) -> None:
        self.expected, self.fail_first = expected, fail_first
        self.messages: list[ConsumerMessage] = []
        self.done = anyio.Event()

    async def __call__(self, msg: ConsumerMessage) -> None:
        if self.fail_first and msg.reconsume_times == 0:
            raise RuntimeError("fails once: comes back through the group's retry topic")
        self.messages.append(msg)
        if len(self.messages) >= self.expected:
            self.done.set()


class Assigned:
    """A rebalance listener keeping what it was told."""

    def __init__(self) -> None:
        self.queues: set[MessageQueue] = set()

    async def on_queues_assigned(self, queues: list[MessageQueue]) -> None:
        self.queues.update(queues)

    async def on_queues_revoked(self, queues: list[MessageQueue]) -> None:
        self.queues.difference_update(queues)


async def test_a_namespaced_producer_and_consumer_use_prefixed_names_and_hide_them(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    topic, group = unique_name("nstopic"), unique_name("g")
    await rocketmq.create_topic(wrap("ns1", topic), queues=2)
    await rocketmq.create_topic(wrap("ns2", topic), queues=2)
    ns1, ns2 = Received(2, fail_first=True), Received(1)
    plain = Received(2)  # no namespace, subscribed to the broker's name of the topic
    listener = Assigned()
    c1 = Consumer(group, rocketmq.namesrv_addr, handler=ns1, namespace="ns1", listener=listener,
                  retry_delay_level=1, **FAST)  # fmt: skip
    c1.subscribe(topic)
    c2 = Consumer(group, rocketmq.namesrv_addr, handler=ns2, namespace="ns2", **FAST)
    c2.subscribe(topic)
    c0 = Consumer(unique_name("plain"), rocketmq.namesrv_addr, handler=plain, **FAST)
    c0.subscribe(wrap("ns1", topic))
    async with (
        c1, c2, c0,
        Producer(unique_name("p"), rocketmq.namesrv_addr, namespace="ns1") as p1,
        Producer(unique_name("p"), rocketmq.namesrv_addr, namespace="ns2") as p2,
    ):  # fmt: skip
        sent = [await p1.send(Message(topic, f"ns1-{i}".encode())) for i in range(2)]
        await p2.send(Message(topic, b"ns2-0"))
        with anyio.fail_after(60):  # the failed one comes back after delay level 1 (1 s)
            await ns1.done.wait()
            await ns2.done.wait()
            await plain.done.wait()
        assignment = c1.assignment()
        subscriptions = c1.subscriptions
        health = await consumer_health(c1, stuck_after=60)  # lag asks the broker's names
    assert {r.queue.topic for r in sent} == {topic}
    assert sorted(m.body for m in ns1.messages) == [b"ns1-0", b"ns1-1"]
    assert {m.topic for m in ns1.messages} == {topic}
    assert all(m.reconsume_times == 1 for m in ns1.messages)  # retried, through %RETRY%ns1%g
    assert [m.body for m in ns2.messages] == [b"ns2-0"]  # only its own namespace's
    assert sorted(m.body for m in plain.messages) == [b"ns1-0", b"ns1-1"]
    assert {m.topic for m in plain.messages} == {f"ns1%{topic}"}
    assert {mq.topic for mq in assignment} == {topic, f"%RETRY%{group}"}
    assert {mq.topic for mq in listener.queues} == {topic, f"%RETRY%{group}"}
    assert set(subscriptions) == {topic, f"%RETRY%{group}"}
    assert c1.group == group
    assert health["topics"] == [topic]
    # The two messages p1 sent, counted by the broker under the topic's broker name.
    assert sum(q["max_offset"] for q in health["queues"] if q["topic"] == topic) == 2


async def test_a_namespaced_pull_consumer_takes_and_gives_the_applications_queue_names(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    topic = unique_name("nspull")
    await rocketmq.create_topic(wrap("ns1", topic), queues=1, brokers=["broker-a"])
    queue = MessageQueue(topic, "broker-a", 0)
    async with Producer(unique_name("p"), rocketmq.namesrv_addr, namespace="ns1") as producer:
        for i in range(3):
            await producer.send(Message(topic, f"m{i}".encode()), selector=lambda qs, m, a: qs[0])
    consumer = PullConsumer(unique_name("g"), rocketmq.namesrv_addr, namespace="ns1",
                            auto_commit=False, **FAST)  # fmt: skip
    consumer.assign([queue])
    async with consumer:
        assert await consumer.end_offsets([queue]) == {queue: 3}
        got: list[bytes] = []
        with anyio.fail_after(30):
            while len(got) < 3:
                batch = await consumer.getmany(timeout=5)
                assert set(batch) <= {queue}
                got += [m.body for msgs in batch.values() for m in msgs]
        assert consumer.assignment() == {queue}
        assert consumer.position(queue) == 3
        await consumer.commit({queue: 3})
        assert await consumer.committed(queue) == 3
    assert got == [b"m0", b"m1", b"m2"]


@pytest.mark.parametrize(
    ("anyio_backend", "transport"), [("asyncio", "remoting"), ("asyncio", "grpc")]
)
async def test_a_namespaced_pop_consumer_gets_its_namespace_its_retries_and_its_dlq(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str], transport: str
) -> None:
    """POP with a namespace (remoting: the client wraps the names, the broker builds the
    pop retry topic ``%RETRY%ns1%g_ns1%t`` from them; gRPC: the Proxy wraps them): a
    consumer gets its namespace's messages only, under the application's topic name; a
    failing one comes back, then lands in ``%DLQ%ns1%g`` at the group's max attempts."""
    topic, group = unique_name("nspop"), unique_name("g")
    broker = rocketmq.state["proxy_broker"]  # the gRPC case reaches it through the Proxy
    for ns in ("ns1", "ns2"):
        await rocketmq.create_topic(wrap(ns, topic), queues=1, brokers=[broker])
    await rocketmq.create_group(wrap("ns1", group), retry_max_times=1)  # 2 attempts
    await rocketmq.create_group(wrap("ns2", group))  # a Proxy creates no group
    attempts: list[int] = []
    ns1, ns2 = Received(1), Received(1)

    async def failing(msg: ConsumerMessage) -> None:
        if msg.body == b"bad":
            attempts.append(msg.reconsume_times + 1)
            raise RuntimeError("poison: retried, then dead-lettered")
        await ns1(msg)

    where: dict[str, Any] = (
        {"namesrv": rocketmq.namesrv_addr, "consume_mode": "pop",
         "consume_from_where": ConsumeFromWhere.FIRST_OFFSET}
        if transport == "remoting" else {"proxy": rocketmq.proxy_grpc}
    )  # fmt: skip
    c1 = Consumer(group, handler=failing, namespace="ns1", long_poll_timeout=3, **where)
    c1.subscribe(topic)
    c2 = Consumer(group, handler=ns2, namespace="ns2", long_poll_timeout=3, **where)
    c2.subscribe(topic)
    sender: dict[str, Any] = (
        {"namesrv": rocketmq.namesrv_addr} if transport == "remoting"
        else {"proxy": rocketmq.proxy_grpc}
    )  # fmt: skip
    async with (
        Producer(unique_name("p"), namespace="ns1", **sender) as p1,
        Producer(unique_name("p"), namespace="ns2", **sender) as p2,
    ):  # fmt: skip
        sent = [await p1.send(Message(topic, b"bad")), await p1.send(Message(topic, b"ns1-ok"))]
        sent.append(await p2.send(Message(topic, b"ns2-ok")))
    assert {r.queue.topic for r in sent} == {topic}
    async with c1, c2:
        with anyio.fail_after(60):  # the retry comes 10 s (remoting) / 1 s (gRPC) later
            await ns1.done.wait()
            await ns2.done.wait()
            while b"bad" not in await _dead_letters(rocketmq, wrap("ns1", group)):  # noqa: ASYNC110
                await anyio.sleep(0.5)
    assert [m.body for m in ns1.messages] == [b"ns1-ok"]
    assert [m.body for m in ns2.messages] == [b"ns2-ok"]  # only its own namespace's
    assert {m.topic for m in ns1.messages + ns2.messages} == {topic}
    assert attempts == [1, 2]
    assert b"bad" not in await _dead_letters(rocketmq, wrap("ns2", group))
    assert b"bad" not in await _dead_letters(rocketmq, group)
