"""TestRocketBroker: the same test code in memory and, with ``with_real=True``, against
the real broker (FastStream's convention): what a handler gets (body, headers, tags,
keys), tag filtering, publishers' mocks, and what only memory offers (a handler's
exception reaching the test, request-reply)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import anyio
import pytest
from faststream.exceptions import IncorrectState, NackMessage, SetupError
from faststream.message import AckStatus
from pydantic import BaseModel

from aiorocket.errors import ConfigError
from aiorocket.faststream import RocketBroker, RocketMessage, TestRocketBroker
from aiorocket.testing.broker import LocalRocketMQ
from tests.integration.faststream_helpers import FAST, FIRST
from tests.integration.helpers import eventually


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # FastStream runs on asyncio


class Order(BaseModel):
    id: int


@pytest.fixture(params=["memory", "real"])
def setup(
    request: pytest.FixtureRequest, unique_name: Callable[[str], str]
) -> Iterator[tuple[RocketBroker, bool, Callable[[str], str]]]:
    """A broker (on the real cluster for "real") and a maker of topics that exist there."""
    if request.param == "memory":
        yield RocketBroker(), False, unique_name
        return
    request.applymarker(pytest.mark.integration)
    rocketmq: LocalRocketMQ = request.getfixturevalue("rocketmq")

    def topic(prefix: str) -> str:
        name = unique_name(prefix)
        anyio.run(rocketmq.create_topic, name, 2)
        return name

    yield RocketBroker(rocketmq.namesrv_addr, consumer_config=FAST), True, topic


def test_handlers_get_body_headers_tags_and_keys_and_publishers_are_recorded(
    setup: tuple[RocketBroker, bool, Callable[[str], str]], unique_name: Callable[[str], str]
) -> None:
    broker, real, topic = setup
    orders, shipped = topic("orders"), topic("shipped")
    seen: list[tuple[int, str | None, list[str], str]] = []
    done = asyncio.Event()

    @broker.subscriber(orders, group=unique_name("g"), tags="paid", consume_from_where=FIRST)
    @broker.publisher(shipped, tags="shipped")
    async def ship(order: Order, message: RocketMessage) -> dict[str, Any]:
        raw = message.raw_message
        seen.append((order.id, raw.tags, raw.keys, message.headers["tenant"]))
        return {"shipped": order.id}

    @broker.subscriber(shipped, group=unique_name("g"), consume_from_where=FIRST)
    async def notify(body: dict[str, Any]) -> None:
        done.set()

    async def scenario() -> None:
        async with TestRocketBroker(broker, with_real=real) as br:
            await br.publish(Order(id=2), orders, tags="draft")  # not this tag
            await br.publish(Order(id=1), orders, tags="paid", keys=["o-1"],
                             headers={"tenant": "acme"})  # fmt: skip
            await ship.wait_call(timeout=30)
            await asyncio.wait_for(done.wait(), 30)
            ship.mock.assert_called_once_with({"id": 1})
            notify.mock.assert_called_once_with({"shipped": 1})
        assert seen == [(1, "paid", ["o-1"], "acme")]

    anyio.run(scenario)


def test_a_publisher_without_subscribers_is_recorded(
    setup: tuple[RocketBroker, bool, Callable[[str], str]],
) -> None:
    """With no subscriber of its topic the test broker gives the publisher one (on the
    real broker: a group of its own reading from the test's start)."""
    broker, real, topic = setup
    events = topic("events")
    publisher = broker.publisher(events, tags="audit")

    async def scenario() -> None:
        async with TestRocketBroker(broker, with_real=real):
            await publisher.publish({"event": "created"}, keys=["e-1"])
            # the real broker's delivery has no event to await from here: polled
            await eventually(lambda: publisher.mock.call_count == 1, timeout=60)
            publisher.mock.assert_called_once_with({"event": "created"})

    anyio.run(scenario)


@pytest.mark.anyio
async def test_in_memory_a_handlers_exception_reaches_the_test() -> None:
    broker = RocketBroker()

    @broker.subscriber("orders", group="g")
    async def handle(order: Order) -> None:
        raise LookupError(f"no order {order.id}")

    async with TestRocketBroker(broker) as br:
        with pytest.raises(LookupError, match="no order 9"):
            await br.publish({"id": 9}, "orders")


@pytest.mark.anyio
async def test_in_memory_two_subscribers_of_one_group_fail_as_the_real_start() -> None:
    """The real start refuses them (SetupError): the in-memory broker too, before any
    handler runs (it had both handlers get every message, as two groups)."""
    broker = RocketBroker("127.0.0.1:1")

    @broker.subscriber("orders", group="billing")
    async def orders(body: str) -> None: ...

    @broker.subscriber("refunds", group="billing")
    async def refunds(body: str) -> None: ...

    with pytest.raises(SetupError, match="consumer group 'billing' has two subscribers"):
        async with TestRocketBroker(broker):
            pass
    with pytest.raises(SetupError, match="consumer group 'billing' has two subscribers"):
        await broker.start()  # nothing listens at 127.0.0.1:1: refused before connecting
    await broker.stop()


@pytest.mark.anyio
async def test_bad_publishes_are_typed_errors() -> None:
    broker = RocketBroker()

    @broker.subscriber("orders", group="g")
    async def handle(body: str) -> None: ...

    async with TestRocketBroker(broker) as br:
        with pytest.raises(ConfigError, match="header 'x': a RocketMQ property is a string"):
            await br.publish("a", "orders", headers={"x": {"nested": 1}})
        with pytest.raises(ConfigError, match="delay must be >= 0"):
            await br.publish("a", "orders", delay=-1)
        with pytest.raises(ConfigError, match="body must not be empty"):
            await br.publish(None, "orders")
        handle.mock.assert_not_called()


@pytest.mark.anyio
async def test_nack_message_with_a_delay_level_in_memory() -> None:
    """``raise NackMessage(delay_level=3)`` reaches the message's nack (a no-op in memory,
    the handler's outcome on a real broker): the message is marked nacked."""
    broker = RocketBroker()
    states: list[Any] = []

    @broker.subscriber("orders", group="g")
    async def handle(body: str, message: RocketMessage) -> None:
        states.append(message)
        raise NackMessage(delay_level=3)

    async with TestRocketBroker(broker) as br:
        await br.publish("a", "orders")
    assert states[0].committed is AckStatus.NACKED


@pytest.mark.anyio
async def test_request_reply_in_memory() -> None:
    broker = RocketBroker()

    @broker.subscriber("prices", group="pricing")
    async def price(order: Order) -> dict[str, float]:
        return {"price": order.id * 1.5}

    async with TestRocketBroker(broker) as br:
        reply = await br.request({"id": 2}, "prices")
        assert await reply.decode() == {"price": 3.0}
    with pytest.raises(IncorrectState, match="not connected"):  # the real one: see
        await broker.request({"id": 2}, "prices")  # test_faststream_broker.py
