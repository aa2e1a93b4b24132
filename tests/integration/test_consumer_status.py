"""A running aiorocket consumer as ``mqadmin consumerStatus`` / ``consumerConnection`` and
the Dashboard read it (issue 42): its queues' real last pull and last consume times (so
that the tool's "maybe blocked" diagnosis can fire), and its tasks' stacks (what each
awaits) as the jstack; through the Proxy, the print-stack command answered with the
same stacks and the verify-message command (``queryMsgById -d``, the Proxy's
consume-message-directly) run through the handler.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest

from aiorocket.admin import Admin
from aiorocket.consumer import ConsumeFromWhere, Consumer, ConsumerMessage
from aiorocket.message import Message
from aiorocket.producer import Producer
from aiorocket.testing import _maven
from aiorocket.testing.broker import LocalRocketMQ

from .test_operator_requests import FAST

pytestmark = [pytest.mark.anyio, pytest.mark.integration]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def mqadmin(rocketmq: LocalRocketMQ, cwd: Path, *args: str) -> str:
    """The Java admin tool of the broker's jars, in ``cwd`` (consumerStatus writes a
    file per client there)."""
    classpath = str(Path(rocketmq.state["lib_dir"]) / "*")
    argv = [_maven.find_java(), "-Xms64m", "-Xmx256m", "-XX:TieredStopAtLevel=1", "-cp",
            classpath, "org.apache.rocketmq.tools.command.MQAdminStartup", *args,
            "-n", rocketmq.namesrv_addr]  # fmt: skip
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=cwd)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def _written(directory: Path, client_id: str) -> str:
    """consumerStatus's file of one client (``<time>/<client id>``)."""
    (found,) = [p for p in directory.rglob("*") if p.is_file() and p.name == client_id]
    return found.read_text()


async def test_mqadmin_sees_a_blocked_consumer_and_what_its_tasks_await(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    """A handler stuck on a message: the queue's lastConsumeTimestamp stays where its
    last message finished while its pulls go on, and consumerStatus (without -i: every
    client, with the diagnosis; -s: the jstack) says "maybe blocked" and shows the
    handler's await. The tool's threshold is a minute: the stuck queue's last
    consume is moved two minutes back instead of waiting one (two JVM runs: ~15 s)."""
    topic, group = unique_name("blk"), unique_name("g")
    await rocketmq.create_topic(topic, queues=1, brokers=[next(iter(rocketmq.broker_addrs))])
    async with Producer("blk-p", rocketmq.namesrv_addr) as producer:
        for i in range(3):
            await producer.send(Message(topic, b"m%d" % i))
    entered, release = anyio.Event(), anyio.Event()

    async def stuck_handler(msg: ConsumerMessage) -> None:
        entered.set()
        await release.wait()

    consumer = Consumer(group, rocketmq.namesrv_addr, handler=stuck_handler,
                        consume_concurrency=1, consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
                        **FAST)  # fmt: skip
    consumer.subscribe(topic)
    async with consumer:
        try:
            with anyio.fail_after(30):
                await entered.wait()
            (pq,) = [pq for mq, pq in consumer._state.process_queues.items() if mq.topic == topic]
            pulled_at = pq.last_pull_completed
            assert pulled_at is not None and pq.cached_count == 3
            pq.last_consumed -= 120  # stuck for two minutes (see the docstring)
            out = await anyio.to_thread.run_sync(
                mqadmin, rocketmq, tmp_path, "consumerStatus", "-g", group, "-s"
            )
            assert "can't consume for a while, maybe blocked" in out and topic in out, out
            client_id = consumer.client_id
            status = await anyio.to_thread.run_sync(_written, tmp_path, client_id)
            assert "#Consumer jstack#" in status
            jstack = status.split("#Consumer jstack#", 1)[1]
            assert "stuck_handler" in jstack and "Puller.run" in jstack, jstack[:3000]
            connection = await anyio.to_thread.run_sync(
                mqadmin, rocketmq, tmp_path, "consumerConnection", "-g", group
            )
            assert client_id in connection and "CONSUME_PASSIVELY" in connection, connection
        finally:
            release.set()


async def test_through_the_proxy_verify_message_runs_the_handler(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    """A consumer over gRPC: consumerConnection lists it (the Proxy registered it with
    its broker) and a consume-directly request (the broker forwards it to the Proxy,
    which sends the client a VerifyMessageCommand) runs the handler and reports
    CR_SUCCESS (one JVM run: ~5 s).

    The print-stack command is tested on the fake Proxy
    (tests/unit/test_grpc_operator_commands.py): no Proxy of 5.5.0 forwards the running
    info request (``consumerStatus``, and ``queryMsgById -d``, which asks it first) to a
    gRPC client here. The harness's local-mode Proxy drops it (its ProxyChannel reads
    the request's header object, which a request the broker relays does not carry, so
    the broker times out after 10 s); a cluster-mode Proxy never registered the pop
    consumer with the brokers within 45 s (``not online``)."""
    broker = rocketmq.state["proxy_broker"]  # its Proxy (local mode) registers the client
    topic, group = unique_name("pst"), unique_name("g")
    await rocketmq.create_topic(topic, queues=1, brokers=[broker])
    await rocketmq.create_group(group, brokers=[broker])
    # mqadmin finds a group's broker by its retry topic's route, which a pop consumer
    # has not made before its first retry
    await rocketmq.create_topic(f"%RETRY%{group}", queues=1, brokers=[broker])
    async with Producer("pst-p", rocketmq.namesrv_addr) as producer:
        sent = await producer.send(Message(topic, b"verify me"))
    got: list[bytes] = []
    first = anyio.Event()

    async def handle_over_grpc(msg: ConsumerMessage) -> None:
        got.append(msg.body)
        first.set()

    consumer = Consumer(group, proxy=rocketmq.proxy_grpc, handler=handle_over_grpc)
    consumer.subscribe(topic)
    async with consumer:
        with anyio.fail_after(30):
            await first.wait()
        client_id = consumer.client_id
        connection = await anyio.to_thread.run_sync(
            mqadmin, rocketmq, tmp_path, "consumerConnection", "-g", group, "-b",
            rocketmq.broker_addrs[broker],
        )  # fmt: skip
        assert client_id in connection and "PYTHON" in connection, connection
        # CONSUME_MESSAGE_DIRECTLY, as mqadmin's queryMsgById -d sends it (that command
        # first asks for the running info, which this Proxy drops: see the docstring).
        async with Admin(rocketmq.namesrv_addr) as admin:
            result = await admin.consume_directly(group, client_id, sent.offset_msg_id)
        assert result["consumeResult"] == "CR_SUCCESS", result
        assert got == [b"verify me", b"verify me"]
