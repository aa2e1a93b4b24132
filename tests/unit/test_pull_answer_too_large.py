"""A pull answer over the 16 MiB frame limit (fake broker).

A real broker with default settings never sends one (see
tests/integration/test_large_messages.py: it caps an answer at 256 KiB or one message),
but a broker configured with larger transfer limits can. The consumer must then ask
that queue for fewer messages, on the same connection, without disturbing other queues.
"""

from __future__ import annotations

import pytest

from .consumer_fakes import FakeBroker, FakeCluster, consume

pytestmark = pytest.mark.anyio

MIB = 1024 * 1024


async def test_answer_over_the_frame_limit_halves_that_queues_batch() -> None:
    broker = FakeBroker("broker-a", 0)
    cluster = FakeCluster({"broker-a": [broker]})
    big = [bytes([i]) * MIB for i in range(24)]  # 24 MiB if pulled in one answer
    broker.add(0, *big)
    broker.add(1, b"small-0", b"small-1")
    _, got, logs = await consume(cluster, len(big) + 2, consume_concurrency=1)
    assert [m.body for m in got if m.queue_id == 0] == big  # all of them, in order
    assert [m.body for m in got if m.queue_id == 1] == [b"small-0", b"small-1"]
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

    def retried_alone() -> bool:  # the error, and a retry after the backoff
        pulls = [c.ext_fields for c in broker.pulls]
        return sum(1 for f in pulls if f["queueId"] == "0" and f["maxMsgNums"] == "1") >= 2

    _, got, logs = await consume(cluster, 2, retried_alone)
    assert [m.body for m in got] == [b"small-0", b"small-1"]
    [error, *_] = [e for e in logs if e["event"] == "message_too_large_to_receive"]
    assert (error["queue"], error["offset"], error["log_level"]) == (0, 0, "error")
    assert error["size"] > 17 * MIB
    assert len(broker.server.sessions) == 1
