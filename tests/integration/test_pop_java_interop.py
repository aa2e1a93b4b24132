"""A group consumed in POP mode by aiorocket and by the Java push consumer in POP mode
(rocketmq-client 5.5.0 from Maven Central, benchmarks/java's program with BENCH_POP=1:
``setClientRebalance(false)``, the group and topic set to POP on the brokers) shares
the messages, none lost, none handled twice. Issue 33. Needs java and mvn.

The aiorocket member is kept slow (one handler at a time, a cache of 4): a fast one
drains a 200-message burst before the Java member's first pop answers (seen: 200 to 0),
which shows nothing about sharing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest

from aiorocket.client.instance import ClientInstance
from aiorocket.consumer import ConsumerMessage
from aiorocket.testing.broker import LocalRocketMQ
from tests.integration.test_remoting_pop import pop_consumer, send

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
#: SET_MESSAGE_REQUEST_MODE: the broker's assignment mode of a (topic, group)
SET_MESSAGE_REQUEST_MODE = 401
N = 200


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _java_command(version: str) -> list[str]:
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import _setup  # benchmarks/_setup.py: builds the Java program once per version

        command = _setup.build_java(version)
    finally:
        sys.path.remove(str(BENCHMARKS))
    if command is None:
        pytest.skip("java and mvn are needed for the Java POP consumer")
    return list(command)


async def test_aiorocket_and_the_java_pop_consumer_share_a_group(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    java = _java_command(rocketmq.state["version"])
    topic, group = unique_name("rpopjava"), unique_name("g")
    await rocketmq.create_topic(topic, queues=2)
    await rocketmq.create_group(group)
    async with ClientInstance(rocketmq.namesrv_addr) as client:
        body = json.dumps({"topic": topic, "consumerGroup": group, "mode": "POP",
                           "popShareQueueNum": 0}).encode()  # fmt: skip
        for addr in rocketmq.broker_addrs.values():
            resp = await client.broker.call(addr, SET_MESSAGE_REQUEST_MODE, {}, body)
            assert resp.code == 0, resp.remark
    ours: list[bytes] = []

    async def handle(msg: ConsumerMessage) -> None:
        ours.append(msg.body)
        await anyio.sleep(0.02)  # a slow member: it holds few messages, Java takes the rest

    env = dict(os.environ, BENCH_POP="1")
    argv = [*java, "consume", rocketmq.namesrv_addr, topic, group, str(N), "8", "0"]
    # Started at once (no await in between); its output is read in worker threads.
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,  # noqa: ASYNC220
                            text=True, env=env)  # fmt: skip
    try:
        assert proc.stdout is not None
        with anyio.fail_after(60):
            while (line := await anyio.to_thread.run_sync(proc.stdout.readline)) != "READY\n":
                assert line, "the Java consumer exited before READY"
        slow = {"consume_concurrency": 1, "pull_threshold_for_all": 4, "pull_batch_size": 2}
        async with pop_consumer(rocketmq, group, topic, handle, **slow):
            await send(rocketmq, topic, [b"m%d" % i for i in range(N)])
            # The Java program reports once idle 8 s after its last message.
            with anyio.fail_after(120):
                out = await anyio.to_thread.run_sync(proc.communicate)
    finally:
        if proc.poll() is None:
            proc.kill()
    result = json.loads(next(x for x in out[0].splitlines() if x.startswith("RESULT "))[7:])
    theirs = int(result["count"])
    assert len(set(ours)) == len(ours)  # none twice here
    assert theirs > 0 and ours, (theirs, len(ours), out[0][-3000:])  # both got a share
    assert len(ours) + theirs == N  # none lost, none handled twice across both
