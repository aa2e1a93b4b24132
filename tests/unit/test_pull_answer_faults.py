"""A pull answer the offset tracker rejects resets the queue instead of killing the
consumer (a real broker does not send one on demand: the scripted cluster does)."""

from __future__ import annotations

import anyio
import pytest

from aiorocket.consumer import ConsumeFromWhere, Consumer, ConsumerMessage
from aiorocket.protocol.command import RemotingCommand
from aiorocket.testing.logs import capture_logs

from .consumer_fakes import FAST, TOPIC, FakeBroker, FakeCluster, running

pytestmark = pytest.mark.anyio


class InconsistentOnceBroker(FakeBroker):
    """Its first answer with messages gives a next offset that is not past them."""

    def __init__(self) -> None:
        super().__init__("broker-a", 0)
        self.spoiled = False

    async def _pull(self, cmd: RemotingCommand) -> RemotingCommand:
        resp = await super()._pull(cmd)
        if resp.body and not self.spoiled:
            self.spoiled = True
            resp.ext_fields["nextBeginOffset"] = cmd.ext_fields["queueOffset"]
        return resp


async def test_an_answer_the_offset_tracker_rejects_resets_the_queue_and_loses_nothing() -> None:
    broker = InconsistentOnceBroker()
    cluster = FakeCluster({"broker-a": [broker]})
    broker.add(0, b"m0", b"m1", b"m2")
    got: list[bytes] = []
    done = anyio.Event()

    async def handle(msg: ConsumerMessage) -> None:
        got.append(msg.body)
        if len(got) == 3:
            done.set()

    with capture_logs() as events:
        async with running(cluster):
            consumer = Consumer(
                "g", cluster.namesrv.address, handler=handle,
                consume_from_where=ConsumeFromWhere.FIRST_OFFSET, **FAST,
            )  # fmt: skip
            consumer.subscribe(TOPIC)
            async with consumer:
                with anyio.fail_after(10):
                    await done.wait()
            assert broker.offsets[(TOPIC, 0)] == 3
    assert broker.spoiled
    assert got == [b"m0", b"m1", b"m2"]
    assert [e["queue"] for e in events if e["event"] == "pull_answer_inconsistent"] == [0]
