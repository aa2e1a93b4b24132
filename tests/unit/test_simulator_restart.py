"""The restartable simulated Proxy (aiorocket.testing.sim.grpc_restart, docs/simulator.md)
keeps a client's settings as 5.5.0 does: a NotifyClientTermination drops them
(``ClientActivity.notifyClientTermination``: ``GrpcClientSettingsManager.
removeAndGetClientSettings``), so a receive after it and before new settings is refused
(``"settings" is null``) and the checker counts it (``receives_after_settings``)."""

from __future__ import annotations

import asyncio
from typing import Any

from grpclib.client import Channel
from grpclib.const import Cardinality

from aiorocket.grpc import _pb as pb
from aiorocket.testing.sim import History, check
from aiorocket.testing.sim.grpc_restart import RestartingProxy
from aiorocket.testing.sim.nemesis import Schedule

_PATH = "/apache.rocketmq.v2.MessagingService/"
_META = {"x-mq-client-id": "c-1"}


async def _settings(channel: Channel) -> None:
    async with channel.request(_PATH + "Telemetry", Cardinality.STREAM_STREAM,
                               pb.TelemetryCommand, pb.TelemetryCommand,
                               metadata=_META) as stream:  # fmt: skip
        await stream.send_message(pb.TelemetryCommand(settings=pb.Settings()))
        assert await stream.recv_message() is not None  # the Proxy applied them
        await stream.end()


async def _terminate(channel: Channel) -> None:
    async with channel.request(_PATH + "NotifyClientTermination", Cardinality.UNARY_UNARY,
                               pb.NotifyClientTerminationRequest,
                               pb.NotifyClientTerminationResponse,
                               metadata=_META) as stream:  # fmt: skip
        await stream.send_message(pb.NotifyClientTerminationRequest(), end=True)
        await stream.recv_message()


async def _receive(channel: Channel) -> Any:
    """The first answer of a receive (its status)."""
    async with channel.request(_PATH + "ReceiveMessage", Cardinality.UNARY_STREAM,
                               pb.ReceiveMessageRequest, pb.ReceiveMessageResponse,
                               metadata=_META) as stream:  # fmt: skip
        await stream.send_message(pb.ReceiveMessageRequest(batch_size=1), end=True)
        first = await stream.recv_message()
        assert first is not None
        _, status = pb.oneof(first, "content")
        while await stream.recv_message() is not None:  # the rest of its batch
            pass
        return status


def test_a_receive_between_a_termination_and_the_settings_is_refused() -> None:
    """Settings, a receive (it gets the stored message), NotifyClientTermination, a
    receive: refused '"settings" is null' and recorded; settings again, a receive: OK.
    The old model kept the client known through the termination: the second receive was
    served and nothing was recorded."""
    loop = asyncio.new_event_loop()
    history = History(loop.time)
    schedule = Schedule(seed=0, workload="grpc_restart", params={}, faults=[])

    async def main() -> list[Any]:
        proxy = RestartingProxy(schedule, history)
        async with proxy:
            proxy.add("m-0")
            proxy.add("m-1")
            channel = Channel("127.0.0.1", proxy.port)
            try:
                await _settings(channel)
                codes = [(await _receive(channel)).code]
                await _terminate(channel)
                refused = await _receive(channel)
                codes.append((refused.code, refused.message))
                await _settings(channel)
                codes.append((await _receive(channel)).code)
            finally:
                channel.close()
        return codes

    try:
        codes = loop.run_until_complete(main())
    finally:
        loop.close()
    assert codes == [pb.Code.OK, (pb.Code.INTERNAL_SERVER_ERROR, '"settings" is null'),
                     pb.Code.OK]  # fmt: skip
    assert len(history.of("receive_refused")) == 1
    # (the messages are never acked here: none_lost has its say too)
    found = [v.invariant for v in check(history) if v.invariant == "receives_after_settings"]
    assert found == ["receives_after_settings"]
