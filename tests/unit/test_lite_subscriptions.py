"""Lite topics' pure logic: the name check, the message property, and the lite
subscription set (ordering, quota, what a failed update leaves)."""

from __future__ import annotations

from collections.abc import Collection

import anyio
import anyio.lowlevel
import pytest
from trio.testing import MockClock

from aiorocket import Message
from aiorocket._log import get_logger
from aiorocket._validate import check_lite_topic, check_schedule
from aiorocket.client.lite import lite_order_counts, lmq_name
from aiorocket.consumer.pop.lite import RESYNC_INTERVAL, LiteAction, LiteOffset, LiteSubscriptions
from aiorocket.errors import ConfigError, LiteQuotaExceededError, RequestTimeoutError, RocketMQError
from aiorocket.message import PROPERTY_LITE_TOPIC, MessageExt, MessageQueue
from aiorocket.producer.selectors import java_string_hash, jump_hash, lite_selector
from aiorocket.testing.sim.vloop import VirtualTimeLoop

pytestmark = pytest.mark.anyio


def test_lite_topic_names() -> None:
    check_lite_topic("room-42")
    check_lite_topic("x" * 64)
    check_lite_topic("User_1-x")
    for bad in ("", "  ", "a b", "a/b", "a.b", "a%b", "é", "x" * 65, None, 7):
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
        self.offsets: list[LiteOffset | None] = []
        self.fail: RocketMQError | None = None

    async def sync(
        self, action: LiteAction, topics: Collection[str], *, offset: LiteOffset | None = None
    ) -> None:
        await anyio.lowlevel.checkpoint()
        if self.fail is not None:
            err, self.fail = self.fail, None
            raise err
        self.updates.append((action, set(topics)))
        self.offsets.append(offset)


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


def test_lite_messages_are_neither_delayed_nor_prioritized() -> None:
    for kw in ({"delay_level": 2}, {"deliver_time_ms": 1}, {"priority": 1}):
        with pytest.raises(ConfigError, match="lite message"):
            check_schedule(Message("chat", b"hi", lite_topic="a", **kw))  # type: ignore[arg-type]


#: (lite topic, queues, Java's "x".hashCode(), Guava's Hashing.consistentHash(hash, n)),
#: printed by a Java program against guava-32.0.1 (the 5.5.0 broker's); the broker and
#: the Proxy shard lite topics with exactly this.
GUAVA = [
    ("a", 2, 97, 0), ("b", 2, 98, 0), ("c", 3, 99, 2), ("room-42", 4, 1379843248, 1),
    ("lite-0", 8, -1102495023, 3), ("lite-199", 16, 1359207794, 12), ("", 100, 0, 0),
    ("Ünïcode-😀", 8, -671387002, 4), ("user-123456", 100, 767015589, 41),
]


@pytest.mark.parametrize(("lite_topic", "n", "java_hash", "bucket"), GUAVA)
def test_lite_topics_shard_as_the_broker_does(
    lite_topic: str, n: int, java_hash: int, bucket: int
) -> None:
    assert java_string_hash(lite_topic) == java_hash
    assert jump_hash(java_hash, n) == bucket
    queues = [MessageQueue("chat", f"broker-{i // 4}", i % 4) for i in range(n)]
    if lite_topic:
        chosen = lite_selector(queues, Message("chat", b"x", lite_topic=lite_topic), None)
        assert chosen is queues[bucket]


def test_jump_hash_buckets() -> None:
    assert all(jump_hash(k, 1) == 0 for k in range(-50, 50))
    # Growing the buckets by one moves about 1/n of the keys, all to the new bucket.
    moved = [k for k in range(10_000) if jump_hash(k, 10) != jump_hash(k, 11)]
    assert all(jump_hash(k, 11) == 10 for k in moved) and 700 < len(moved) < 1100
    with pytest.raises(ValueError):
        jump_hash(1, 0)


def test_order_counts_of_a_lite_pop() -> None:
    assert lite_order_counts("0;2;1", 3) == [0, 2, 1]
    assert lite_order_counts("", 2) == [0, 0]
    assert lite_order_counts(None, 1) == [0]
    assert lite_order_counts("3", 2) == [3, 0]
    assert lmq_name("chat", "room-1") == "%LMQ%$chat$room-1"


async def test_start_offsets() -> None:
    lite, server = subs(), Server()
    await lite.subscribe("a", LiteOffset.EARLIEST)  # before the start: sent after the resync
    await lite.subscribe("b")
    lite.attach(server.sync)
    await lite.resync()
    await lite.resync()  # the offset was sent once
    assert server.updates == [
        (LiteAction.COMPLETE_ADD, {"a", "b"}),
        (LiteAction.PARTIAL_ADD, {"a"}),
        (LiteAction.COMPLETE_ADD, {"a", "b"}),
    ]
    assert server.offsets == [None, LiteOffset("POLICY", 1), None]
    await lite.subscribe("b", LiteOffset.tail(5))  # subscribed already: nothing sent
    assert len(server.updates) == 3
    await lite.unsubscribe("b")
    await lite.subscribe("b", LiteOffset.tail(5))
    assert server.updates[-1] == (LiteAction.PARTIAL_ADD, {"b"})
    assert server.offsets[-1] == LiteOffset("TAIL_N", 5)
    assert LiteOffset.at(7) == LiteOffset("OFFSET", 7)
    assert LiteOffset.since(1_700_000_000_000).kind == "TIMESTAMP"
    for bad in (lambda: LiteOffset.tail(-1), lambda: LiteOffset("NEXT", 1)):
        with pytest.raises(ConfigError):
            bad()


#: virtual time on both backends: the loop's clock moves only when every task waits, so
#: the times the resync loop keeps are exact whatever the machine's load
VIRTUAL = pytest.mark.parametrize("anyio_backend", [
    pytest.param(("asyncio", {"loop_factory": VirtualTimeLoop}), id="asyncio-virtual"),
    pytest.param(("trio", {"clock": MockClock(autojump_threshold=0)}), id="trio-virtual"),
])  # fmt: skip


@VIRTUAL
async def test_a_resync_asked_again_is_sent_at_once_and_at_each_time_asked() -> None:
    """``resync_soon(again)``: the whole set at once, then again at each of those times
    (a Proxy that drops the subscriptions after the reconnect's resync: the gRPC
    source's RESYNC_AFTER_RECONNECT), then only at the interval; a later call replaces
    the times. On a virtual clock: the send times are exact (on the wall clock a starved
    run's first resync ended past the 0.2 s time, which it then counted as sent: two
    sends where the test waited for three)."""
    lite, server = subs(), Server()
    await lite.subscribe("a")
    sent: list[float] = []

    async def sync(action: LiteAction, topics: Collection[str], *,
                   offset: LiteOffset | None = None) -> None:  # fmt: skip
        await server.sync(action, topics, offset=offset)
        sent.append(anyio.current_time())

    lite.attach(sync)
    async with anyio.create_task_group() as tg:
        tg.start_soon(lite.run)
        start = anyio.current_time()
        lite.resync_soon((0.2, 0.5))
        await anyio.sleep(RESYNC_INTERVAL - 1)
        assert [round(at - start, 6) for at in sent] == [0, 0.2, 0.5]  # not the interval yet
        again = anyio.current_time()
        lite.resync_soon((0.2,))
        lite.resync_soon(())  # replaces the times: at once only
        await anyio.sleep(RESYNC_INTERVAL + 1)
        # at once, then the interval's (none at the replaced 0.2 s)
        assert [round(at - again, 6) for at in sent[3:]] == [0, RESYNC_INTERVAL]
        tg.cancel_scope.cancel()
    assert server.updates == [(LiteAction.COMPLETE_ADD, {"a"})] * 5


class LaggingServer:
    """Applies a COMPLETE_ADD after a lag (as a Proxy's or broker's request pool may
    apply it after a request sent later), the other updates at once; ``lagging`` is
    set when a COMPLETE_ADD has come."""

    def __init__(self) -> None:
        self.applied: list[LiteAction] = []
        self.lagging = anyio.Event()

    async def sync(
        self, action: LiteAction, topics: Collection[str], *, offset: LiteOffset | None = None
    ) -> None:
        if action is LiteAction.COMPLETE_ADD:
            self.lagging.set()
            await anyio.sleep(0.05)  # the server's lag, before it answers
        self.applied.append(action)


async def test_the_close_unsubscribes_after_a_resync_in_flight_is_answered() -> None:
    """A periodic resync's COMPLETE_ADD is in flight when the close drops the lite
    subscriptions: the COMPLETE_REMOVE goes once the add is answered, not alongside it,
    so the server applies it last and does not keep the closing client subscribed (a
    lite message the close then releases would be announced to it, and a receive the
    close cut that the Proxy still holds would take it: invisible for 30 s)."""
    from types import SimpleNamespace

    from aiorocket.consumer.pop.runtime import PopRuntime

    lite, server = subs(), LaggingServer()
    await lite.subscribe("a")
    lite.attach(server.sync)
    runtime = PopRuntime.__new__(PopRuntime)
    runtime.state = SimpleNamespace(  # type: ignore[assignment]
        lite=lite, config=SimpleNamespace(request_timeout=1.0), log=get_logger("test")
    )
    runtime.source = SimpleNamespace(sync_lite=server.sync)  # type: ignore[assignment]
    async with anyio.create_task_group() as tg:
        tg.start_soon(lite.resync)
        with anyio.fail_after(5):
            await server.lagging.wait()
            await runtime._detach_lite()
    assert server.applied == [LiteAction.COMPLETE_ADD, LiteAction.COMPLETE_REMOVE]
    assert not lite.attached


@pytest.mark.parametrize("failing", [0, 1])
async def test_a_failed_start_removes_what_it_may_have_subscribed(failing: int) -> None:
    """The start's COMPLETE_ADD (``failing`` 0) or the start offset's PARTIAL_ADD after
    it (1: the COMPLETE_ADD went through) fails: the start fails, and first sends a
    COMPLETE_REMOVE of this client id, as the close does. Before, nothing was removed:
    the failed start's client id kept (or, its request applied late, got) the lite
    topics on the brokers for minutes, beside the next start's client id; in an
    exclusive group a late add of it took them from that one (simulator lite_remoting
    4244)."""
    from types import SimpleNamespace

    from aiorocket.consumer.pop.runtime import PopRuntime

    lite = subs()
    await lite.subscribe("a", LiteOffset.EARLIEST)
    updates: list[LiteAction] = []

    async def sync(
        action: LiteAction, topics: Collection[str], *, offset: LiteOffset | None = None
    ) -> None:
        await anyio.lowlevel.checkpoint()
        updates.append(action)
        if len(updates) == failing + 1:
            raise RequestTimeoutError("no answer within 3.0s")

    runtime = PopRuntime.__new__(PopRuntime)
    runtime.state = SimpleNamespace(  # type: ignore[assignment]
        lite=lite, config=SimpleNamespace(request_timeout=1.0), log=get_logger("test")
    )
    runtime.source = SimpleNamespace(sync_lite=sync)  # type: ignore[assignment]
    with pytest.raises(RocketMQError):
        await runtime._attach_lite()
    sent = [LiteAction.COMPLETE_ADD, LiteAction.PARTIAL_ADD][: failing + 1]
    assert updates == [*sent, LiteAction.COMPLETE_REMOVE]
    assert not lite.attached
