"""RocketMQService (aiorocket.integrations.service) against the real broker: readiness
waits for the first assignment, liveness notices a queue whose pulls stopped, and the
health report's lag is the broker's max offset minus the committed offset."""

from __future__ import annotations

from collections.abc import Callable

import anyio
import pytest

from aiorocket import Message
from aiorocket.consumer import ConsumeFromWhere, ConsumerMessage
from aiorocket.errors import ConfigError
from aiorocket.integrations.service import RocketMQService
from aiorocket.testing.broker import LocalRocketMQ

from .helpers import eventually

pytestmark = [pytest.mark.anyio, pytest.mark.integration]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the web frameworks' loop; the clients' trio support is tested elsewhere


async def test_ready_only_after_the_first_assignment(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    topic = unique_name("later")
    service = RocketMQService(rocketmq.namesrv_addr)

    @service.subscriber(
        topic, group=unique_name("g"), rebalance_interval=0.2, route_refresh_interval=0.2,
        long_poll_timeout=1.0, pull_request_timeout=6.0,
    )  # fmt: skip
    async def handle(msg: ConsumerMessage) -> None: ...

    assert not service.ready()
    async with service:
        # The topic has no route yet: the consumer runs but has no assignment.
        report = await service.health()
        assert report["ready"] is False and service.ready() is False
        assert report["consumers"][0]["joined"] is False and report["reasons"]

        def says_why() -> bool:  # once a rebalance pass looked for the topic
            return any(f"topic {topic!r} does not exist" in r for r in service.not_ready_reasons())

        await eventually(says_why)
        await rocketmq.create_topic(topic, queues=2)
        assert await service.wait_ready(timeout=30)
        (consumer,) = service.consumers
        assert {mq.topic for mq in consumer.assignment()} >= {topic}
        report = await service.health()
        assert report["ready"] is True and report["consumers"][0]["joined"] is True
        assert "reasons" not in report and service.not_ready_reasons() == []
        mine = [q for q in report["consumers"][0]["queues"] if q["topic"] == topic]
        assert len(mine) == 4  # 2 queues on each of the 2 brokers
    assert not service.ready()


async def test_lag_falls_to_zero_and_a_stuck_queue_is_not_live(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    topic = unique_name("orders")
    broker = sorted(rocketmq.broker_addrs)[0]
    await rocketmq.create_topic(topic, queues=1, brokers=[broker])
    release = anyio.Event()
    handled: list[bytes] = []
    service = RocketMQService(rocketmq.namesrv_addr, producer_group=unique_name("p"), stuck_after=8)

    @service.subscriber(
        topic, group=unique_name("g"), consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
        long_poll_timeout=1.0, pull_request_timeout=6.0, pull_threshold_for_queue=1,
        persist_offset_interval=0.5,
    )  # fmt: skip
    async def handle(msg: ConsumerMessage) -> None:
        if msg.body == b"block":
            await release.wait()
        handled.append(msg.body)

    async with service:
        assert await service.wait_ready(timeout=30)
        for i in range(5):
            await service.producer.send(Message(topic, b"%d" % i))
        await eventually(lambda: len(handled) == 5)

        async def lag() -> int:
            report = await service.health()
            queue = next(q for q in report["consumers"][0]["queues"] if q["topic"] == topic)
            assert report["lag"] >= queue["lag"]
            return int(queue["lag"])

        async def lag_is_zero() -> bool:
            return await lag() == 0

        await eventually(lag_is_zero, timeout=30)
        assert service.live()
        # A handler that hangs fills the queue's cache (1 message): no pull completes.
        await service.producer.send(Message(topic, b"block"))
        await service.producer.send(Message(topic, b"after"))
        await eventually(lambda: not service.live(), timeout=30)
        report = await service.health()
        assert report["live"] is False
        queue = next(q for q in report["consumers"][0]["queues"] if q["topic"] == topic)
        assert queue["in_flight"] == 1 and queue["lag"] == 2 and queue["pull_idle"] > 8
        release.set()
        await eventually(lambda: b"after" in handled, timeout=30)
        await eventually(service.live, timeout=30)
        await eventually(lag_is_zero, timeout=30)


def test_stuck_after_must_be_positive() -> None:
    with pytest.raises(ConfigError, match="stuck_after"):
        RocketMQService(stuck_after=0)


def test_one_consumer_per_group() -> None:
    service = RocketMQService("127.0.0.1:9876")

    @service.subscriber("a", group="same")
    async def one(msg: ConsumerMessage) -> None: ...

    with pytest.raises(ConfigError, match="declared twice"):

        @service.subscriber("b", group="same")
        async def two(msg: ConsumerMessage) -> None: ...


async def test_a_service_over_grpc_consumes_and_produces_through_the_proxy(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    """``proxy=``: the service's consumer and producer use gRPC; it is ready once the
    consumer's session is up (``wait_ready`` does not wait for a queue assignment)."""
    pytest.importorskip("grpclib")
    topic, group = unique_name("svc"), unique_name("g")
    await rocketmq.create_topic(topic, queues=2, brokers=[rocketmq.state["proxy_broker"]])
    await rocketmq.create_group(group)
    handled: list[bytes] = []
    service = RocketMQService(proxy=rocketmq.proxy_grpc, producer_group=unique_name("p"))

    @service.subscriber(topic, group=group, long_poll_timeout=2.0)
    async def handle(msg: ConsumerMessage) -> None:
        handled.append(msg.body)

    async with service:
        assert await service.wait_ready(timeout=30)
        (consumer,) = service.consumers
        assert consumer.transport == service.producer.transport == "grpc"
        await service.producer.send(Message(topic, b"over grpc"))
        await eventually(lambda: handled == [b"over grpc"])
        report = await service.health()
        assert report["ready"] and report["live"]
