"""Transactions over gRPC across a producer restart (issue 30, item 1), on the real Proxy.

A producer process commits its local transaction and is SIGKILLed before it ends the
transaction: the broker holds an orphaned half message. The Proxy asks a producer about
a topic's orphans only when that producer declared the topic, so a restarted producer
that declares its topics (``Producer(topics=...)``) and sends nothing must be asked,
and its COMMIT makes the message visible.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest

pytest.importorskip("grpclib")

from aiorocket.grpc import SimpleConsumer
from aiorocket.message import MessageExt
from aiorocket.producer import Producer, TransactionState
from aiorocket.testing.broker import LocalRocketMQ

pytestmark = [pytest.mark.integration, pytest.mark.anyio]
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_a_restarted_producer_that_sends_nothing_is_asked_about_an_orphan(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    topic, group = unique_name("gtxr"), unique_name("g")
    await rocketmq.create_topic(topic, queues=2, message_type="TRANSACTION")
    await rocketmq.create_group(group)
    member = subprocess.Popen(  # noqa: ASYNC220 - it runs on; its output is read in a thread
        [sys.executable, "-m", "tests.integration.txn_member", rocketmq.proxy_grpc, topic,
         "orphan"],
        cwd=REPO, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert member.stdout is not None
        line = await anyio.to_thread.run_sync(member.stdout.readline)
        assert line.startswith("committed "), line
        msg_id = line.split()[1]
    finally:
        os.kill(member.pid, signal.SIGKILL)  # between the local commit and EndTransaction
        member.wait()

    asked: list[MessageExt] = []
    was_asked = anyio.Event()

    async def checker(msg: MessageExt) -> TransactionState:
        asked.append(msg)
        was_asked.set()
        return TransactionState.COMMIT  # the business transaction did commit

    async with (
        Producer(unique_name("pg"), proxy=rocketmq.proxy_grpc, topics=[topic],
                 transaction_checker=checker),
        SimpleConsumer(group, rocketmq.proxy_grpc, {topic: "*"}, await_duration=5) as consumer,
    ):  # fmt: skip
        # The broker asks about half messages older than 6 s every 30 s (its defaults).
        with anyio.fail_after(150):
            await was_asked.wait()
        got = []
        with anyio.fail_after(30):
            while not got:
                got = await consumer.receive(16, invisible_duration=20)
        await consumer.ack(got)
    assert {m.msg_id for m in asked} == {msg_id}
    assert [(m.msg_id, m.body) for m in got] == [(msg_id, b"orphan")]
