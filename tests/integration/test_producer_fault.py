"""Fault tolerance against the real cluster: one broker of the route is dead.

The shared cluster is not touched: a small fake NameServer serves the real route of a
topic that lives on broker-a, plus a broker ``broker-dead`` whose address either
refuses connections (a closed port) or hangs up on every request (a broker that died
with connections open).
"""

from __future__ import annotations

import json
import socket
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import pytest

from aiorocket.message import Message
from aiorocket.producer import LatencyFaultTolerance, Producer
from aiorocket.protocol.codes import RequestCode, ResponseCode
from aiorocket.protocol.command import RemotingCommand
from aiorocket.testing.broker import LocalRocketMQ
from aiorocket.testing.fake_remoting import FakeRemotingServer, ServerSession
from aiorocket.testing.logs import capture_logs

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

DEAD = "broker-dead"


def closed_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


async def hang_up(session: ServerSession, cmd: RemotingCommand) -> None:
    await session.close()


@asynccontextmanager
async def namesrv_with_dead_broker(
    rocketmq: LocalRocketMQ, topic: str, kind: str
) -> AsyncIterator[tuple[str, FakeRemotingServer | None]]:
    """(fake NameServer address, the dead broker's server if it has one)."""
    route: dict[str, Any] | None = await rocketmq.route(topic)
    assert route is not None
    async with AsyncExitStack() as stack:
        dead_server: FakeRemotingServer | None = None
        if kind == "hangs_up":
            dead_server = await stack.enter_async_context(FakeRemotingServer(hang_up))
            dead_addr = dead_server.address
        else:
            dead_addr = closed_port()
        route["queueDatas"].append(
            {"brokerName": DEAD, "readQueueNums": 4, "writeQueueNums": 4, "perm": 6}
        )
        route["brokerDatas"].append(
            {"cluster": "DefaultCluster", "brokerName": DEAD, "brokerAddrs": {"0": dead_addr}}
        )

        async def serve(session: ServerSession, cmd: RemotingCommand) -> None:
            if cmd.code == RequestCode.GET_ROUTEINFO_BY_TOPIC and cmd.ext_fields["topic"] == topic:
                reply = RemotingCommand.response_to(cmd, body=json.dumps(route).encode())
            else:
                reply = RemotingCommand.response_to(cmd, ResponseCode.TOPIC_NOT_EXIST)
            await session.send(reply)

        namesrv = await stack.enter_async_context(FakeRemotingServer(serve))
        yield namesrv.address, dead_server


@pytest.mark.parametrize("kind", ["refuses_connections", "hangs_up"])
async def test_sends_keep_succeeding_and_the_dead_broker_is_avoided_after_one_failure(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str], kind: str
) -> None:
    topic = unique_name("pfault")
    await rocketmq.create_topic(topic, queues=4, brokers=["broker-a"])
    async with namesrv_with_dead_broker(rocketmq, topic, kind) as (namesrv, dead_server):
        producer = Producer(unique_name("pg"), namesrv)
        # A clock that stands still: the isolation cannot run out, however slow the box.
        producer.fault = LatencyFaultTolerance(clock=lambda: 0.0)
        with capture_logs() as logs:
            async with producer:
                results = [await producer.send(Message(topic, b"%d" % i)) for i in range(40)]
                assert not producer.fault.is_available(DEAD)
                assert producer.fault.is_available("broker-a")
        if dead_server is not None:  # (0 if it hung up on a heartbeat before reading it)
            sends = [c for c in dead_server.received if c.code == RequestCode.SEND_MESSAGE_V2]
            assert len(sends) <= 1
    assert {r.queue.broker_name for r in results} == {"broker-a"}
    assert len({r.queue for r in results}) == 4  # still spread over broker-a's queues
    failures = [e for e in logs if e["event"] == "send_failed"]  # one per failed attempt
    assert [e["broker"] for e in failures] == [DEAD]
    assert failures[0]["avoid_for_s"] == 10  # a failure isolates it for 10 s (5.x client)


async def test_with_fault_tolerance_off_the_dead_broker_keeps_costing_retries(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    topic = unique_name("pfault")
    await rocketmq.create_topic(topic, queues=4, brokers=["broker-a"])
    async with namesrv_with_dead_broker(rocketmq, topic, "refuses_connections") as (namesrv, _):
        with capture_logs() as logs:
            async with Producer(
                unique_name("pg"), namesrv, latency_fault_tolerance=False
            ) as producer:
                results = [await producer.send(Message(topic, b"%d" % i)) for i in range(16)]
    assert {r.queue.broker_name for r in results} == {"broker-a"}  # retries moved them
    assert len([e for e in logs if e["event"] == "send_failed"]) >= 4
