"""The pytest plugin (aiorocket.testing.pytest_plugin) as a user's project meets it: a test
module run by its own pytest (pytest-asyncio, asyncio_mode=auto; and anyio's plugin)
against the shared local cluster; and the testing API from async code."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from aiorocket.testing.broker import LocalRocketMQ
from tests import snippets

pytestmark = pytest.mark.integration

USER_FASTAPI_TEST = """
import asyncio

import httpx
from fastapi import FastAPI

from aiorocket import Message
from aiorocket.consumer import ConsumeFromWhere, ConsumerMessage
from aiorocket.integrations.fastapi import ProducerDep, RocketMQRouter
from aiorocket.testing.broker import LocalRocketMQ


async def test_order_round_trip(rocketmq_namesrv, rocketmq_topic, rocketmq_group):
    received = []
    seen = asyncio.Event()
    router = RocketMQRouter(producer_group=rocketmq_group + "-p")

    @router.subscriber(rocketmq_topic, group=rocketmq_group,
                       consume_from_where=ConsumeFromWhere.FIRST_OFFSET)
    async def handle(msg: ConsumerMessage) -> None:
        received.append(msg.body)
        seen.set()

    app = FastAPI()
    app.include_router(router)

    @app.post("/send")
    async def send(producer: ProducerDep) -> dict:
        result = await producer.send(Message(rocketmq_topic, b"hello"))
        return {"id": result.msg_id}

    async with router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://app") as client:
            assert (await client.get("/health/ready")).status_code == 200
            assert (await client.post("/send")).status_code == 200
            await asyncio.wait_for(seen.wait(), 30)
    assert received == [b"hello"]


async def test_attach_from_async_code(rocketmq_cluster):
    assert LocalRocketMQ.attach(rocketmq_cluster.base_dir) is not None
    assert await LocalRocketMQ.aattach(rocketmq_cluster.base_dir) is not None


async def test_fake_server(rocketmq_fake_server):
    from aiorocket.remoting.pool import ConnectionPool
    from aiorocket.protocol.command import RemotingCommand

    async with rocketmq_fake_server() as server, ConnectionPool() as pool:
        answer = await pool.request(server.address, RemotingCommand.request(1, {"a": "b"}), 5)
    assert answer.ext_fields == {"a": "b"}
"""

USER_ANYIO_TEST = """
import anyio
import pytest

from aiorocket import Message
from aiorocket.consumer import ConsumeFromWhere, Consumer, ConsumerMessage
from aiorocket.producer import Producer

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request):
    return request.param


async def test_produce_and_consume(rocketmq_namesrv, rocketmq_topic, rocketmq_group):
    got = anyio.Event()

    async def handle(msg: ConsumerMessage) -> None:
        got.set()

    consumer = Consumer(rocketmq_group, handler=handle,
                        consume_from_where=ConsumeFromWhere.FIRST_OFFSET)
    consumer.subscribe(rocketmq_topic)
    async with Producer(rocketmq_group + "-p") as producer, consumer:
        await producer.send(Message(rocketmq_topic, b"x"))
        with anyio.fail_after(30):
            await got.wait()
"""


def _run_user_suite(tmp_path: Path, rocketmq: LocalRocketMQ, ini: str, test: str) -> str:
    (tmp_path / "pytest.ini").write_text(textwrap.dedent(ini))
    (tmp_path / "test_user.py").write_text(test)
    env = {**snippets.env_for(rocketmq), "AIOROCKET_BROKER_DIR": str(rocketmq.base_dir)}
    env.pop("AIOROCKET_NAMESRV_ADDR")  # the plugin's fixture provides it
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_user.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_a_users_fastapi_suite_under_pytest_asyncio(
    rocketmq: LocalRocketMQ, tmp_path: Path
) -> None:
    ini = """\
        [pytest]
        asyncio_mode = auto
        asyncio_default_fixture_loop_scope = function
    """
    out = _run_user_suite(tmp_path, rocketmq, ini, USER_FASTAPI_TEST)
    assert "3 passed" in out, out


def test_a_users_suite_under_anyio_on_asyncio_and_trio(
    rocketmq: LocalRocketMQ, tmp_path: Path
) -> None:
    ini = """\
        [pytest]
        addopts = -p no:asyncio
    """
    out = _run_user_suite(tmp_path, rocketmq, ini, USER_ANYIO_TEST)
    assert "2 passed" in out, out


@pytest.mark.anyio
async def test_attach_inside_a_running_event_loop(rocketmq: LocalRocketMQ) -> None:
    """It used to fail with "Already running asyncio in this thread" (issue 21)."""
    attached = LocalRocketMQ.attach(rocketmq.base_dir)
    assert attached is not None and attached.namesrv_addr == rocketmq.namesrv_addr
    assert await LocalRocketMQ.aattach(rocketmq.base_dir) is not None
