"""aiorocket.faststream against the real local RocketMQ, through FastStream's API only:
decorated subscribers and publishers, ``broker.publish``, the handler's message, the ack
policies settled as RocketMQ settles (retry topic, dead-letter queue), on both transports."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest
from faststream import AckPolicy
from faststream.exceptions import RejectMessage, SetupError
from pydantic import BaseModel

from aiorocket.admin import Admin
from aiorocket.consumer import ConsumerConfig
from aiorocket.errors import ConfigError, ReplyTimeoutError
from aiorocket.faststream import RocketBroker, RocketMessage
from aiorocket.faststream._subscriber import RocketSubscriber
from aiorocket.message import Message
from aiorocket.producer import Producer
from aiorocket.testing.broker import LocalRocketMQ
from tests.integration.faststream_helpers import FAST, FIRST, started
from tests.integration.helpers import eventually

pytestmark = [pytest.mark.anyio, pytest.mark.integration]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # FastStream runs on asyncio


class Order(BaseModel):
    id: int
    amount: float


def remoting(rocketmq: LocalRocketMQ, **kw: Any) -> RocketBroker:
    return RocketBroker(rocketmq.namesrv_addr, consumer_config=FAST, **kw)


async def test_subscriber_gets_its_tag_with_keys_and_headers_both_ways(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    topic, group = unique_name("fs"), unique_name("g")
    await rocketmq.create_topic(topic, queues=2)
    broker = remoting(rocketmq)
    got: list[tuple[Order, dict[str, str], str | None, list[str]]] = []
    done = asyncio.Event()

    @broker.subscriber(topic, group=group, tags="paid", consume_from_where=FIRST)
    async def handle(order: Order, message: RocketMessage) -> None:
        raw = message.raw_message
        got.append((order, dict(message.headers), raw.tags, raw.keys))
        done.set()

    async with broker:
        sent = await broker.publish(
            Order(id=7, amount=9.5), topic, tags="paid", keys=["order-7"],
            headers={"tenant": "acme", "n": 3},
        )  # fmt: skip
        await broker.publish(Order(id=8, amount=1.0), topic, tags="refunded")
        await broker.start()
        await asyncio.wait_for(done.wait(), 60)
    assert sent.msg_id
    order, headers, tags, keys = got[0]
    assert order == Order(id=7, amount=9.5)
    assert headers["tenant"] == "acme" and headers["n"] == "3"  # user properties
    assert headers["content-type"] == "application/json"
    assert (tags, keys) == ("paid", ["order-7"])
    assert [g[0].id for g in got] == [7]  # the refund's tag is filtered out


async def test_publisher_sends_the_result_to_a_second_topic_with_its_options(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    orders, invoices = unique_name("orders"), unique_name("invoices")
    for t in (orders, invoices):
        await rocketmq.create_topic(t, queues=2)
    broker = remoting(rocketmq)
    invoiced: list[tuple[dict[str, Any], str | None, dict[str, str]]] = []
    done = asyncio.Event()

    @broker.subscriber(orders, group=unique_name("billing"), consume_from_where=FIRST)
    @broker.publisher(invoices, tags="issued", headers={"source": "billing"})
    async def bill(order: Order) -> dict[str, Any]:
        return {"order": order.id, "total": order.amount * 2}

    @broker.subscriber(invoices, group=unique_name("mail"), consume_from_where=FIRST)
    async def mail(invoice: dict[str, Any], message: RocketMessage) -> None:
        invoiced.append((invoice, message.raw_message.tags, dict(message.headers)))
        done.set()

    assert not await broker.ping()
    async with started(broker):
        assert await broker.ping()
        await broker.publish(Order(id=1, amount=4.0), orders)
        await asyncio.wait_for(done.wait(), 60)
    assert not await broker.ping()
    invoice, tags, headers = invoiced[0]
    assert invoice == {"order": 1, "total": 8.0}
    assert tags == "issued" and headers["source"] == "billing"


async def test_a_subscriber_whose_consumer_died_is_not_running_and_ping_says_so(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    """A consumer that dies (a background task of it failed) ends its subscriber: it
    looked running, and ping() checked the producer alone, so health checks passed while
    nothing was consumed (logged once)."""
    topic = unique_name("fs")
    await rocketmq.create_topic(topic, queues=1)
    broker = remoting(rocketmq)

    @broker.subscriber(topic, group=unique_name("g"), consume_from_where=FIRST)
    async def handle(body: str) -> None: ...

    async def fail() -> None:
        raise RuntimeError("a background task of the consumer failed")

    async with started(broker):
        (sub,) = broker.subscribers
        assert isinstance(sub, RocketSubscriber) and sub.consumer is not None
        assert sub.running and not sub.died and await broker.ping()
        # the fault: a task of the consumer's own task group raises (no server does this)
        sub.consumer._backend.engine("test")._tg.start_soon(fail)  # type: ignore[union-attr]
        await eventually(lambda: sub.died, timeout=10)
        assert not sub.running
        assert not await broker.ping()


async def test_a_raised_exception_is_retried_by_the_group_then_acked(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    """NACK_ON_ERROR (the default): the message comes back through the group's retry
    topic (delay level 1: 1 s) with its reconsume count, then succeeds and stays acked."""
    topic = unique_name("fs")
    await rocketmq.create_topic(topic, queues=1)
    broker = remoting(rocketmq)
    attempts: list[int] = []
    done = asyncio.Event()

    @broker.subscriber(topic, group=unique_name("g"), consume_from_where=FIRST,
                       settings={"retry_delay_level": 1})  # fmt: skip
    async def handle(body: str, message: RocketMessage) -> None:
        attempts.append(message.raw_message.reconsume_times)
        if len(attempts) == 1:
            raise RuntimeError("first attempt fails")
        done.set()

    async with started(broker):
        await broker.publish("flaky", topic)
        await asyncio.wait_for(done.wait(), 60)
    assert attempts == [0, 1]


@pytest.mark.parametrize("how", ["RejectMessage", "REJECT_ON_ERROR"])
async def test_reject_sends_the_message_to_the_dead_letter_queue_at_once(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str], how: str
) -> None:
    topic, group = unique_name("fs"), unique_name("g")
    await rocketmq.create_topic(topic, queues=1)
    broker = remoting(rocketmq)
    calls: list[str] = []
    policy = AckPolicy.REJECT_ON_ERROR if how == "REJECT_ON_ERROR" else AckPolicy.NACK_ON_ERROR

    @broker.subscriber(topic, group=group, consume_from_where=FIRST, ack_policy=policy)
    async def handle(body: str) -> None:
        calls.append(body)
        if how == "RejectMessage":
            raise RejectMessage
        raise ValueError("poison")

    async with started(broker), Admin(rocketmq.namesrv_addr) as admin:
        await broker.publish("poison", topic, keys=["p-1"])

        async def dead() -> bool:
            return len(await admin.dead_letters(group)) == 1

        await eventually(dead, timeout=60)
    (msg,) = await _dead_letters(rocketmq, group)
    assert msg.keys == ["p-1"] and msg.body == b"poison"
    assert calls == ["poison"]  # no retry before the dead-letter queue


async def _dead_letters(rocketmq: LocalRocketMQ, group: str) -> list[Any]:
    async with Admin(rocketmq.namesrv_addr) as admin:
        return list(await admin.dead_letters(group))


async def test_ack_policy_ack_settles_a_failed_message_as_consumed(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    """AckPolicy.ACK: an exception is logged, the message is consumed (not retried)."""
    topic = unique_name("fs")
    await rocketmq.create_topic(topic, queues=1)
    broker = remoting(rocketmq)
    seen: list[str] = []
    done = asyncio.Event()

    @broker.subscriber(topic, group=unique_name("g"), consume_from_where=FIRST,
                       ack_policy=AckPolicy.ACK, concurrency=1,
                       settings={"retry_delay_level": 1})  # fmt: skip
    async def handle(body: str) -> None:
        seen.append(body)
        if {"bad", "last"} <= set(seen):  # one queue on each broker: in either order
            done.set()
        if body == "bad":
            raise ValueError("bad")

    async with started(broker):
        await broker.publish("bad", topic)
        await broker.publish("last", topic)
        await asyncio.wait_for(done.wait(), 60)
        await asyncio.sleep(3)  # a retry (delay level 1: 1 s) would be back by now: a bound
    assert sorted(seen) == ["bad", "last"]


async def test_manual_nack_and_ack_from_the_handler(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    topic = unique_name("fs")
    await rocketmq.create_topic(topic, queues=1)
    broker = remoting(rocketmq)
    attempts: list[int] = []
    done = asyncio.Event()

    @broker.subscriber(topic, group=unique_name("g"), consume_from_where=FIRST,
                       ack_policy=AckPolicy.MANUAL)  # fmt: skip
    async def handle(body: str, message: RocketMessage) -> None:
        attempts.append(message.raw_message.reconsume_times)
        if len(attempts) == 1:
            await message.nack(delay_level=1)
        else:
            await message.ack()
            done.set()

    async with started(broker):
        await broker.publish("m", topic)
        await asyncio.wait_for(done.wait(), 60)
    assert attempts == [0, 1]


async def test_orderly_subscriber_gets_one_sharding_key_in_order(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    topic = unique_name("fs")
    await rocketmq.create_topic(topic, queues=4)
    broker = remoting(rocketmq)
    got: list[tuple[int, int]] = []
    done = asyncio.Event()

    @broker.subscriber(topic, group=unique_name("g"), consume_from_where=FIRST, orderly=True)
    async def handle(n: int, message: RocketMessage) -> None:
        got.append((n, message.raw_message.queue_id))
        if len(got) == 20:
            done.set()

    async with broker:
        for n in range(20):
            await broker.publish(n, topic, sharding_key="customer-1")
        await broker.start()
        await asyncio.wait_for(done.wait(), 60)
    assert [n for n, _ in got] == list(range(20))
    assert len({q for _, q in got}) == 1


async def test_delay_postpones_delivery(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    topic = unique_name("fs")
    await rocketmq.create_topic(topic, queues=1)
    broker = remoting(rocketmq)
    arrived: list[float] = []
    done = asyncio.Event()

    @broker.subscriber(topic, group=unique_name("g"), consume_from_where=FIRST)
    async def handle(body: str) -> None:
        arrived.append(time.time())
        done.set()

    async with started(broker):
        sent_at = time.time()
        await broker.publish("later", topic, delay=3)
        await asyncio.wait_for(done.wait(), 60)
    assert arrived[0] - sent_at >= 2.9


async def test_broadcasting_subscribers_each_get_every_message(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str], tmp_path: Any
) -> None:
    """Two instances of one service (two brokers, one group), broadcasting: both get it."""
    topic, group = unique_name("fs"), unique_name("g")
    await rocketmq.create_topic(topic, queues=2)
    got: dict[str, list[str]] = {"a": [], "b": []}
    both = asyncio.Event()
    brokers = []
    for name in ("a", "b"):
        broker = remoting(rocketmq)

        def make(name: str) -> Any:
            async def handle(body: str) -> None:
                got[name].append(body)
                if all(got.values()):
                    both.set()

            return handle

        store = {"offset_store_dir": str(tmp_path / name)}
        broker.subscriber(topic, group=group, broadcasting=True, consume_from_where=FIRST,
                          settings=store)(make(name))  # fmt: skip
        brokers.append(broker)
    async with brokers[0]:
        await brokers[0].publish("to-all", topic)
        async with started(brokers[1]):
            await brokers[0].start()
            await asyncio.wait_for(both.wait(), 60)
    assert got == {"a": ["to-all"], "b": ["to-all"]}


async def test_pop_mode_over_remoting(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    """consume_mode='pop': the brokers hand out the messages (no queue rebalance); a
    raised exception comes back by the group's pop retry."""
    topic = unique_name("fs")
    await rocketmq.create_topic(topic, queues=2)
    broker = remoting(rocketmq)
    attempts: list[str] = []
    done = asyncio.Event()

    @broker.subscriber(topic, group=unique_name("g"), consume_mode="pop",
                       consume_from_where=FIRST, settings={"invisible_duration": 10})  # fmt: skip
    async def handle(body: str) -> None:
        attempts.append(body)
        if len(attempts) == 1:
            raise RuntimeError("retry me")
        done.set()

    async with started(broker):
        await broker.publish("popped", topic)
        await asyncio.wait_for(done.wait(), 90)
    assert attempts == ["popped", "popped"]


async def test_priority_messages_overtake_a_backlog_for_a_pop_subscriber(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    topic = unique_name("prio")
    await rocketmq.create_topic(topic, queues=4, brokers=[rocketmq.state["proxy_broker"]],
                                message_type="PRIORITY")  # fmt: skip
    broker = remoting(rocketmq)
    urgent = broker.publisher(topic, priority=3)
    order: list[str] = []
    done = asyncio.Event()

    # One message cached at a time (as test_priority.py): the receive loops pop as the
    # handler takes messages, so the order is the broker's priority order pop by pop.
    # With the cache unbounded, both loops popped the backlog as fast as the broker
    # answered, and the handling order was the order the answers came in: on a loaded
    # machine an urgent pop slower than a few low ones put lows between the urgent
    # messages (urgent at 0, 4, 8, 9, 11 on main in 2 of 22 runs).
    @broker.subscriber(topic, group=unique_name("g"), consume_mode="pop", concurrency=1,
                       consume_from_where=FIRST,
                       settings={"pull_batch_size": 1, "long_poll_timeout": 3,
                                 "pull_threshold_for_all": 1})  # fmt: skip
    async def handle(body: str) -> None:
        order.append(body)
        if len(order) == 25:
            done.set()

    async with broker:
        for i in range(20):
            await broker.publish(f"low-{i}", topic, priority=0)
        for i in range(5):
            await urgent.publish(f"urgent-{i}")
        await broker.start()
        await asyncio.wait_for(done.wait(), 60)
    positions = [i for i, body in enumerate(order) if body.startswith("urgent")]
    # Two receive loops pop at once: while one holds the urgent queue's pop lock, the
    # broker hands the other a low message, so at most one low comes with each urgent
    # one (test_priority.py's bound; 8 was tighter than that: alternation gives 9).
    assert len(positions) == 5 and max(positions) < 2 * 5, order


async def grpc_broker(
    rocketmq: LocalRocketMQ, topic: str, group: str, *, queues: int, retry_max_times: int
) -> RocketBroker:
    """A broker on the Proxy, with ``topic`` on the Proxy's broker and ``group``."""
    await rocketmq.create_topic(topic, queues=queues, brokers=[rocketmq.state["proxy_broker"]])
    await rocketmq.create_group(group, retry_max_times=retry_max_times)
    return RocketBroker(proxy=rocketmq.proxy_grpc,
                        consumer_config=ConsumerConfig(long_poll_timeout=2.0))  # fmt: skip


async def test_the_grpc_transport_through_the_proxy(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    topic, group = unique_name("fsg"), unique_name("g")
    broker = await grpc_broker(rocketmq, topic, group, queues=2, retry_max_times=1)
    got: list[tuple[Order, str | None, dict[str, str]]] = []
    done = asyncio.Event()

    @broker.subscriber(topic, group=group, tags="paid")
    async def handle(order: Order, message: RocketMessage) -> None:
        got.append((order, message.raw_message.tags, dict(message.headers)))
        done.set()

    async with started(broker):
        await broker.publish(Order(id=3, amount=1.5), topic, tags="paid", headers={"h": "v"})
        await asyncio.wait_for(done.wait(), 60)
    order, tags, headers = got[0]
    assert order == Order(id=3, amount=1.5) and tags == "paid" and headers["h"] == "v"


async def test_over_grpc_a_nack_is_retried_and_a_reject_dead_lettered(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    topic, group = unique_name("fsg"), unique_name("g")
    broker = await grpc_broker(rocketmq, topic, group, queues=1, retry_max_times=3)
    calls: list[tuple[str, int]] = []

    @broker.subscriber(topic, group=group, settings={"invisible_duration": 10})
    async def handle(body: str, message: RocketMessage) -> None:
        calls.append((body, message.raw_message.reconsume_times))
        if body == "poison":
            raise RejectMessage
        if len([c for c in calls if c[0] == "flaky"]) == 1:
            raise RuntimeError("first attempt fails")

    async with started(broker), Admin(rocketmq.namesrv_addr) as admin:
        await broker.publish("poison", topic)
        await broker.publish("flaky", topic)

        async def settled() -> bool:
            dead = await admin.dead_letters(group)
            return len(dead) == 1 and ("flaky", 1) in calls

        await eventually(settled, timeout=90)
    (dead,) = await _dead_letters(rocketmq, group)
    assert dead.body == b"poison"
    assert calls.count(("poison", 0)) == 1 and len([c for c in calls if c[0] == "poison"]) == 1


def test_two_subscribers_of_one_group_are_refused_at_start() -> None:
    broker = RocketBroker("127.0.0.1:1")

    @broker.subscriber("a", group="same")
    async def one(body: str) -> None: ...

    @broker.subscriber("b", group="same")
    async def two(body: str) -> None: ...

    with pytest.raises(SetupError, match="consumer group 'same' has two subscribers"):
        asyncio.run(broker.start())


def test_bad_arguments_are_typed_errors_where_written() -> None:
    broker = RocketBroker("127.0.0.1:1")
    with pytest.raises(ConfigError, match="topic"):
        broker.subscriber("bad topic", group="g")
    with pytest.raises(ConfigError, match="group"):
        broker.subscriber("t", group="bad group")
    with pytest.raises(ConfigError, match="consume_concurrency"):
        broker.subscriber("t", group="g", concurrency=0)
    with pytest.raises(ConfigError, match="unknown consumer setting"):
        broker.subscriber("t", group="g", settings={"no_such": 1})
    with pytest.raises(ConfigError, match="consume_mode"):
        broker.subscriber("t", group="g", consume_mode="push")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="either namesrv"):
        RocketBroker("127.0.0.1:9876", proxy="127.0.0.1:8081")


async def test_broker_request_gets_the_subscribers_return_value(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    """FastStream's RPC is RocketMQ's request-reply (issue 44): ``broker.request`` is
    answered by a subscriber's return value, and so is a plain aiorocket requester."""
    topic, group = unique_name("fsrr"), unique_name("g")
    await rocketmq.create_topic(topic, queues=2)
    broker = remoting(rocketmq)

    @broker.subscriber(topic, group=group, consume_from_where=FIRST)
    async def price(order: Order) -> dict[str, float]:
        return {"price": order.amount * 1.5}

    async with started(broker):
        reply = await broker.request({"id": 1, "amount": 2}, topic, timeout=30)
        assert await reply.decode() == {"price": 3.0}
        async with Producer(unique_name("q"), rocketmq.namesrv_addr) as producer:
            raw = await producer.request(Message(topic, b'{"id": 2, "amount": 4}'), timeout=30)
        assert raw.body == b'{"price":6.0}'
        other = unique_name("fsrr")  # no subscriber answers it: a typed timeout
        await rocketmq.create_topic(other, queues=1)
        with pytest.raises(ReplyTimeoutError):
            await broker.request({"id": 3, "amount": 1}, other, timeout=1)
