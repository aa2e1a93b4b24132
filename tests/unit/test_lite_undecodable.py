"""An undecodable record in a remoting lite pop is set apart, as a POP's is
(``aiorocket.consumer.undecodable``): the other messages of the pop are handled, the
bad record is dead-lettered and acked on its lite topic, and that lite topic goes on.
Before, the record failed the whole pop (MessageDecodeError) at every delivery, and no
message of the pop was handled. A real broker stores no such record on demand: a fake
lite broker serves one."""

from __future__ import annotations

import anyio
import pytest

from aiorocket.consumer import Consumer
from aiorocket.message import PROPERTY_LITE_TOPIC
from aiorocket.protocol.codes import RequestCode
from aiorocket.protocol.command import RemotingCommand
from aiorocket.protocol.message_codec import SYSFLAG_COMPRESSED
from aiorocket.protocol.store_record import encode_stored_message
from aiorocket.testing.fake_remoting import ServerSession
from aiorocket.testing.logs import capture_logs
from tests.unit.consumer_fakes import TOPIC, Collector, FakeCluster, running
from tests.unit.test_lite_lost_event import FakeLiteBroker

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class PoisonLiteBroker(FakeLiteBroker):
    """Also takes CONSUMER_SEND_MSG_BACK (the dead-lettering), noting the record's
    commit-log offset."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.sent_back: list[int] = []

    async def handle(self, session: ServerSession, cmd: RemotingCommand) -> None:
        if cmd.code == RequestCode.CONSUMER_SEND_MSG_BACK:
            self.sent_back.append(int(cmd.ext_fields["offset"]))
            await session.send(RemotingCommand.response_to(cmd))
            return
        await super().handle(session, cmd)


async def test_an_undecodable_lite_record_is_dead_lettered_and_the_rest_handled() -> None:
    broker = PoisonLiteBroker("broker-a")
    got = Collector(2)
    async with running(FakeCluster({"broker-a": [broker]})) as cluster:
        consumer = Consumer("g", cluster.namesrv.address, handler=got, bind_topic=TOPIC,
                            long_poll_timeout=0.5, request_timeout=2.0)  # fmt: skip
        for lite_topic in ("a", "b"):
            await consumer.subscribe_lite(lite_topic)
        # a's first message is stored flagged compressed and does not inflate
        broker.records[("a", 0)] = encode_stored_message(
            TOPIC, b"not zlib at all",
            {PROPERTY_LITE_TOPIC: "a", "INNER_MULTI_QUEUE_OFFSET": "0", "UNIQ_KEY": "BAD"},
            queue_offset=7, commit_log_offset=5007, sys_flag=SYSFLAG_COMPRESSED,
        )  # fmt: skip
        with capture_logs() as logs:
            async with consumer:
                broker.add_lite("a", b"poison")
                broker.add_lite("b", b"b-0")
                broker.add_lite("a", b"a-1")
                with anyio.fail_after(15):
                    await got.done.wait()
            undecodable = consumer.undecodable_messages
    assert sorted(got.got) == [b"a-1", b"b-0"]
    assert broker.sent_back == [5007]  # the raw record, by its commit-log offset
    assert broker.committed == {"a": 2, "b": 1}  # acked on its lite topic, then a-1
    assert undecodable == 1
    [event] = [e for e in logs if e["event"] == "undecodable_message"]
    assert (event["offset"], event["msg_id"], event["action"]) == (0, "BAD", "dead_lettered")
