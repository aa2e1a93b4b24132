"""A seek (reset) cuts the pull in flight at once, however many times: the puller keeps
one cancel scope for many pulls (benchmarks/ceiling.py: a scope a pull cost a few per
cent of the client's CPU a message) and must open a new one after each cut."""

from __future__ import annotations

import anyio
import pytest

from aiorocket.consumer import ConsumeFromWhere, PullConsumer
from aiorocket.message import MessageQueue

from .consumer_fakes import FAST, TOPIC, FakeBroker, FakeCluster, running

pytestmark = pytest.mark.anyio


async def test_each_seek_cuts_the_parked_pull_and_pulling_goes_on() -> None:
    broker = FakeBroker("broker-a", 0)
    cluster = FakeCluster({"broker-a": [broker]})
    mq = MessageQueue(TOPIC, "broker-a", 0)
    async with running(cluster):
        consumer = PullConsumer(
            "g",
            cluster.namesrv.address,
            consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
            **{**FAST, "long_poll_timeout": 60.0, "pull_request_timeout": 90.0},
        )  # a parked pull ends only when cut, within the test
        consumer.assign([mq])
        broker.add(0, b"m0", b"m1", b"m2")
        async with consumer:
            with anyio.fail_after(10):
                got = await consumer.getmany(timeout=5)
                assert [m.body for m in got[mq]] == [b"m0", b"m1", b"m2"]
                for offset in (1, 2, 0):
                    while broker.pulls[-1].ext_fields["queueOffset"] != "3":
                        await broker.pulled.wait()  # parked at the end of the queue
                    pulled = broker.pulled
                    consumer.seek(mq, offset)
                    await pulled.wait()  # the next pull, long before the long poll ends
                    assert broker.pulls[-1].ext_fields["queueOffset"] == str(offset)
                    got = await consumer.getmany(timeout=5)
                    bodies = [m.body for m in got[mq]]
                    assert bodies == [b"m0", b"m1", b"m2"][offset:]
