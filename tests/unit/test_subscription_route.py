"""Subscriptions (tag parsing, Java hash codes), route parsing, NameServer failover."""

from __future__ import annotations

import json

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st

from aiorocket.client.namesrv import NameServerClient, parse_namesrv_addrs
from aiorocket.errors import ConfigError, ProtocolError, TopicNotExistError
from aiorocket.message import MessageQueue
from aiorocket.protocol.codes import ResponseCode
from aiorocket.protocol.command import RemotingCommand
from aiorocket.protocol.route import TopicRoute
from aiorocket.protocol.subscription import Subscription, java_string_hash, parse_tags
from aiorocket.remoting.pool import ConnectionPool
from aiorocket.results import Reconsume, failure_delay_level
from aiorocket.testing.fake_remoting import FakeRemotingServer, ServerSession


def _reference_java_hash(s: str) -> int:
    # Straight from the Java definition: s[0]*31^(n-1) + ... over UTF-16 code units.
    units = [
        int.from_bytes(s.encode("utf-16-be")[i : i + 2], "big")
        for i in range(0, len(s.encode("utf-16-be")), 2)
    ]
    h = 0
    for u in units:
        h = h * 31 + u
    h %= 2**32
    return h - 2**32 if h >= 2**31 else h


def test_java_hash_known_values() -> None:
    assert java_string_hash("") == 0
    assert java_string_hash("TagA") == 2598919  # "TagA".hashCode() in Java
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("😀") == _reference_java_hash("😀")  # surrogate pair


@given(st.text(max_size=30))
def test_java_hash_matches_reference(s: str) -> None:
    assert java_string_hash(s) == _reference_java_hash(s)


def test_parse_tags() -> None:
    assert parse_tags("*") == frozenset()
    assert parse_tags("") == frozenset()
    assert parse_tags(" a || b ||  || c ") == {"a", "b", "c"}


def test_subscription_filters_and_heartbeat_form() -> None:
    sub = Subscription("t", "a || b")
    assert sub.accepts_tag("a") and sub.accepts_tag("b")
    assert not sub.accepts_tag("c") and not sub.accepts_tag(None)
    hb = sub.to_heartbeat()
    assert hb["tagsSet"] == ["a", "b"]
    assert hb["codeSet"] == [java_string_hash("a"), java_string_hash("b")]
    assert hb["expressionType"] == "TAG"
    every = Subscription("t", "  ")
    assert every.expression == "*" and every.accepts_tag(None)
    sql = Subscription("t", "a > 1", "SQL92")
    assert sql.accepts_tag("anything")
    with pytest.raises(ConfigError):
        Subscription("t", " ", "SQL92")
    with pytest.raises(ConfigError):
        Subscription("", "*")


def test_handler_results() -> None:
    assert failure_delay_level(None) is None
    assert failure_delay_level(True) is None
    assert failure_delay_level(False) == 0
    assert failure_delay_level(Reconsume(3)) == 3
    with pytest.raises(TypeError):
        failure_delay_level("ok")  # type: ignore[arg-type]


ROUTE = {
    "queueDatas": [
        {"brokerName": "b", "readQueueNums": 2, "writeQueueNums": 2, "perm": 6, "topicSysFlag": 0},
        {"brokerName": "a", "readQueueNums": 3, "writeQueueNums": 1, "perm": 6, "topicSysFlag": 0},
        {"brokerName": "c", "readQueueNums": 4, "writeQueueNums": 4, "perm": 2, "topicSysFlag": 0},
    ],
    "brokerDatas": [
        {"cluster": "x", "brokerName": "a", "brokerAddrs": {"0": "127.0.0.1:1"}},
        {
            "cluster": "x",
            "brokerName": "b",
            "brokerAddrs": {"0": "127.0.0.1:2", "1": "127.0.0.1:3"},
        },
        {"cluster": "x", "brokerName": "c", "brokerAddrs": {"0": "127.0.0.1:4"}},
    ],
}


def test_route_queues() -> None:
    route = TopicRoute.from_json("t", json.dumps(ROUTE).encode())
    reads = route.read_queues()
    assert reads == sorted(reads)
    assert [(q.broker_name, q.queue_id) for q in reads] == [
        ("a", 0),
        ("a", 1),
        ("a", 2),
        ("b", 0),
        ("b", 1),
    ]  # c is write-only
    writes = route.write_queues()
    assert [(q.broker_name, q.queue_id) for q in writes] == [
        ("a", 0),
        ("b", 0),
        ("b", 1),
        ("c", 0),
        ("c", 1),
        ("c", 2),
        ("c", 3),
    ]
    assert route.master_addr("b") == "127.0.0.1:2"
    assert MessageQueue("t", "a", 0) in reads


@pytest.mark.parametrize("body", [b"not json", b"[]", b'{"queueDatas":[{"brokerName":"a"}]}'])
def test_route_malformed(body: bytes) -> None:
    with pytest.raises(ProtocolError):
        TopicRoute.from_json("t", body)


def test_namesrv_addr_parsing() -> None:
    assert parse_namesrv_addrs("a:1;b:2") == ["a:1", "b:2"]
    assert parse_namesrv_addrs("a:1, b:2") == ["a:1", "b:2"]
    for bad in ("", "nohost", "a:b", ";"):
        with pytest.raises(ConfigError):
            parse_namesrv_addrs(bad)


@pytest.mark.anyio
async def test_namesrv_failover_and_errors() -> None:
    async def good(session: ServerSession, cmd: RemotingCommand) -> None:
        topic = cmd.ext_fields["topic"]
        assert cmd.ext_fields.get("acceptStandardJsonOnly") == "true"
        if topic == "missing":
            await session.send(
                RemotingCommand.response_to(cmd, ResponseCode.TOPIC_NOT_EXIST, "no route")
            )
        else:
            await session.send(RemotingCommand.response_to(cmd, body=json.dumps(ROUTE).encode()))

    async def dead(session: ServerSession, cmd: RemotingCommand) -> None:
        await session.close()

    async with (
        FakeRemotingServer(dead) as first,
        FakeRemotingServer(good) as second,
        ConnectionPool() as pool,
    ):
        ns = NameServerClient(pool, [first.address, second.address])
        route = await ns.get_route("t")
        assert route.master_addr("a") == "127.0.0.1:1"
        assert ns.cached_route("t") is route
        with pytest.raises(TopicNotExistError) as info:
            await ns.query_route("missing")
        assert info.value.code == ResponseCode.TOPIC_NOT_EXIST
        # The good server is remembered: the dead one is not asked again.
        before = len(first.received)
        await ns.query_route("t")
        assert len(first.received) == before


@pytest.mark.anyio
async def test_route_cache_is_refreshed_in_the_background() -> None:
    queues = {"n": 2}
    served_after_change = 0
    two_served = anyio.Event()

    async def serve(session: ServerSession, cmd: RemotingCommand) -> None:
        nonlocal served_after_change
        route = json.loads(json.dumps(ROUTE))
        route["queueDatas"][0]["readQueueNums"] = queues["n"]
        await session.send(RemotingCommand.response_to(cmd, body=json.dumps(route).encode()))
        if queues["n"] == 6:
            served_after_change += 1
            if served_after_change == 2:
                two_served.set()

    async with FakeRemotingServer(serve) as server, ConnectionPool() as pool:
        ns = NameServerClient(pool, server.address, refresh_interval=0.05)
        assert len((await ns.get_route("t")).read_queues()) == 5
        queues["n"] = 6  # the topic grew on broker b
        async with anyio.create_task_group() as tg:
            await tg.start(ns.run_refresher)
            with anyio.fail_after(5):
                # Refreshes are sequential: once a second one was served, the first
                # answer has been applied to the cache.
                await two_served.wait()
            tg.cancel_scope.cancel()
        route = ns.cached_route("t")
        assert route is not None and len(route.read_queues()) == 9
