"""A stored record whose framing is broken never stalls its queue (fake broker).

A real broker only returns records it framed itself, so a record with a wrong magic
code or length can only be served by the fake. The consumer cannot know where the
records after such a record start: it takes the ones before it, pulls again from the
bad one, and when the bad one comes first, skips exactly that offset.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

import anyio
import pytest

from aiorocket.consumer import ConsumerMessage
from aiorocket.protocol.store_record import encode_stored_message
from aiorocket.testing.logs import capture_logs

from .consumer_fakes import TOPIC, FakeBroker, FakeCluster, consumer_of, running

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
    got: list[bytes] = []
    done = anyio.Event()

    async def handle(msg: ConsumerMessage) -> None:
        got.append(msg.body)
        if len(got) == 5:
            done.set()

    async with running(cluster):
        consumer = consumer_of(cluster, handle)
        with capture_logs() as logs:
            async with consumer:
                with anyio.fail_after(10):
                    await done.wait()
                    while broker.offsets.get((TOPIC, 0)) != 4:
                        await broker.pulled.wait()  # the flusher commits with the pulls
        assert consumer.undecodable_messages == 1
    assert sorted(got) == [b"q0-0", b"q0-2", b"q0-3", b"q1-0", b"q1-1"]
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
    got: list[bytes] = []
    done = anyio.Event()

    async def handle(msg: ConsumerMessage) -> None:
        got.append(msg.body)
        if len(got) == 2:
            done.set()

    async with running(cluster):
        consumer = consumer_of(cluster, handle)
        with capture_logs() as logs:
            async with consumer:
                with anyio.fail_after(10):
                    await done.wait()
                    while broker.offsets.get((TOPIC, 0)) != 3:
                        await broker.pulled.wait()
    assert sorted(got) == [b"q0-0", b"q0-2"]
    [event] = [e for e in logs if e["event"] == "undecodable_message"]
    assert (event["offset"], event["msg_id"], event["action"]) == (1, "BAD1", "skipped")
    assert "decompress" in event["error"]
    assert [e for e in logs if e["event"] == "send_back_failed"]  # it was tried first
