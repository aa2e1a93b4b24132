"""A plain ``anyio.run`` worker stopped by a real SIGTERM (issue 42): with
``stop_on_signals`` its running handlers finish, their offsets are committed and it
leaves its group, where before it died at once (nothing committed, exit -15)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest

from aiorocket.admin import Admin
from aiorocket.message import Message
from aiorocket.producer import Producer
from aiorocket.testing.broker import LocalRocketMQ

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

REPO = Path(__file__).resolve().parents[2]

WORKER = textwrap.dedent("""
    import sys

    import anyio

    from aiorocket import ConsumeFromWhere, Consumer, stop_on_signals

    async def main(namesrv: str, topic: str, group: str) -> None:
        async def handle(msg) -> None:
            print("started", flush=True)
            await anyio.sleep(1.0)  # still running when SIGTERM arrives
            print("handled", flush=True)

        # no periodic commit: only the close commits
        consumer = Consumer(group, namesrv, handler=handle, persist_offset_interval=3600,
                            consume_from_where=ConsumeFromWhere.FIRST_OFFSET)
        consumer.subscribe(topic)
        async with consumer, stop_on_signals():
            await anyio.sleep_forever()
        print("stopped", flush=True)

    anyio.run(main, *sys.argv[1:])
""")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_sigterm_commits_and_leaves_the_group(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    topic, group = unique_name("sigterm"), unique_name("g")
    await rocketmq.create_topic(topic, queues=1, brokers=["broker-a"])
    async with Producer("sigterm-p", rocketmq.namesrv_addr) as producer:
        for i in range(3):
            await producer.send(Message(topic, b"m%d" % i))
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = await anyio.open_process(
        [sys.executable, str(script), rocketmq.namesrv_addr, topic, group],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    out = b""
    async with proc:
        assert proc.stdout is not None
        with anyio.fail_after(30):
            while out.count(b"started") < 3:
                out += await proc.stdout.receive()
        proc.send_signal(signal.SIGTERM)  # while the three handlers run
        with anyio.fail_after(30):
            async for chunk in proc.stdout:
                out += chunk
            code = await proc.wait()
    assert code == 0, out.decode()
    assert out.count(b"handled") == 3 and out.rstrip().endswith(b"stopped"), out.decode()
    async with Admin(rocketmq.namesrv_addr) as admin:
        assert (await admin.lag(group, topic)).total == 0  # committed at the close
        assert (await admin.describe_group(group)).members == []  # left the group
