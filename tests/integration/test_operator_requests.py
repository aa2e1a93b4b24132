"""Operators' tools see an aiorocket consumer as a Java one: running info, offset resets
while it runs, consume-directly (through the broker, from aiorocket.admin and mqadmin)."""

from __future__ import annotations

from collections.abc import Callable

import anyio
import pytest

from aiorocket.admin import Admin
from aiorocket.consumer import ConsumeFromWhere, Consumer, ConsumerMessage
from aiorocket.message import Message
from aiorocket.producer import Producer
from aiorocket.protocol import fastjson
from aiorocket.testing.broker import LocalRocketMQ

from .helpers import eventually

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

FAST = {"persist_offset_interval": 0.2, "long_poll_timeout": 1.0, "pull_request_timeout": 8.0}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def send(namesrv: str, topic: str, bodies: list[bytes]) -> None:
    async with Producer("ops-p", namesrv) as producer:
        for body in bodies:
            await producer.send(Message(topic, body, tags="t"))


async def test_running_info_and_reset_while_consuming(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    topic, group = unique_name("ops"), unique_name("g")
    await rocketmq.create_topic(topic, queues=2)
    bodies = [b"m%d" % i for i in range(10)]
    await send(rocketmq.namesrv_addr, topic, bodies)
    got: list[bytes] = []

    async def handle(msg: ConsumerMessage) -> None:
        got.append(msg.body)

    consumer = Consumer(group, rocketmq.namesrv_addr, handler=handle,
                        consume_from_where=ConsumeFromWhere.FIRST_OFFSET, **FAST)  # fmt: skip
    consumer.subscribe(topic, "t")
    async with consumer, Admin(rocketmq.namesrv_addr) as admin:

        async def lag() -> int:
            return (await admin.lag(group, topic)).total

        await eventually(lambda: len(got) >= 10)
        await eventually(lambda: _is(lag, 0))

        described = await admin.describe_group(group)
        (member,) = described.members
        assert member.client_id == consumer.client.client_id
        assert set(member.assignment or []) == consumer.assignment()
        info = await admin.requests.consumer_running_info(
            rocketmq.broker_addrs["broker-a"], group, consumer.client.client_id
        )
        assert {s["topic"]: s["subString"] for s in info["subscriptionSet"]}[topic] == "t"
        assert info["properties"]["PROP_CONSUME_TYPE"] == "CONSUME_PASSIVELY"
        table = {fastjson.queue_of(k): v for k, v in info["mqTable"].items()}
        assert {mq for mq in table if mq.topic == topic} == {
            mq for mq in consumer.assignment() if mq.topic == topic
        }
        assert sum(v["commitOffset"] for mq, v in table.items() if mq.topic == topic) == 10

        # Reset while it runs: it reads everything again, and its commits do not undo it.
        await admin.reset_offset(group, topic, "earliest")
        await eventually(lambda: len(got) >= 20)
        assert sorted(got[10:]) == sorted(bodies)
        await eventually(lambda: _is(lag, 0))
        await send(rocketmq.namesrv_addr, topic, [b"after"])
        await eventually(lambda: b"after" in got)
        assert len(got) == 21


async def _is(fn: Callable[[], object], value: object) -> bool:
    return await fn() == value  # type: ignore[misc]


async def test_consume_directly_runs_the_handler_and_commits_nothing(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    topic, group = unique_name("ops"), unique_name("g")
    await rocketmq.create_topic(topic, queues=1)
    seen: list[bytes] = []

    async def handle(msg: ConsumerMessage) -> None:
        seen.append(msg.body)
        if msg.body == b"boom":
            raise ValueError("boom")

    consumer = Consumer(group, rocketmq.namesrv_addr, handler=handle, **FAST)  # from new ones
    consumer.subscribe(topic)
    async with Producer("ops-p", rocketmq.namesrv_addr) as producer:
        old = await producer.send(Message(topic, b"old one"))  # before the consumer: not its
        boom = await producer.send(Message(topic, b"boom"))
    async with consumer, Admin(rocketmq.namesrv_addr) as admin:
        client_id = consumer.client.client_id
        result = await admin.consume_directly(group, client_id, old.offset_msg_id)
        assert result["consumeResult"] == "CR_SUCCESS" and seen == [b"old one"]
        result = await admin.consume_directly(group, client_id, boom.offset_msg_id)
        assert result["consumeResult"] == "CR_THROW_EXCEPTION" and "boom" in result["remark"]
        lag = await admin.lag(group, topic)
        assert lag.total == 0 or all(q.committed <= 0 for q in lag.queues)


async def test_broker_reset_request_restarts_the_queues(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    """RESET_CONSUMER_CLIENT_OFFSET as a broker with useServerSideResetOffset=false sends
    it (the shared broker resets server-side, so the request is handed to the consumer's
    dispatcher here, as the connection would): cached messages are dropped, the queues
    restart at the offsets, everything is read again and committed."""
    from aiorocket.protocol.codes import RequestCode
    from aiorocket.protocol.command import RemotingCommand

    topic, group = unique_name("ops"), unique_name("g")
    await rocketmq.create_topic(topic, queues=2)
    bodies = [b"r%d" % i for i in range(8)]
    await send(rocketmq.namesrv_addr, topic, bodies)
    got: list[bytes] = []

    async def handle(msg: ConsumerMessage) -> None:
        got.append(msg.body)

    consumer = Consumer(group, rocketmq.namesrv_addr, handler=handle,
                        consume_from_where=ConsumeFromWhere.FIRST_OFFSET, **FAST)  # fmt: skip
    consumer.subscribe(topic)
    async with consumer, Admin(rocketmq.namesrv_addr) as admin:

        async def lag() -> int:
            return (await admin.lag(group, topic)).total

        await eventually(lambda: len(got) >= 8)
        await eventually(lambda: _is(lag, 0))
        mine = [mq for mq in consumer.assignment() if mq.topic == topic]
        body = fastjson.dumps_with({}, {"offsetTable": fastjson.dumps_queue_map(
            (mq, 0) for mq in mine)})  # fmt: skip
        request = RemotingCommand.request(
            RequestCode.RESET_CONSUMER_CLIENT_OFFSET,
            {"topic": topic, "group": group, "timestamp": "0", "isForce": "true"},
            body.encode(),
        )

        class FromBroker:
            address = rocketmq.broker_addrs["broker-a"]

        answer = await consumer.client.dispatcher(FromBroker(), request)  # type: ignore[arg-type]
        assert answer is not None and answer.code == 0
        await eventually(lambda: len(got) >= 16)
        assert sorted(got[8:]) == sorted(bodies)
        await eventually(lambda: _is(lag, 0))


def mqadmin(rocketmq: LocalRocketMQ, *args: str) -> str:
    """Run the Java admin tool of the broker's own jars (rocketmq-tools)."""
    import subprocess
    from pathlib import Path

    from aiorocket.testing import _maven

    classpath = str(Path(rocketmq.state["lib_dir"]) / "*")
    argv = [_maven.find_java(), "-Xms64m", "-Xmx256m", "-XX:TieredStopAtLevel=1", "-cp",
            classpath, "org.apache.rocketmq.tools.command.MQAdminStartup", *args,
            "-n", rocketmq.namesrv_addr]  # fmt: skip
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


async def test_java_admin_tool_sees_the_consumer(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    """mqadmin consumerStatus, queryMsgById -g -d (consume directly) and resetOffsetByTime
    against a running aiorocket consumer (three JVM runs: ~20 s)."""
    topic, group = unique_name("ops"), unique_name("g")
    await rocketmq.create_topic(topic, queues=2)
    bodies = [b"j%d" % i for i in range(6)]
    await send(rocketmq.namesrv_addr, topic, bodies)
    async with Producer("ops-p", rocketmq.namesrv_addr) as producer:
        direct = await producer.send(Message(topic, b"direct", tags="other"))  # not "t"
    got: list[bytes] = []

    async def handle(msg: ConsumerMessage) -> None:
        got.append(msg.body)

    consumer = Consumer(group, rocketmq.namesrv_addr, handler=handle,
                        consume_from_where=ConsumeFromWhere.FIRST_OFFSET, **FAST)  # fmt: skip
    consumer.subscribe(topic, "t")
    async with consumer:
        await eventually(lambda: len(got) >= 6)
        client_id = consumer.client.client_id
        status = await anyio.to_thread.run_sync(
            mqadmin, rocketmq, "consumerStatus", "-g", group, "-i", client_id
        )
        assert "CONSUME_PASSIVELY" in status and f"Topic: {topic}" in status, status
        assert "SubExpression: t" in status
        # queryMsgById -g -d: the broker hands the message to this client's handler.
        pushed = await anyio.to_thread.run_sync(
            mqadmin, rocketmq, "queryMsgById", "-i", direct.offset_msg_id, "-t", topic, "-g", group,
            "-d", client_id,
        )  # fmt: skip
        assert "CR_SUCCESS" in pushed, pushed
        assert got.count(b"direct") == 1
        await anyio.to_thread.run_sync(
            mqadmin, rocketmq, "resetOffsetByTime", "-g", group, "-t", topic, "-s", "0"
        )
        await eventually(lambda: len(got) >= 13)
        assert sorted(m for m in got[7:]) == sorted(bodies)
