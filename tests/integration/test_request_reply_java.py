"""Request-reply interop with the Java client (issue 44), both ways, on the real cluster:
a Java ``DefaultMQProducer.request`` answered by an aiorocket replier, and an aiorocket
``Producer.request`` answered by a Java replier (``MessageUtil.createReplyMessage``). The
Java side is tests/integration/java/RequestReply.java, compiled against the cluster's own
jars (rocketmq-client 5.5.0, the artifact Maven Central serves)."""

from __future__ import annotations

import contextlib
import json
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest

from aiorocket.consumer import ConsumeFromWhere, Consumer, ConsumerMessage
from aiorocket.message import Message
from aiorocket.producer import Producer
from aiorocket.testing.broker import LocalRocketMQ
from tests.integration.java_client import compile_java, run_java

pytestmark = [pytest.mark.anyio, pytest.mark.integration]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def java_classes(rocketmq: LocalRocketMQ, tmp_path_factory: pytest.TempPathFactory) -> str:
    """RequestReply.java compiled once for the module, against the cluster's jars."""
    out = tmp_path_factory.mktemp("reqreply")
    return compile_java("RequestReply.java", rocketmq.state["lib_dir"], out)


def java(classpath: str, tmp: Path, *args: str) -> subprocess.Popen[str]:
    return run_java(classpath, tmp, "RequestReply", *args)


@contextlib.contextmanager
def reaped(proc: subprocess.Popen[str]) -> Iterator[None]:
    """Kill the Java side if the test leaves before it exits."""
    try:
        yield
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def next_json(proc: subprocess.Popen[str]) -> dict[str, Any]:
    """The next JSON line the Java side prints (its other output is log noise)."""
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("{"):
            out: dict[str, Any] = json.loads(line)
            return out
    raise AssertionError(f"the Java side exited ({proc.wait()}) without a JSON line")


async def test_java_requests_and_aiorocket_replies(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str], tmp_path: Path,
    java_classes: str,
) -> None:  # fmt: skip
    topic, group = unique_name("rrj"), unique_name("g")
    await rocketmq.create_topic(topic, queues=2)
    async with Producer(unique_name("rp"), rocketmq.namesrv_addr) as replier:

        async def handle(msg: ConsumerMessage) -> None:
            await replier.reply(msg, b"re:" + msg.body)

        consumer = Consumer(group, rocketmq.namesrv_addr, handler=handle,
                            consume_from_where=ConsumeFromWhere.FIRST_OFFSET)  # fmt: skip
        consumer.subscribe(topic)
        async with consumer:
            proc = java(java_classes, tmp_path, "request", rocketmq.namesrv_addr, topic,
                        "ping", "60000")  # fmt: skip
            with reaped(proc), anyio.fail_after(120):
                got = await anyio.to_thread.run_sync(next_json, proc)
                assert await anyio.to_thread.run_sync(proc.wait) == 0
    assert got["reply"] == "re:ping", got
    assert got["topic"] == "DefaultCluster_REPLY_TOPIC"


async def test_aiorocket_requests_and_java_replies(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str], tmp_path: Path,
    java_classes: str,
) -> None:  # fmt: skip
    topic, group = unique_name("rrj"), unique_name("g")
    await rocketmq.create_topic(topic, queues=2)
    proc = java(java_classes, tmp_path, "reply", rocketmq.namesrv_addr, topic, group, "1")
    with reaped(proc), anyio.fail_after(120):
        assert await anyio.to_thread.run_sync(next_json, proc) == {"ready": True}
        async with Producer(unique_name("q"), rocketmq.namesrv_addr) as requester:
            reply = await requester.request(Message(topic, b"ping"), timeout=60)
        assert reply.body == b"re:ping"
        assert reply.properties["MSG_TYPE"] == "reply"
        assert await anyio.to_thread.run_sync(next_json, proc) == {"replied": "ping"}
        assert await anyio.to_thread.run_sync(proc.wait) == 0
