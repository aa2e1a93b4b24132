"""Executor-side data loss below a queue's minimum offset.

A real broker answers this way once retention has deleted the commit-log files under a
consumer's offset; the shared test cluster cannot be made to delete them (its files are
young and other sessions use them), so a scripted broker gives the same answers:
PULL_OFFSET_MOVED with the queue's new minimum.
"""

from __future__ import annotations

import json

import pytest

from aiorocket.client.instance import ClientInstance
from aiorocket.errors import DataLossError
from aiorocket.message import MessageQueue
from aiorocket.protocol.codes import RequestCode, ResponseCode
from aiorocket.protocol.command import RemotingCommand
from aiorocket.spark._broker import pull_segment
from aiorocket.spark._options import Filter
from aiorocket.testing.fake_remoting import FakeRemotingServer, ServerSession
from aiorocket.testing.logs import capture_logs

pytestmark = pytest.mark.anyio

MQ = MessageQueue("t", "broker-a", 0)
MIN_OFFSET = 5


def broker(addr: list[str]) -> object:
    async def handle(session: ServerSession, cmd: RemotingCommand) -> None:
        if cmd.code == RequestCode.GET_ROUTEINFO_BY_TOPIC:
            route = {
                "queueDatas": [{"brokerName": "broker-a", "readQueueNums": 1,
                                "writeQueueNums": 1, "perm": 6}],
                "brokerDatas": [{"cluster": "c", "brokerName": "broker-a",
                                 "brokerAddrs": {"0": addr[0]}}],
            }  # fmt: skip
            await session.send(RemotingCommand.response_to(cmd, body=json.dumps(route).encode()))
        elif cmd.code == RequestCode.PULL_MESSAGE:
            offset = int(cmd.ext_fields["queueOffset"])
            fields = {"minOffset": str(MIN_OFFSET), "maxOffset": "10",
                      "suggestWhichBrokerId": "0"}  # fmt: skip
            if offset < MIN_OFFSET:
                code = ResponseCode.PULL_OFFSET_MOVED
                fields["nextBeginOffset"] = str(MIN_OFFSET)
            else:  # from the minimum on, nothing passes the filter up to offset 10
                code = ResponseCode.PULL_RETRY_IMMEDIATELY
                fields["nextBeginOffset"] = "10"
            await session.send(RemotingCommand.response_to(cmd, code=code, ext_fields=fields))

    return handle


async def test_offsets_below_the_minimum_fail_or_are_skipped() -> None:
    addr: list[str] = []
    async with FakeRemotingServer(broker(addr)) as server:  # type: ignore[arg-type]
        addr.append(server.address)
        async with ClientInstance(server.address) as client:
            with pytest.raises(DataLossError, match=r"offsets \[2, 5\) of t@broker-a:0 are no"):
                await pull_segment(client, "g", MQ, 2, 8, Filter(), fail_on_data_loss=True,
                                   batch=32)  # fmt: skip
            with capture_logs() as logs:
                seg = await pull_segment(client, "g", MQ, 2, 8, Filter(),
                                         fail_on_data_loss=False, batch=32)  # fmt: skip
    # Only what lies below the minimum is lost; the reader went on from there, and said so.
    assert seg.messages == [] and seg.lost == [(2, 5)]
    warned = [e for e in logs if e["event"] == "spark_data_loss"]
    assert len(warned) == 1 and warned[0]["log_level"] == "warning"
    assert (warned[0]["lost_from"], warned[0]["lost_to"]) == (2, 5)
