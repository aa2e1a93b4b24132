"""Lite topics' pure logic: the name check, the message property, and the lite
subscription set (ordering, quota, what a failed update leaves)."""

from __future__ import annotations

from collections.abc import Collection

import anyio
import anyio.lowlevel
import pytest

from aiorocket import Message
from aiorocket._log import get_logger
from aiorocket._validate import check_lite_topic, check_schedule
from aiorocket.consumer.pop.lite import LiteAction, LiteSubscriptions
from aiorocket.errors import ConfigError, LiteQuotaExceededError, RocketMQError
from aiorocket.message import PROPERTY_LITE_TOPIC, MessageExt

pytestmark = pytest.mark.anyio


def test_lite_topic_names() -> None:
    check_lite_topic("room-42")
    check_lite_topic("x" * 64)
    for bad in ("", "  ", "a b", "x" * 65, None, 7):
        with pytest.raises(ConfigError):
            check_lite_topic(bad)
    with pytest.raises(ConfigError):
        check_lite_topic("x" * 11, max_length=10)


def test_message_carries_its_lite_topic() -> None:
    msg = Message("chat", b"hi", lite_topic="room-1")
    assert msg.wire_properties()[PROPERTY_LITE_TOPIC] == "room-1"
    assert PROPERTY_LITE_TOPIC not in Message("chat", b"hi").wire_properties()
    with pytest.raises(ConfigError):
        check_schedule(Message("chat", b"hi", lite_topic="a b"))
    ext = MessageExt("chat", b"hi", {PROPERTY_LITE_TOPIC: "room-1"}, 0, 0, 0)
    assert ext.lite_topic == "room-1"
    assert MessageExt("chat", b"hi", {}, 0, 0, 0).lite_topic is None


class Server:
    """Records the updates; fails the next one when told to."""

    def __init__(self) -> None:
        self.updates: list[tuple[LiteAction, set[str]]] = []
        self.fail: RocketMQError | None = None

    async def sync(self, action: LiteAction, topics: Collection[str]) -> None:
        await anyio.lowlevel.checkpoint()
        if self.fail is not None:
            err, self.fail = self.fail, None
            raise err
        self.updates.append((action, set(topics)))


def subs() -> LiteSubscriptions:
    return LiteSubscriptions("chat", get_logger("test"))


async def test_changes_before_the_start_wait_for_it() -> None:
    lite, server = subs(), Server()
    await lite.subscribe("a")
    await lite.subscribe("b")
    await lite.unsubscribe("a")
    assert lite.topics == {"b"} and server.updates == []
    lite.attach(server.sync)
    await lite.resync()
    assert server.updates == [(LiteAction.COMPLETE_ADD, {"b"})]


async def test_changes_after_the_start_are_sent_one_at_a_time_in_order() -> None:
    lite, server = subs(), Server()
    lite.attach(server.sync)
    async with anyio.create_task_group() as tg:
        tg.start_soon(lite.subscribe, "a")
        await anyio.lowlevel.checkpoint()
        tg.start_soon(lite.unsubscribe, "a")
    assert server.updates == [
        (LiteAction.PARTIAL_ADD, {"a"}),
        (LiteAction.PARTIAL_REMOVE, {"a"}),
    ]
    assert lite.topics == frozenset()
    await lite.subscribe("b")
    await lite.subscribe("b")  # already there: nothing sent
    await lite.unsubscribe("zzz")  # not there: nothing sent
    assert server.updates[2:] == [(LiteAction.PARTIAL_ADD, {"b"})]


async def test_a_refused_update_changes_nothing() -> None:
    lite, server = subs(), Server()
    lite.attach(server.sync)
    server.fail = LiteQuotaExceededError("quota")
    with pytest.raises(LiteQuotaExceededError):
        await lite.subscribe("a")
    assert lite.topics == frozenset()
    await lite.subscribe("a")
    server.fail = RocketMQError("network")
    with pytest.raises(RocketMQError):
        await lite.unsubscribe("a")
    assert lite.topics == {"a"}


async def test_the_known_quota_is_checked_before_sending() -> None:
    lite, server = subs(), Server()
    lite.attach(server.sync)
    lite.quota = 2
    await lite.subscribe("a")
    await lite.subscribe("b")
    with pytest.raises(LiteQuotaExceededError):
        await lite.subscribe("c")
    assert len(server.updates) == 2 and lite.topics == {"a", "b"}
    lite.max_length = 3
    with pytest.raises(ConfigError):
        await lite.subscribe("long")


def test_the_server_may_drop_a_lite_topic() -> None:
    lite = subs()
    lite._topics.update({"a", "b"})
    lite.on_unsubscribed("a")
    lite.on_unsubscribed("unknown")
    assert lite.topics == {"b"}
