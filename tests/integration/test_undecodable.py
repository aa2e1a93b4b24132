"""A message that cannot be decoded never stalls its queue (real broker).

Another producer may store a body that claims a compression it does not have, or
compression bits no client knows: the broker stores it as sent. The consumer must
deliver the messages around it, dead-letter it (the broker copies the raw record into
``%DLQ%<group>``), log it and move the queue on.
"""

from __future__ import annotations

from collections.abc import Callable

import anyio
import pytest

from aiorocket.client.broker import PULL_SUBSCRIPTION
from aiorocket.client.instance import ClientInstance
from aiorocket.client.results import PullStatus
from aiorocket.consumer import ConsumeFromWhere, Consumer, ConsumerMessage, PullConsumer
from aiorocket.consumer.pop.lite import LiteOffset
from aiorocket.message import Message, MessageQueue
from aiorocket.protocol.message_codec import UndecodableRecord
from aiorocket.testing.broker import LocalRocketMQ
from aiorocket.testing.logs import capture_logs

from ..unit.consumer_fakes import queues_of
from .helpers import eventually, send_raw, wait_dispatched
from .test_lite import lite_brokers, lite_setup  # noqa: F401 (a fixture)

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

FAST = {"persist_offset_interval": 0.2, "long_poll_timeout": 1.0, "pull_backoff_on_error": 0.2}
ZSTD, UNKNOWN_ALGORITHM = 0x1 | 2 << 8, 0x1 | 5 << 8  # COMPRESSED bit + algorithm bits


async def _store_good_bad_good(namesrv: str, topic: str) -> MessageQueue:
    """good-0, a ZSTD-flagged body that is no zstd frame, good-2, unknown algorithm, good-4."""
    async with ClientInstance(namesrv) as client:
        mq = (await client.namesrv.query_route(topic)).write_queues()[0]
        results = [
            await send_raw(client, mq, Message(topic, b"good-0")),
            await send_raw(client, mq, Message(topic, b"x"), sys_flag=ZSTD, body=b"not zstd"),
            await send_raw(client, mq, Message(topic, b"good-2")),
            await send_raw(client, mq, Message(topic, b"x"), sys_flag=UNKNOWN_ALGORITHM),
            await send_raw(client, mq, Message(topic, b"good-4")),
        ]
        await wait_dispatched(client, topic, results)
    return mq


async def _dead_letters(rocketmq: LocalRocketMQ, group: str) -> list[UndecodableRecord]:
    """The records in %DLQ%<group> (undecodable, as they were dead-lettered raw)."""
    found: list[UndecodableRecord] = []
    async with ClientInstance(rocketmq.namesrv_addr) as client:
        for addr in rocketmq.broker_addrs.values():
            mq = MessageQueue(f"%DLQ%{group}", "", 0)
            try:
                res = await client.broker.pull(
                    addr, "dlq-reader", mq, 0, sys_flag=PULL_SUBSCRIPTION, subscription="*",
                    suspend_timeout_ms=0, timeout=5, keep_undecodable=True,
                )  # fmt: skip
            except Exception:
                continue
            if res.status is PullStatus.FOUND:
                found += res.undecodable
    return found


async def test_undecodable_message_is_dead_lettered_and_the_queue_moves_on(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    topic, group = unique_name("t"), unique_name("g")
    await rocketmq.create_topic(topic, queues=1)
    mq = await _store_good_bad_good(rocketmq.namesrv_addr, topic)
    got: list[bytes] = []
    all_good = anyio.Event()

    async def handle(msg: ConsumerMessage) -> None:
        got.append(msg.body)
        if len(got) == 3:
            all_good.set()

    consumer = Consumer(group, rocketmq.namesrv_addr, handler=handle,
                        consume_from_where=ConsumeFromWhere.FIRST_OFFSET, **FAST)  # fmt: skip
    consumer.subscribe(topic)
    with capture_logs() as logs:
        async with consumer:
            with anyio.fail_after(30):
                await all_good.wait()
            pq = queues_of(consumer)[mq]
            await eventually(lambda: pq.tracker.committable() == 5, timeout=10)
            assert pq.undecodable_total == 2 and consumer.undecodable_messages == 2
            assert {s.queue: s.undecodable for s in consumer.stats()}[mq] == 2
    assert sorted(got) == [b"good-0", b"good-2", b"good-4"]
    events = [e for e in logs if e["event"] == "undecodable_message"]
    assert [(e["offset"], e["action"], e["topic"], e["queue"]) for e in events] == [
        (1, "dead_lettered", topic, mq.queue_id), (3, "dead_lettered", topic, mq.queue_id),
    ]  # fmt: skip
    assert all(e["msg_id"] and e["log_level"] == "error" for e in events)
    async with ClientInstance(rocketmq.namesrv_addr) as client:
        addr = (await client.namesrv.query_route(topic)).master_addr(mq.broker_name)
        assert addr is not None
        assert await client.broker.query_consumer_offset(addr, group, mq) == 5
    await eventually(lambda: _count_dead_letters(rocketmq, group, 2), timeout=30)


async def _count_dead_letters(rocketmq: LocalRocketMQ, group: str, want: int) -> bool:
    return len(await _dead_letters(rocketmq, group)) == want


async def test_pull_consumer_skips_past_an_undecodable_message(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    topic, group = unique_name("t"), unique_name("g")
    await rocketmq.create_topic(topic, queues=1)
    await _store_good_bad_good(rocketmq.namesrv_addr, topic)
    consumer = PullConsumer(group, rocketmq.namesrv_addr,
                            consume_from_where=ConsumeFromWhere.FIRST_OFFSET, **FAST)  # fmt: skip
    consumer.subscribe(topic)
    got: list[bytes] = []
    async with consumer:
        with anyio.fail_after(30):
            while len(got) < 3:
                for msgs in (await consumer.getmany(timeout=5)).values():
                    got += [m.body for m in msgs]
    assert got == [b"good-0", b"good-2", b"good-4"]


async def test_pop_consumer_dead_letters_an_undecodable_message_and_handles_the_rest(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    """POP over remoting: the records of a pop that cannot be decoded no longer fail the
    pop (the good messages were never handled); each is dead-lettered and acked with
    the check point the broker's answer lists for it."""
    topic, group = unique_name("t"), unique_name("g")
    await rocketmq.create_topic(topic, queues=1)
    mq = await _store_good_bad_good(rocketmq.namesrv_addr, topic)
    got: list[bytes] = []

    async def handle(msg: ConsumerMessage) -> None:
        got.append(msg.body)

    consumer = Consumer(group, rocketmq.namesrv_addr, handler=handle, consume_mode="pop",
                        consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
                        long_poll_timeout=1.0)  # fmt: skip
    consumer.subscribe(topic)
    with capture_logs() as logs:
        async with consumer:
            await eventually(lambda: consumer.undecodable_messages == 2 and len(got) == 3,
                             timeout=30)  # fmt: skip
    assert sorted(got) == [b"good-0", b"good-2", b"good-4"]
    events = [e for e in logs if e["event"] == "undecodable_message"]
    assert sorted((e["offset"], e["action"], e["topic"], e["queue"]) for e in events) == [
        (1, "dead_lettered", topic, mq.queue_id), (3, "dead_lettered", topic, mq.queue_id),
    ]  # fmt: skip
    assert not [e for e in logs if e["event"] in ("undecodable_not_settled", "receive_failed")]
    await eventually(lambda: _count_dead_letters(rocketmq, group, 2), timeout=30)


@pytest.mark.usefixtures("lite_brokers")
async def test_lite_consumer_dead_letters_an_undecodable_message_and_handles_the_rest(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    """A remoting lite consumer: a lite topic's record that cannot be decoded no longer
    fails every pop it is in (nothing of it was handled); it is dead-lettered and acked
    on its lite topic, which goes on, and the other lite topic's messages are handled."""
    topic, group = unique_name("lite"), unique_name("g")
    await lite_setup(rocketmq, topic, group)
    async with ClientInstance(rocketmq.namesrv_addr) as client:
        mq = (await client.namesrv.query_route(topic)).write_queues()[0]
        bad = Message(topic, b"x", lite_topic="a")
        results = [
            await send_raw(client, mq, Message(topic, b"a-0", lite_topic="a")),
            await send_raw(client, mq, bad, sys_flag=ZSTD, body=b"not zstd"),
            await send_raw(client, mq, Message(topic, b"a-2", lite_topic="a")),
            await send_raw(client, mq, Message(topic, b"b-0", lite_topic="b")),
        ]
        await wait_dispatched(client, topic, results)
    got: list[bytes] = []

    async def handle(msg: ConsumerMessage) -> None:
        got.append(msg.body)

    consumer = Consumer(group, rocketmq.namesrv_addr, handler=handle, bind_topic=topic,
                        long_poll_timeout=1.0)  # fmt: skip
    for lite_topic in ("a", "b"):
        await consumer.subscribe_lite(lite_topic, offset=LiteOffset.EARLIEST)
    with capture_logs() as logs:
        async with consumer:
            await eventually(lambda: consumer.undecodable_messages == 1 and len(got) == 3,
                             timeout=30)  # fmt: skip
    assert got.index(b"a-0") < got.index(b"a-2") and sorted(got) == [b"a-0", b"a-2", b"b-0"]
    [event] = [e for e in logs if e["event"] == "undecodable_message"]
    assert (event["offset"], event["action"]) == (1, "dead_lettered")
    assert not [e for e in logs if e["event"] in ("undecodable_not_settled", "receive_failed")]
