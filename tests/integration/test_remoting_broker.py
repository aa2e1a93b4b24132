"""The remoting client against the real broker: route, send, pull by offset, offsets, search."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from aiorocket.client.broker import PULL_SUBSCRIPTION
from aiorocket.client.instance import ClientInstance
from aiorocket.client.results import PullStatus
from aiorocket.errors import TopicNotExistError
from aiorocket.message import Message, MessageQueue
from aiorocket.protocol.message_codec import CompressionType, compress_body
from aiorocket.testing.broker import LocalRocketMQ

from .helpers import eventually, send_raw


async def _max_is(client: ClientInstance, addr: str, mq: MessageQueue, n: int) -> bool:
    return await client.broker.get_max_offset(addr, mq) == n


pytestmark = [pytest.mark.anyio, pytest.mark.integration]


async def test_route_lists_both_brokers(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    topic = unique_name("route")
    await rocketmq.create_topic(topic, queues=4)
    async with ClientInstance(rocketmq.namesrv_addr) as client:
        route = await client.namesrv.query_route(topic)
        assert set(route.all_master_addrs()) == set(rocketmq.broker_addrs)
        assert route.all_master_addrs() == rocketmq.broker_addrs
        assert len(route.read_queues()) == 4 * len(rocketmq.broker_addrs)
        assert len(route.write_queues()) == 4 * len(rocketmq.broker_addrs)
        with pytest.raises(TopicNotExistError):
            await client.namesrv.query_route(unique_name("missing"))


async def test_send_then_pull_back_by_offset(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    topic = unique_name("sendpull")
    await rocketmq.create_topic(topic, queues=2)
    async with ClientInstance(rocketmq.namesrv_addr) as client:
        route = await client.namesrv.query_route(topic)
        mq = route.write_queues()[-1]
        addr = route.master_addr(mq.broker_name)
        assert addr is not None
        sent = []
        for i in range(10):
            msg = Message(
                topic,
                f"body-{i}".encode() * (i + 1),
                tags=f"tag{i % 2}",
                keys=[f"key{i}", "common"],
                properties={"n": str(i), "unicode": "zażółć 😀"},
            )
            result = await send_raw(client, mq, msg)
            assert result.queue == mq
            sent.append((msg, result))
        assert [r.queue_offset for _, r in sent] == list(range(10))
        assert await client.broker.get_min_offset(addr, mq) == 0
        # The consume queue is built asynchronously after the commit log write.
        await eventually(lambda: _max_is(client, addr, mq, 10))

        pulled = await client.broker.pull(
            addr, unique_name("g"), mq, 3, max_nums=32, sys_flag=PULL_SUBSCRIPTION,
            subscription="*", suspend_timeout_ms=0, timeout=10,
        )  # fmt: skip
        assert pulled.status is PullStatus.FOUND
        assert pulled.next_begin_offset == 10
        assert [m.queue_offset for m in pulled.messages] == list(range(3, 10))
        for m in pulled.messages:
            msg, result = sent[m.queue_offset]
            assert m.body == msg.body
            assert m.topic == topic and m.queue_id == mq.queue_id
            assert m.broker_name == mq.broker_name
            assert m.tags == msg.tags
            assert m.keys == [f"key{m.queue_offset}", "common"]
            assert m.properties["n"] == str(m.queue_offset)
            assert m.properties["unicode"] == "zażółć 😀"
            assert m.msg_id == result.msg_id
            assert m.offset_msg_id == result.offset_msg_id
            assert m.store_timestamp >= m.born_timestamp > 0

        empty = await client.broker.pull(
            addr, unique_name("g"), mq, 10, sys_flag=PULL_SUBSCRIPTION, subscription="*",
            suspend_timeout_ms=0, timeout=10,
        )  # fmt: skip
        assert empty.status is PullStatus.NO_NEW_MSG
        illegal = await client.broker.pull(
            addr, unique_name("g"), mq, 1000, sys_flag=PULL_SUBSCRIPTION, subscription="*",
            suspend_timeout_ms=0, timeout=10,
        )  # fmt: skip
        assert illegal.status is PullStatus.OFFSET_ILLEGAL
        assert illegal.next_begin_offset == 10


async def test_compressed_body_is_decompressed(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    topic = unique_name("zip")
    await rocketmq.create_topic(topic, queues=1)
    body = b"compress me " * 1000
    async with ClientInstance(rocketmq.namesrv_addr) as client:
        route = await client.namesrv.query_route(topic)
        mq = route.write_queues()[0]
        addr = route.master_addr(mq.broker_name)
        assert addr is not None
        for ctype in (CompressionType.ZLIB, CompressionType.LZ4, CompressionType.ZSTD):
            await send_raw(
                client, mq, Message(topic, body), sys_flag=0x1 | (int(ctype) << 8),
                body=compress_body(body, ctype),
            )  # fmt: skip
        assert mq is not None
        await eventually(lambda: _max_is(client, addr, mq, 3))
        pulled = await client.broker.pull(
            addr, unique_name("g"), mq, 0, sys_flag=PULL_SUBSCRIPTION, subscription="*",
            suspend_timeout_ms=0, timeout=10,
        )  # fmt: skip
        assert [m.body for m in pulled.messages] == [body] * 3


async def test_consumer_offset_round_trip(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    topic = unique_name("offsets")
    group = unique_name("g")
    await rocketmq.create_topic(topic, queues=2)
    await rocketmq.create_group(group)  # 5.x refuses offsets of unknown groups
    async with ClientInstance(rocketmq.namesrv_addr) as client:
        route = await client.namesrv.query_route(topic)
        for mq in route.read_queues():
            addr = route.master_addr(mq.broker_name)
            assert addr is not None
            for _ in range(3):
                await send_raw(client, mq, Message(topic, b"x"))
            assert await client.broker.query_consumer_offset(addr, group, mq) is None
            await client.broker.update_consumer_offset(addr, group, mq, 2)
            assert await client.broker.query_consumer_offset(addr, group, mq) == 2
            await client.broker.update_consumer_offset(addr, group, mq, 3)
            assert await client.broker.query_consumer_offset(addr, group, mq) == 3


async def test_search_offset_by_timestamp(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    topic = unique_name("search")
    await rocketmq.create_topic(topic, queues=1)
    async with ClientInstance(rocketmq.namesrv_addr) as client:
        route = await client.namesrv.query_route(topic)
        mq = route.write_queues()[0]
        addr = route.master_addr(mq.broker_name)
        assert addr is not None
        for i in range(20):
            await send_raw(client, mq, Message(topic, str(i).encode()))
        await eventually(lambda: _max_is(client, addr, mq, 20))
        pulled = await client.broker.pull(
            addr, unique_name("g"), mq, 0, sys_flag=PULL_SUBSCRIPTION, subscription="*",
            suspend_timeout_ms=0, timeout=10,
        )  # fmt: skip
        stamps = [m.store_timestamp for m in pulled.messages]
        assert len(stamps) == 20
        for probe in sorted({stamps[0], stamps[7], stamps[-1]}):
            expected = min(i for i, ts in enumerate(stamps) if ts >= probe)
            assert await client.broker.search_offset(addr, mq, probe) == expected
        assert await client.broker.search_offset(addr, mq, stamps[0] - 60_000) == 0


async def test_heartbeat_consumer_list_and_unregister(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    topic = unique_name("hb")
    group = unique_name("g")
    await rocketmq.create_topic(topic, queues=1)
    async with ClientInstance(rocketmq.namesrv_addr) as client:
        route = await client.namesrv.query_route(topic)
        addr = next(iter(route.all_master_addrs().values()))
        assert await client.broker.get_consumer_ids(addr, group) == []
        data = {
            "clientID": client.client_id,
            "producerDataSet": [],
            "consumerDataSet": [
                {
                    "groupName": group,
                    "consumeType": "CONSUME_PASSIVELY",
                    "messageModel": "CLUSTERING",
                    "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                    "subscriptionDataSet": [
                        {"classFilterMode": False, "topic": topic, "subString": "*", "tagsSet": [],
                         "codeSet": [], "subVersion": 1, "expressionType": "TAG"}
                    ],
                    "unitMode": False,
                }
            ],
            "heartbeatFingerprint": 0,
        }  # fmt: skip
        await client.broker.heartbeat(addr, data)
        assert await client.broker.get_consumer_ids(addr, group) == [client.client_id]
        await client.broker.unregister_client(addr, client.client_id, consumer_group=group)
        assert await client.broker.get_consumer_ids(addr, group) == []


async def test_create_topic_over_remoting(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    topic = unique_name("created")
    async with ClientInstance(rocketmq.namesrv_addr) as client:
        for addr in rocketmq.broker_addrs.values():
            await client.broker.create_topic(addr, topic, read_queues=3, write_queues=3)

        # The NameServer learns about it when the brokers re-register: poll for the route.
        async def visible() -> bool:
            try:
                route = await client.namesrv.query_route(topic)
            except TopicNotExistError:
                return False
            return len(route.read_queues()) == 3 * len(rocketmq.broker_addrs)

        await eventually(visible, timeout=60)
        mq: MessageQueue = (await client.namesrv.query_route(topic)).write_queues()[0]
        result = await send_raw(client, mq, Message(topic, b"hello"))
        assert result.queue_offset == 0
