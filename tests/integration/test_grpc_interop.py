"""Interop with the official Python client (rocketmq-python-client, gRPC to the Proxy of
the local cluster): its producer to aiorocket's consumers, aiorocket's producer to its
consumer, with identical bodies, tags, keys and properties.

The official client runs in a virtual environment of its own (its grpcio and protobuf
pins stay out of ours), made once per machine in ``~/.cache/aiorocket``, as the
benchmarks' is; ``official_client.py`` is its side.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.streams.text import TextReceiveStream

from aiorocket.consumer import ConsumeFromWhere, Consumer, ConsumerMessage
from aiorocket.message import Message
from aiorocket.producer import Producer
from aiorocket.testing._maven import _locked
from aiorocket.testing.broker import LocalRocketMQ

pytest.importorskip("grpclib")

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

VENV = Path.home() / ".cache" / "aiorocket" / "venv-official"
CLIENT = Path(__file__).with_name("official_client.py")
SPECS = [
    {"body": os.urandom(48).hex(), "tag": f"tag{i}", "keys": sorted([f"k{i}", "order-7"]),
     "properties": {"color": "red", "seq": str(i)}}
    for i in range(3)
]  # fmt: skip


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # grpclib is asyncio-only


@pytest.fixture(scope="module")
def official_python() -> str:
    python = VENV / "bin" / "python"
    with _locked(VENV.with_suffix(".lock")):  # test sessions of other clones share it
        if not python.exists():
            try:
                venv.create(VENV, with_pip=True, clear=True)
                subprocess.run(
                    [str(python), "-m", "pip", "install", "-q", "rocketmq-python-client"],
                    check=True, capture_output=True, timeout=600,
                )  # fmt: skip
            except (OSError, subprocess.SubprocessError) as exc:
                python.unlink(missing_ok=True)  # not half-made next time
                pytest.skip(f"the official client could not be installed: {exc}")
    return str(python)


def as_message(topic: str, spec: dict[str, Any]) -> Message:
    return Message(topic, bytes.fromhex(spec["body"]), tags=spec["tag"], keys=spec["keys"],
                   properties=spec["properties"])  # fmt: skip


def received(msg: ConsumerMessage) -> dict[str, Any]:
    user = {k: v for k, v in msg.properties.items() if k in ("color", "seq")}
    return {"body": msg.body.hex(), "tag": msg.tags, "keys": sorted(msg.keys),
            "properties": user}  # fmt: skip


async def test_the_official_producer_to_aiorocket_consumers_over_both_transports(
    rocketmq: LocalRocketMQ, official_python: str, unique_name: Callable[[str], str]
) -> None:
    topic, grpc_group = unique_name("interop_in"), unique_name("g")
    await rocketmq.create_topic(topic, queues=2, brokers=[rocketmq.state["proxy_broker"]])
    await rocketmq.set_group_offsets(topic, grpc_group, 0)  # pop: else it starts at the end
    argv = [official_python, str(CLIENT), "produce", rocketmq.proxy_grpc, topic, json.dumps(SPECS)]
    done = await anyio.run_process(argv, stderr=sys.stderr)
    sent = [json.loads(line)["sent"] for line in done.stdout.decode().splitlines()]
    assert len(sent) == len(SPECS)

    got: dict[str, list[dict[str, Any]]] = {"grpc": [], "remoting": []}
    all_in = anyio.Event()

    def collector(transport: str) -> Callable[[ConsumerMessage], Any]:
        async def handle(msg: ConsumerMessage) -> None:
            got[transport].append(received(msg))
            if all(len(v) == len(SPECS) for v in got.values()):
                all_in.set()

        return handle

    over_grpc = Consumer(grpc_group, proxy=rocketmq.proxy_grpc, handler=collector("grpc"),
                         long_poll_timeout=5)  # fmt: skip
    over_grpc.subscribe(topic)
    over_remoting = Consumer(unique_name("r"), rocketmq.namesrv_addr, handler=collector("remoting"),
                             consume_from_where=ConsumeFromWhere.FIRST_OFFSET)  # fmt: skip
    over_remoting.subscribe(topic)
    async with over_grpc, over_remoting:
        with anyio.fail_after(60):
            await all_in.wait()
    key = lambda m: m["tag"]  # noqa: E731
    assert sorted(got["grpc"], key=key) == SPECS
    assert sorted(got["remoting"], key=key) == SPECS


async def test_aiorocket_producers_to_the_official_consumer(
    rocketmq: LocalRocketMQ, official_python: str, unique_name: Callable[[str], str]
) -> None:
    topic, group = unique_name("interop_out"), unique_name("g")
    await rocketmq.create_topic(topic, queues=2, brokers=[rocketmq.state["proxy_broker"]])
    await rocketmq.set_group_offsets(topic, group, 0)
    argv = [official_python, str(CLIENT), "consume", rocketmq.proxy_grpc, topic, group,
            str(2 * len(SPECS))]  # fmt: skip
    lines: list[dict[str, Any]] = []
    async with await anyio.open_process(argv, stderr=None) as process:
        assert process.stdout is not None
        async with (
            Producer(unique_name("p"), proxy=rocketmq.proxy_grpc) as over_grpc,
            Producer(unique_name("p"), rocketmq.namesrv_addr) as over_remoting,
        ):
            for producer in (over_grpc, over_remoting):
                for spec in SPECS:
                    await producer.send(as_message(topic, spec))
        buffer = ""
        with anyio.fail_after(90):
            async for chunk in TextReceiveStream(process.stdout):
                buffer += chunk
                *complete, buffer = buffer.split("\n")
                lines += [json.loads(line) for line in complete if line]
            await process.wait()
    messages = [m for m in lines if "body" in m]
    for m in messages:
        m["properties"] = {k: v for k, v in m["properties"].items() if k in ("color", "seq")}
    assert sorted(messages, key=lambda m: m["tag"]) == sorted(SPECS * 2, key=lambda m: m["tag"])
