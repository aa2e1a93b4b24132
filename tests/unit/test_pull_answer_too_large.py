"""A pull answer over the 16 MiB frame limit (fake broker).

A real broker with default settings never sends one (see
tests/integration/test_large_messages.py: it caps an answer at 256 KiB or one message),
but a broker configured with larger transfer limits can. The consumer must then ask
that queue for fewer messages, on the same connection, without disturbing other queues.
"""

from __future__ import annotations

import anyio
import pytest

from aiorocket.consumer import ConsumerMessage
from aiorocket.testing.logs import capture_logs

from .consumer_fakes import FakeBroker, FakeCluster, consumer_of, running

pytestmark = pytest.mark.anyio

MIB = 1024 * 1024


async def test_answer_over_the_frame_limit_halves_that_queues_batch() -> None:
    broker = FakeBroker("broker-a", 0)
    cluster = FakeCluster({"broker-a": [broker]})
    big = [bytes([i]) * MIB for i in range(24)]  # 24 MiB if pulled in one answer
    broker.add(0, *big)
    broker.add(1, b"small-0", b"small-1")
    got: dict[int, list[bytes]] = {0: [], 1: []}
    done = anyio.Event()

    async def handle(msg: ConsumerMessage) -> None:
        got[msg.queue_id].append(msg.body)
        if len(got[0]) == len(big) and len(got[1]) == 2:
            done.set()

    async with running(cluster):
        consumer = consumer_of(cluster, handle, consume_concurrency=1)
        with capture_logs() as logs:
            async with consumer:
                with anyio.fail_after(30):
                    await done.wait()
    assert got[0] == big  # all of them, in order
    assert got[1] == [b"small-0", b"small-1"]
    shrunk = [e for e in logs if e["event"] == "pull_answer_too_large"]
    assert [(e["offset"], e["batch"], e["next_batch"]) for e in shrunk] == [(0, 32, 16), (0, 16, 8)]
    assert all(e["queue"] == 0 and e["size"] > 16 * MIB for e in shrunk)
    assert not [e for e in logs if e["event"] in ("pull_failed", "protocol_error")]
    assert len(broker.server.sessions) == 1  # one connection throughout
    asked = [
        int(c.ext_fields["maxMsgNums"]) for c in broker.pulls if c.ext_fields["queueId"] == "0"
    ]
    assert asked[:5] == [32, 16, 8, 8, 8]


async def test_one_message_over_the_frame_limit_is_a_clear_error_and_disturbs_nothing() -> None:
    broker = FakeBroker("broker-a", 0)
    cluster = FakeCluster({"broker-a": [broker]})
    broker.add(0, bytes(17 * MIB))  # no batch size makes this fit
    broker.add(1, b"small-0", b"small-1")
    got: list[bytes] = []
    done = anyio.Event()

    async def handle(msg: ConsumerMessage) -> None:
        got.append(msg.body)
        if len(got) == 2:
            done.set()

    def single_pulls() -> int:
        return sum(
            1
            for c in broker.pulls
            if c.ext_fields["queueId"] == "0" and c.ext_fields["maxMsgNums"] == "1"
        )

    async with running(cluster):
        consumer = consumer_of(cluster, handle)
        with capture_logs() as logs:
            async with consumer:
                with anyio.fail_after(30):
                    await done.wait()
                    while single_pulls() < 2:  # the error, and a retry after the backoff
                        await broker.pulled.wait()
    assert got == [b"small-0", b"small-1"]
    [error, *_] = [e for e in logs if e["event"] == "message_too_large_to_receive"]
    assert (error["queue"], error["offset"], error["log_level"]) == (0, 0, "error")
    assert error["size"] > 17 * MIB
    assert len(broker.server.sessions) == 1
