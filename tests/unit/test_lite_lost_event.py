"""A lite topic whose event the broker lost is delivered again (remoting lite consumer).

The 5.5.0 broker hands out a lite topic's messages only when it holds an *event* for it
(a new message, an ack, a new subscription). A pop that already visited a lite topic
drops the event an ack or a new message re-offers while that pop still runs
(apache/rocketmq#11191): the lite topic then keeps its messages and is never popped
again until its next message. On the real broker that is a race (it needs the broker
slowed down mid-pop); this fake broker loses the event on demand. The consumer asks a
broker it consumes from for a full dispatch every ``REDISPATCH_INTERVAL``
(TRIGGER_LITE_DISPATCH), as the broker's own recovery would, so the message comes.
"""

from __future__ import annotations

import json

import anyio
import pytest

from aiorocket.client.lite import (
    LITE_SUBSCRIPTION_CTL,
    POP_LITE_MESSAGE,
    TRIGGER_LITE_DISPATCH,
)
from aiorocket.client.pop import ACK_MESSAGE
from aiorocket.consumer import Consumer
from aiorocket.consumer.pop import remoting_lite
from aiorocket.message import PROPERTY_LITE_TOPIC
from aiorocket.protocol.codes import RequestCode, ResponseCode
from aiorocket.protocol.command import RemotingCommand
from aiorocket.protocol.store_record import encode_stored_message
from aiorocket.testing.fake_remoting import ServerSession
from tests.unit.consumer_fakes import TOPIC, Collector, FakeBroker, FakeCluster, running

pytestmark = pytest.mark.anyio

_POLLING_TIMEOUT = 210


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class FakeLiteBroker(FakeBroker):
    """A lite broker as the 5.5.0 one works: a pop hands out the lite topics it holds
    events for, one message at a time per lite topic (the next once the previous is
    acked); ``add(..., event=False)`` stores a message and loses its event."""

    def __init__(self, name: str) -> None:
        super().__init__(name, 0)
        self.lite: dict[str, list[bytes]] = {}
        self.committed: dict[str, int] = {}
        self.in_flight: set[str] = set()
        self.subscribed: set[str] = set()
        self.events: list[str] = []
        self.triggers = 0
        self.acked = anyio.Event()  # set (and replaced) at every ack
        self._offered = anyio.Event()
        #: stored records served in place of a lite topic's message: (lite topic, offset)
        self.records: dict[tuple[str, int], bytes] = {}

    def _offer(self, lite_topic: str) -> None:
        if lite_topic in self.subscribed and lite_topic not in self.events:
            self.events.append(lite_topic)
            self._offered.set()
            self._offered = anyio.Event()

    def add_lite(self, lite_topic: str, body: bytes, *, event: bool = True) -> None:
        self.lite.setdefault(lite_topic, []).append(body)
        if event:
            self._offer(lite_topic)

    def _pending(self, lite_topic: str) -> bool:
        return lite_topic not in self.in_flight and self.committed.get(lite_topic, 0) < len(
            self.lite.get(lite_topic, [])
        )

    async def handle(self, session: ServerSession, cmd: RemotingCommand) -> None:
        code, ext = cmd.code, cmd.ext_fields
        if code == RequestCode.GET_SUBSCRIPTIONGROUP_CONFIG:
            config = {"groupName": ext["group"], "retryMaxTimes": 16,
                      "attributes": {"lite.bind.topic": TOPIC}}  # fmt: skip
            resp = RemotingCommand.response_to(cmd, body=json.dumps(config).encode())
        elif code == LITE_SUBSCRIPTION_CTL:
            for entry in json.loads(cmd.body)["subscriptionSet"]:
                topics = set(entry["liteTopicSet"])
                if entry["action"] in ("COMPLETE_ADD", "COMPLETE_REMOVE"):
                    self.subscribed = set()
                if entry["action"].endswith("ADD"):
                    self.subscribed |= topics
                else:
                    self.subscribed -= topics
            resp = RemotingCommand.response_to(cmd)
        elif code == POP_LITE_MESSAGE:
            resp = await self._pop(cmd)
        elif code == ACK_MESSAGE:
            lite_topic = ext["liteTopic"]
            self.committed[lite_topic] = int(ext["offset"]) + 1
            self.in_flight.discard(lite_topic)
            if self._pending(lite_topic):
                self._offer(lite_topic)
            self.acked.set()
            self.acked = anyio.Event()
            resp = RemotingCommand.response_to(cmd)
        elif code == TRIGGER_LITE_DISPATCH:
            self.triggers += 1
            for lite_topic in sorted(self.subscribed):
                if self._pending(lite_topic):
                    self._offer(lite_topic)
            resp = RemotingCommand.response_to(cmd)
        else:
            await super().handle(session, cmd)
            return
        await session.send(resp)

    async def _pop(self, cmd: RemotingCommand) -> RemotingCommand:
        with anyio.move_on_after(int(cmd.ext_fields["pollTime"]) / 1000):
            while not self.events:
                await self._offered.wait()
        records: list[bytes] = []
        while self.events:
            lite_topic = self.events.pop(0)  # the event is consumed, whatever it finds
            if not self._pending(lite_topic):
                continue
            offset = self.committed.get(lite_topic, 0)
            self.in_flight.add(lite_topic)
            props = {PROPERTY_LITE_TOPIC: lite_topic, "INNER_MULTI_QUEUE_OFFSET": str(offset)}
            records.append(self.records.get((lite_topic, offset)) or encode_stored_message(
                TOPIC, self.lite[lite_topic][offset], props, queue_offset=offset,
            ))  # fmt: skip
        if not records:
            return RemotingCommand.response_to(cmd, _POLLING_TIMEOUT)
        fields = {"popTime": "1", "invisibleTime": cmd.ext_fields["invisibleTime"],
                  "reviveQid": "999", "orderCountInfo": ";".join("0" for _ in records)}  # fmt: skip
        return RemotingCommand.response_to(
            cmd, ResponseCode.SUCCESS, ext_fields=fields, body=b"".join(records)
        )


async def test_a_lite_topic_whose_event_the_broker_lost_is_delivered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(remoting_lite, "REDISPATCH_INTERVAL", 0.2)
    broker = FakeLiteBroker("broker-a")
    got = Collector(2)
    async with running(FakeCluster({"broker-a": [broker]})) as cluster:
        consumer = Consumer(
            "g", cluster.namesrv.address, handler=got, bind_topic=TOPIC,
            long_poll_timeout=0.5, request_timeout=2.0,
        )  # fmt: skip
        await consumer.subscribe_lite("room")
        async with consumer:
            with anyio.fail_after(10):
                acked = broker.acked.wait
                broker.add_lite("room", b"first")
                await acked()
                # Stored after the ack, its event lost: only a full dispatch finds it.
                broker.add_lite("room", b"second", event=False)
                await got.done.wait()
    assert got.got == [b"first", b"second"]
    assert broker.triggers >= 1
