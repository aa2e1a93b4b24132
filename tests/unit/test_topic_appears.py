"""A subscribed topic created while the consumer runs is joined without warnings
(scripted cluster: the member-list query must not overtake our first heartbeat to a
broker we never talked to; on the real broker that race is a matter of timing)."""

from __future__ import annotations

import anyio
import pytest

from aiorocket.testing.logs import capture_logs

from .consumer_fakes import Collector, FakeBroker, FakeCluster, consumer_of, running

pytestmark = pytest.mark.anyio


async def test_a_topic_that_appears_is_joined_with_no_warning_but_its_appearance() -> None:
    broker = FakeBroker("broker-a", 0)
    cluster = FakeCluster({"broker-a": [broker]})
    cluster.topic_exists = False
    broker.add(0, b"m0")
    collector = Collector(1)
    with capture_logs() as logs:
        async with running(cluster):
            consumer = consumer_of(
                cluster, collector, rebalance_interval=0.1, heartbeat_interval=600.0
            )
            async with consumer:  # its first pass found no route
                assert not broker.heartbeats  # no broker of the topic known yet
                cluster.topic_exists = True
                with anyio.fail_after(10):
                    await collector.done.wait()
    assert collector.got == [b"m0"]
    warnings = [e["event"] for e in logs if e["log_level"] in ("warning", "error")]
    assert warnings == ["topic_has_no_route", "topic_route_appeared"]
