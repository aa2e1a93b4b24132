"""A pull the broker refuses because it does not know the consumer's subscription yet
(SUBSCRIPTION_NOT_EXIST: the pull overtook the heartbeat on a new or re-opened
connection, as when a subscribed topic appears) is expected, not a problem: the
consumer heartbeats that broker and pulls again at once, below WARNING. Only a refusal
that outlives our heartbeat is reported. (Scripted broker: the real one's race between
its heartbeat and pull thread pools cannot be produced on demand.)"""

from __future__ import annotations

import anyio
import pytest

from aiorocket.protocol.codes import RequestCode, ResponseCode
from aiorocket.protocol.command import RemotingCommand
from aiorocket.testing.fake_remoting import ServerSession
from aiorocket.testing.logs import capture_logs

from .consumer_fakes import Collector, FakeBroker, FakeCluster, consume, consumer_of, running

pytestmark = pytest.mark.anyio


class LateSubscriptionBroker(FakeBroker):
    """Refuses pulls (SUBSCRIPTION_NOT_EXIST) until a heartbeat arrives after the first
    refusal; ``stubborn``: whatever heartbeats arrive."""

    def __init__(self, *, stubborn: bool = False) -> None:
        super().__init__("broker-a", 0)
        self.stubborn = stubborn
        self.knows_subscription = False
        self.refusals = 0
        self.heartbeats_after_refusal = 0
        self.refused = anyio.Event()  # set (and replaced) at every refusal
        self.refused_by_queue: dict[int, int] = {}

    async def handle(self, session: ServerSession, cmd: RemotingCommand) -> None:
        if cmd.code == RequestCode.HEART_BEAT and self.refusals:
            self.heartbeats_after_refusal += 1
            self.knows_subscription = not self.stubborn
        await super().handle(session, cmd)

    async def _pull(self, cmd: RemotingCommand) -> RemotingCommand:
        if not self.knows_subscription:
            self.refusals += 1
            queue_id = int(cmd.ext_fields["queueId"])
            self.refused_by_queue[queue_id] = self.refused_by_queue.get(queue_id, 0) + 1
            self.refused.set()
            self.refused = anyio.Event()
            return RemotingCommand.response_to(
                cmd, ResponseCode.SUBSCRIPTION_NOT_EXIST, "the consumer's subscription not exist"
            )
        return await super()._pull(cmd)


async def test_a_pull_overtaking_the_heartbeat_heartbeats_and_pulls_again_quietly() -> None:
    broker = LateSubscriptionBroker()
    broker.add(0, b"m0", b"m1")
    # heartbeat_interval far away: only the refusal can bring the heartbeat that ends it.
    _, got, logs = await consume(FakeCluster({"broker-a": [broker]}), 2, heartbeat_interval=600.0)
    assert sorted(m.body for m in got) == [b"m0", b"m1"]
    assert broker.refusals >= 1
    assert broker.heartbeats_after_refusal >= 1
    assert [e["event"] for e in logs if e["log_level"] in ("warning", "error")] == []


async def test_a_refusal_that_outlives_our_heartbeat_is_a_warning() -> None:
    broker = LateSubscriptionBroker(stubborn=True)
    cluster = FakeCluster({"broker-a": [broker]})
    broker.add(0, b"m0")
    with capture_logs() as logs:
        async with running(cluster):
            consumer = consumer_of(
                cluster, Collector(1), pull_backoff_on_error=0.05, heartbeat_interval=600.0
            )
            async with consumer:
                # A queue's pull is sent once the client handled the answer before it:
                # its third refusal means the second (after our heartbeat) was logged.
                with anyio.fail_after(10):
                    while max(broker.refused_by_queue.values(), default=0) < 3:
                        await broker.refused.wait()
    assert broker.heartbeats_after_refusal >= 1
    failed = [e for e in logs if e["event"] == "pull_failed"]
    assert failed and all(e["log_level"] == "warning" for e in failed)
    assert "SUBSCRIPTION_NOT_EXIST" in failed[0]["error"]
