"""A stored record whose framing is broken never stalls its queue (fake broker).

A real broker only returns records it framed itself, so a record with a wrong magic
code or length can only be served by the fake. The consumer cannot know where the
records after such a record start: it takes the ones before it, pulls again from the
bad one, and when the bad one comes first, skips exactly that offset.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

import pytest

from aiorocket.protocol.codes import RequestCode
from aiorocket.protocol.command import RemotingCommand
from aiorocket.protocol.store_record import encode_stored_message
from aiorocket.testing.fake_remoting import ServerSession

from .consumer_fakes import TOPIC, FakeBroker, FakeCluster, consume

pytestmark = pytest.mark.anyio


def _bad_magic(record: bytes) -> bytes:
    return record[:4] + b"\x00\x00\x00\x00" + record[8:]


def _too_long(record: bytes) -> bytes:
    return struct.pack(">i", len(record) + 10_000) + record[4:]


def _truncated(record: bytes) -> bytes:
    return record[:60]


@pytest.mark.parametrize("corrupt", [_bad_magic, _too_long, _truncated])
async def test_a_record_with_broken_framing_is_skipped_and_the_queue_moves_on(
    corrupt: Callable[[bytes], bytes],
) -> None:
    broker = FakeBroker("broker-a", 0)
    cluster = FakeCluster({"broker-a": [broker]})
    broker.add(0, b"q0-0", b"q0-bad", b"q0-2", b"q0-3")
    broker.add(1, b"q1-0", b"q1-1")
    good = encode_stored_message(TOPIC, b"q0-bad", queue_id=0, queue_offset=1)
    broker.records[(0, 1)] = corrupt(good)
    # The flusher commits with the pulls: wait for queue 0's commit past all four.
    consumer, got, logs = await consume(cluster, 5, lambda: broker.offsets.get((TOPIC, 0)) == 4)
    assert consumer.undecodable_messages == 1
    assert sorted(m.body for m in got) == [b"q0-0", b"q0-2", b"q0-3", b"q1-0", b"q1-1"]
    assert broker.offsets[(TOPIC, 1)] == 2  # the other queue was not disturbed
    [event] = [e for e in logs if e["event"] == "undecodable_message"]
    assert (event["topic"], event["queue"], event["offset"]) == (TOPIC, 0, 1)
    assert event["action"] == "skipped" and event["log_level"] == "error"
    assert not [e for e in logs if e["event"] == "pull_failed"]


async def test_an_undecodable_message_the_broker_will_not_take_back_is_skipped() -> None:
    # This fake broker refuses CONSUMER_SEND_MSG_BACK: no dead-lettering, yet no stall.
    broker = FakeBroker("broker-a", 0)
    cluster = FakeCluster({"broker-a": [broker]})
    broker.add(0, b"q0-0", b"q0-bad", b"q0-2")
    broker.records[(0, 1)] = encode_stored_message(
        TOPIC, b"not zstd", {"UNIQ_KEY": "BAD1"}, queue_offset=1, sys_flag=0x1 | 2 << 8
    )
    _, got, logs = await consume(cluster, 2, lambda: broker.offsets.get((TOPIC, 0)) == 3)
    assert sorted(m.body for m in got) == [b"q0-0", b"q0-2"]
    [event] = [e for e in logs if e["event"] == "undecodable_message"]
    assert (event["offset"], event["msg_id"], event["action"]) == (1, "BAD1", "skipped")
    assert "decompress" in event["error"]
    assert [e for e in logs if e["event"] == "send_back_failed"]  # it was tried first


class DeadLetterOnSecondTryBroker(FakeBroker):
    """Takes CONSUMER_SEND_MSG_BACK, except the first one: that connection stalls (no
    answer, as across a partition), so the send-back times out."""

    def __init__(self) -> None:
        super().__init__("broker-a", 0)
        self.sent_back: list[int] = []  # commit-log offsets of the records taken
        self.send_back_tries = 0

    async def handle(self, session: ServerSession, cmd: RemotingCommand) -> None:
        if cmd.code != RequestCode.CONSUMER_SEND_MSG_BACK:
            await super().handle(session, cmd)
            return
        self.send_back_tries += 1
        if self.send_back_tries == 1:
            session.stall()
            return
        self.sent_back.append(int(cmd.ext_fields["offset"]))
        await session.send(RemotingCommand.response_to(cmd))


async def test_an_undecodable_message_is_not_skipped_when_its_dead_lettering_times_out() -> None:
    # A send-back that fails for want of the broker (a timeout, a lost connection) is
    # no refusal: the record must reach the DLQ once the broker is back, the queue's
    # offset staying before it meanwhile, never skipped past it.
    broker = DeadLetterOnSecondTryBroker()
    cluster = FakeCluster({"broker-a": [broker]})
    broker.add(0, b"q0-0", b"q0-bad", b"q0-2")
    broker.records[(0, 1)] = encode_stored_message(
        TOPIC, b"not zstd", {"UNIQ_KEY": "BAD1"}, queue_offset=1, sys_flag=0x1 | 2 << 8,
        commit_log_offset=777,
    )  # fmt: skip
    _, got, logs = await consume(
        cluster, 2, lambda: broker.offsets.get((TOPIC, 0)) == 3, request_timeout=0.5
    )
    assert sorted(m.body for m in got) == [b"q0-0", b"q0-2"]
    assert broker.send_back_tries >= 2
    assert broker.sent_back == [777]
    actions = [e["action"] for e in logs if e["event"] == "undecodable_message"]
    assert actions == ["dead_lettered"]
