"""A broker group whose master is down: its queues stay allocated and its slave is read.

The real local cluster has no slaves, so the pull-from-slave path runs against the
scripted cluster of :mod:`tests.unit.consumer_fakes`; the allocation part is pure.
"""

from __future__ import annotations

import json

import anyio
import pytest

from aiorocket.client.broker import PULL_COMMIT_OFFSET
from aiorocket.consumer.allocation import allocate_averagely
from aiorocket.protocol.route import TopicRoute

from .consumer_fakes import TOPIC, Collector, FakeBroker, FakeCluster, consumer_of, running

pytestmark = pytest.mark.anyio


def route(a_addrs: dict[str, str]) -> TopicRoute:
    body = {
        "queueDatas": [
            {"brokerName": n, "readQueueNums": 4, "writeQueueNums": 4, "perm": 6}
            for n in ("a", "b")
        ],
        "brokerDatas": [
            {"cluster": "c", "brokerName": "a", "brokerAddrs": a_addrs},
            {"cluster": "c", "brokerName": "b", "brokerAddrs": {"0": "10.0.0.2:10911"}},
        ],
    }
    return TopicRoute.from_json("t", json.dumps(body).encode())


UP = route({"0": "10.0.0.1:10911", "1": "10.0.0.11:10911"})
MASTER_DOWN = route({"1": "10.0.0.11:10911"})


def test_read_queues_keep_a_group_whose_master_is_down() -> None:
    assert MASTER_DOWN.read_queues() == UP.read_queues()
    assert len(MASTER_DOWN.read_queues()) == 8


def test_consumers_that_saw_the_route_at_different_moments_own_every_queue_once() -> None:
    """One consumer refreshed its route before the master of ``a`` went down, the other
    after: the allocation must still give every queue to exactly one of them."""
    cids = ["c1", "c2"]
    mine1 = allocate_averagely("g", "c1", UP.read_queues(), cids)
    mine2 = allocate_averagely("g", "c2", MASTER_DOWN.read_queues(), cids)
    assert not set(mine1) & set(mine2)
    assert sorted([*mine1, *mine2]) == UP.read_queues()


def test_find_addr_prefers_the_asked_broker_then_the_master_then_a_slave() -> None:
    assert UP.find_addr("a") == ("10.0.0.1:10911", 0)
    assert UP.find_addr("a", 1) == ("10.0.0.11:10911", 1)
    assert UP.find_addr("a", 7) == ("10.0.0.1:10911", 0)
    assert MASTER_DOWN.find_addr("a") == ("10.0.0.11:10911", 1)
    assert MASTER_DOWN.find_addr("a", only_this=True) is None
    assert MASTER_DOWN.find_addr("nope") is None
    assert MASTER_DOWN.group_addrs() == {"a": "10.0.0.11:10911", "b": "10.0.0.2:10911"}
    assert MASTER_DOWN.all_addrs() == {"10.0.0.11:10911", "10.0.0.2:10911"}


def group_a() -> tuple[FakeBroker, FakeBroker, FakeBroker, FakeCluster]:
    """broker-a (a master and a slave) and broker-b (a master)."""
    master, slave = FakeBroker("broker-a", 0), FakeBroker("broker-a", 1)
    b = FakeBroker("broker-b", 0)
    return master, slave, b, FakeCluster({"broker-a": [master, slave], "broker-b": [b]})


async def test_a_group_whose_master_is_down_is_consumed_from_its_slave() -> None:
    master, slave, b, cluster = group_a()
    cluster.master_down.add("broker-a")
    slave.add(0, b"a0", b"a1")
    slave.add(1, b"a2")
    b.add(0, b"b0")
    handler = Collector(4)
    async with running(cluster), consumer_of(cluster, handler) as consumer:
        owned = {mq.broker_name for mq in consumer.assignment() if mq.topic == TOPIC}
        assert owned == {"broker-a", "broker-b"}
        with anyio.fail_after(10):
            await handler.done.wait()
    assert sorted(handler.got) == [b"a0", b"a1", b"a2", b"b0"]
    assert not master.pulls
    assert slave.pulls
    # A slave takes no commit inside a pull; it needs our subscription from a heartbeat.
    assert not any(int(p.ext_fields["sysFlag"]) & PULL_COMMIT_OFFSET for p in slave.pulls)
    assert slave.heartbeats


async def test_a_slave_that_refuses_reads_skips_nothing() -> None:
    """``slaveReadEnable=false``: the slave answers PULL_RETRY_IMMEDIATELY with a next
    offset past what it found. The consumer must stay where it is until it can read."""
    _, slave, _, cluster = group_a()
    cluster.master_down.add("broker-a")
    slave.serve_reads = False
    slave.add(0, b"a0", b"a1")
    handler = Collector(2)
    async with running(cluster), consumer_of(cluster, handler):
        with anyio.fail_after(10):
            while sum(p.ext_fields["queueId"] == "0" for p in slave.pulls) < 3:
                await slave.pulled.wait()
        assert handler.got == []
        assert all(p.ext_fields["queueOffset"] == "0" for p in slave.pulls)
        slave.serve_reads = True
        with anyio.fail_after(10):
            await handler.done.wait()
    assert sorted(handler.got) == [b"a0", b"a1"]


async def test_the_broker_suggested_by_a_pull_answer_serves_the_next_pull() -> None:
    master, slave, _, cluster = group_a()
    master.suggest = 1  # e.g. the master's page cache is full: read from the slave
    master.add(0, b"m0")
    slave.add(0, b"m0", b"m1")
    handler = Collector(1)
    async with running(cluster), consumer_of(cluster, handler):
        with anyio.fail_after(10):
            await handler.done.wait()
            while not any(p.ext_fields["queueId"] == "0" for p in slave.pulls):
                await slave.pulled.wait()
    first_on_slave = next(p for p in slave.pulls if p.ext_fields["queueId"] == "0")
    assert first_on_slave.ext_fields["queueOffset"] == "1"
