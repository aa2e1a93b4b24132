"""Interop with the Java RocketMQ 4.9.7 client, both ways, on the 4.9 cluster: what one
side sends the other receives field by field (body, tag, keys, user properties with
non-ASCII values, compressed bodies). The Java side is tests/integration/java/Interop49.java,
compiled against the cluster's own jars (rocketmq-client 4.9.7 is among them).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
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

pytestmark = [pytest.mark.anyio, pytest.mark.integration, pytest.mark.broker49]

@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def specs(topic: str) -> list[dict[str, Any]]:
    """The messages each side sends: plain, tagged with keys and non-ASCII properties, and
    one large enough to be compressed (both clients compress bodies over 4 KiB)."""
    return [
        {"body": b"plain".hex(), "tag": "TagA", "keys": ["k1"], "properties": {}},
        {"body": "zürich ✓".encode().hex(), "tag": "TagB", "keys": ["k2", "k3"],
         "properties": {"city": "Zürich", "emoji": "✓", "jp": "東京"}},
        {"body": (bytes(range(256)) * 64).hex(), "tag": "TagC", "keys": ["big"],
         "properties": {"size": "16384"}},
    ]  # fmt: skip


@pytest.fixture(scope="module")
def interop_classes(rocketmq49: LocalRocketMQ, tmp_path_factory: pytest.TempPathFactory) -> str:
    """Interop49.java compiled once for the module (javac), against the cluster's jars."""
    out = tmp_path_factory.mktemp("interop49")
    return compile_java("Interop49.java", rocketmq49.state["lib_dir"], out)


def java(classpath: str, tmp: Path, *args: str) -> subprocess.Popen[str]:
    return run_java(classpath, tmp, "Interop49", *args)


def lines(proc: subprocess.Popen[str]) -> list[dict[str, Any]]:
    """The JSON lines the Java side printed (its other output is log noise)."""
    assert proc.stdout is not None
    out = []
    for line in proc.stdout:
        if line.startswith("{"):
            out.append(json.loads(line))
    return out


def user_props(props: Any) -> dict[str, str]:
    return {k: v for k, v in dict(props).items() if k.islower()}


async def test_aiorocket_sends_and_the_java_4_9_7_consumer_receives(
    rocketmq49: LocalRocketMQ, unique_name: Callable[[str], str], tmp_path: Path,
    interop_classes: str,
) -> None:
    topic, group = unique_name("j49in"), unique_name("g")
    await rocketmq49.create_topic(topic, queues=2)
    sent = specs(topic)
    async with Producer(unique_name("pg"), rocketmq49.namesrv_addr) as producer:
        ids = [
            (await producer.send(Message(topic, bytes.fromhex(s["body"]), tags=s["tag"],
                                         keys=s["keys"], properties=s["properties"]))).msg_id
            for s in sent
        ]  # fmt: skip
    proc = java(interop_classes, tmp_path, "consume", rocketmq49.namesrv_addr, topic, group,
                str(len(sent)))  # fmt: skip
    with anyio.fail_after(150):
        got = await anyio.to_thread.run_sync(lines, proc)
        assert await anyio.to_thread.run_sync(proc.wait) == 0, got
    by_id = {m["msgId"]: m for m in got if "msgId" in m}
    for spec, msg_id in zip(sent, ids, strict=True):
        java_msg = by_id[msg_id]
        assert java_msg["body"] == spec["body"]
        assert java_msg["tag"] == spec["tag"]
        assert java_msg["keys"] == spec["keys"]
        assert java_msg["properties"] == spec["properties"]
    assert [by_id[i]["compressed"] for i in ids] == [False, False, True]


async def test_the_java_4_9_7_producer_sends_and_aiorocket_receives(
    rocketmq49: LocalRocketMQ, unique_name: Callable[[str], str], tmp_path: Path,
    interop_classes: str,
) -> None:
    topic, group = unique_name("j49out"), unique_name("g")
    await rocketmq49.create_topic(topic, queues=2)
    sent = specs(topic)
    proc = java(interop_classes, tmp_path, "produce", rocketmq49.namesrv_addr, topic,
                json.dumps(sent))  # fmt: skip
    with anyio.fail_after(120):
        out = await anyio.to_thread.run_sync(lines, proc)
        assert await anyio.to_thread.run_sync(proc.wait) == 0, out
    ids = [m["sent"] for m in out if "sent" in m]
    assert len(ids) == len(sent)
    got: dict[str, ConsumerMessage] = {}
    done = anyio.Event()

    async def handle(msg: ConsumerMessage) -> None:
        got[msg.msg_id] = msg
        if set(ids) <= got.keys():
            done.set()

    consumer = Consumer(group, rocketmq49.namesrv_addr, handler=handle,
                        consume_from_where=ConsumeFromWhere.FIRST_OFFSET)  # fmt: skip
    consumer.subscribe(topic)
    async with consumer:
        with anyio.fail_after(60):
            await done.wait()
    for spec, msg_id in zip(sent, ids, strict=True):
        msg = got[msg_id]
        assert msg.body == bytes.fromhex(spec["body"])  # the 16 KiB one came zlib-compressed
        assert msg.tags == spec["tag"]
        assert list(msg.keys) == spec["keys"]
        assert user_props(msg.properties) == spec["properties"]
