"""mqadmin and Dashboard parity (issue 32): each operation through aiorocket.admin and the
``aiorocket`` command (``--json`` and the table), against the real cluster."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable

import anyio
import pytest
from click.testing import Result

from aiorocket.admin import Admin, ExponentialRetry
from aiorocket.consumer import ConsumeFromWhere, Consumer, ConsumerMessage
from aiorocket.errors import (
    AccessDeniedError,
    ConfigError,
    GroupNotFoundError,
    NoRouteError,
    TopicNotExistError,
)
from aiorocket.message import Message
from aiorocket.producer import Producer
from aiorocket.testing.broker import LocalRocketMQ

from .cli_helpers import invoke, one_line_error
from .helpers import eventually

pytestmark = [pytest.mark.integration]

FAST = {"persist_offset_interval": 0.2, "long_poll_timeout": 1.0}


@pytest.fixture
def aio(rocketmq: LocalRocketMQ) -> Callable[..., Result]:
    return functools.partial(invoke, rocketmq.namesrv_addr)


def jdoc(aio: Callable[..., Result], *args: str) -> object:
    return json.loads(aio(*args, "--json").stdout)


def run_admin(rocketmq: LocalRocketMQ, op: Callable[[Admin], object]) -> object:
    async def go() -> object:
        async with Admin(rocketmq.namesrv_addr) as admin:
            return await op(admin)  # type: ignore[misc]

    return anyio.run(go)


def test_cluster_list_status_and_config(aio: Callable[..., Result], rocketmq: LocalRocketMQ
                                        ) -> None:  # fmt: skip
    brokers = jdoc(aio, "cluster", "list")
    assert isinstance(brokers, list)
    assert {b["broker"]: b["address"] for b in brokers} == rocketmq.broker_addrs
    for b in brokers:
        assert b["version"].startswith("V5_") and b["broker_id"] == 0 and b["error"] is None
        assert b["put_today"] >= 0 and b["put_tps"] >= 0
    table = aio("cluster", "list").stdout
    assert all(name in table for name in rocketmq.broker_addrs) and "V5_" in table
    status = jdoc(aio, "cluster", "status", "broker-b")
    assert isinstance(status, dict) and status["address"] == rocketmq.broker_addrs["broker-b"]
    assert "bootTimestamp" in status["runtime"] and status["boot_ms"] > 0
    missing = aio("cluster", "status", "broker-z", ok=False)
    assert missing.exit_code == 3 and "broker-a" in one_line_error(missing)
    assert jdoc(aio, "cluster", "config", "broker-a", "enablePropertyFilter") == {
        "enablePropertyFilter": "true"
    }
    assert "brokerName=broker-a" in aio("cluster", "config", "broker-a").stdout.splitlines()


def test_set_broker_config(aio: Callable[..., Result], rocketmq: LocalRocketMQ) -> None:
    # commercialBaseCount: read by no open-source code path, so safe on a shared cluster
    key = "commercialBaseCount"
    before = jdoc(aio, "cluster", "config", "broker-b", key)
    assert isinstance(before, dict)
    changed = jdoc(aio, "cluster", "set-config", key, "7", "--broker", "broker-b")
    assert changed == [{"broker": "broker-b", "key": key, "old": before[key], "new": "7"}]
    try:
        assert jdoc(aio, "cluster", "config", "broker-b", key) == {key: "7"}
        assert jdoc(aio, "cluster", "config", "broker-a", key) == {key: before[key]}
    finally:
        aio("cluster", "set-config", key, before[key], "--broker", "broker-b")
    unknown = aio("cluster", "set-config", "noSuchKey", "1", ok=False)
    assert unknown.exit_code == 2 and "noSuchKey" in one_line_error(unknown)

    async def refused(admin: Admin) -> None:
        with pytest.raises(AccessDeniedError):  # the broker's black list
            await admin.update_broker_config("configBlackList", "x", brokers=["broker-a"])
        with pytest.raises(ConfigError):
            await admin.update_broker_config("a=b", "1")

    run_admin(rocketmq, refused)


def test_topic_delete_and_perm(
    aio: Callable[..., Result], rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    topic = unique_name("parity")
    aio("topic", "create", topic, "--queues", "2")
    aio("produce", topic, "a", "b")
    drained = jdoc(aio, "topic", "perm", topic, "r")
    assert isinstance(drained, dict)
    assert {b["broker"]: b["perm"] for b in drained["brokers"]} == {"broker-a": 4, "broker-b": 4}
    refused = aio("produce", topic, "c", ok=False)  # read-only: nothing can be sent
    assert refused.exit_code == 1 and "error:" in one_line_error(refused)
    read = aio("tail", topic, "--from", "earliest", "--body-only").stdout.split()
    assert sorted(read) == ["a", "b"]  # still readable
    one = jdoc(aio, "topic", "perm", topic, "rw", "--broker", "broker-b")
    assert isinstance(one, dict)
    assert {b["broker"]: b["perm"] for b in one["brokers"]} == {"broker-a": 4, "broker-b": 6}
    aio("produce", topic, "c")  # broker-b takes it

    async def bad_perm(admin: Admin) -> None:
        with pytest.raises(ConfigError):
            await admin.set_topic_perm(topic, "rwx")
        with pytest.raises(NoRouteError):  # a route without writable queues stays so
            await admin.set_topic_perm(topic, "none")
            async with Producer("parity-p", rocketmq.namesrv_addr) as p:
                await p.send(Message(topic, b"x"))

    run_admin(rocketmq, bad_perm)
    refused = aio("topic", "delete", topic, ok=False)  # no terminal, no --yes
    assert refused.exit_code == 2 and "--yes" in one_line_error(refused)
    deleted = jdoc(aio, "topic", "delete", topic, "--yes")
    assert deleted == {"topic": topic, "deleted_from": ["broker-a", "broker-b"]}
    assert topic not in jdoc(aio, "topic", "list")  # type: ignore[operator]
    gone = aio("topic", "route", topic, ok=False)
    assert gone.exit_code == 3
    again = aio("topic", "delete", topic, "--yes", ok=False)
    assert again.exit_code == 3 and topic in one_line_error(again)


def test_group_create_update_config_delete(
    aio: Callable[..., Result], rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    group = unique_name("g")
    created = jdoc(aio, "group", "create", group, "--retry-max", "2", "--orderly",
                   "--retry-policy", "exponential:1s:1m:3")  # fmt: skip
    assert isinstance(created, dict)
    assert created["brokers"] == ["broker-a", "broker-b"]
    assert created["retry_max_times"] == 2 and created["orderly"] is True
    assert created["retry_policy"] == {"type": "EXPONENTIAL", "initial_ms": 1000,
                                       "max_ms": 60000, "multiplier": 3}  # fmt: skip
    updated = jdoc(aio, "group", "update", group, "--retry-max", "4", "--no-consume",
                   "--retry-policy", "customized:1s,5s")  # fmt: skip
    assert isinstance(updated, dict)
    assert updated["retry_max_times"] == 4 and updated["orderly"] is True  # kept
    assert updated["consume_enable"] is False
    assert updated["retry_policy"] == {"type": "CUSTOMIZED", "delays_ms": [1000, 5000]}
    # what the brokers hold, read without aiorocket.admin
    for broker in rocketmq.broker_addrs:
        raw = anyio.run(rocketmq.group_config, group, broker)
        assert raw is not None and raw["retryMaxTimes"] == 4 and raw["consumeEnable"] is False
    text = aio("group", "config", group).stdout
    assert "retry max times: 4" in text and "orderly (FIFO): yes" in text
    bad = aio("group", "create", group, "--retry-policy", "linear:1s", ok=False)
    assert bad.exit_code == 2 and "exponential" in bad.stderr
    nothing = aio("group", "update", group, ok=False)
    assert nothing.exit_code == 2 and "nothing to change" in one_line_error(nothing)
    missing = aio("group", "update", unique_name("missing"), "--retry-max", "1", ok=False)
    assert missing.exit_code == 3
    deleted = jdoc(aio, "group", "delete", group, "--yes")
    assert deleted == {"group": group, "deleted_from": ["broker-a", "broker-b"],
                       "offsets_kept": False}  # fmt: skip
    assert group not in jdoc(aio, "group", "list")  # type: ignore[operator]

    async def typed(admin: Admin) -> None:
        with pytest.raises(GroupNotFoundError):
            await admin.delete_group(group)
        assert await admin.delete_group(group, missing_ok=True) == []
        with pytest.raises(ConfigError):
            await admin.create_group(group, retry_policy=ExponentialRetry(0, 10, 2))
        with pytest.raises(ConfigError):
            await admin.create_group("bad group")

    run_admin(rocketmq, typed)


def test_progress_of_every_group_most_behind_first(
    aio: Callable[..., Result], rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    topic, behind, caught_up = unique_name("parity"), unique_name("g"), unique_name("g")
    aio("topic", "create", topic, "--queues", "1")
    aio("produce", topic, *[f"m{i}" for i in range(6)])
    anyio.run(rocketmq.set_group_offsets, topic, behind, 0)  # nothing consumed: lag 6
    aio("bench", "consume", topic, "--group", caught_up, "-c", "6", "--timeout", "60")
    rows = jdoc(aio, "group", "progress")
    assert isinstance(rows, list)
    mine = {r["group"]: r for r in rows if r["group"] in (behind, caught_up)}
    assert mine[behind]["lag"] == 6 and mine[caught_up]["lag"] == 0
    assert topic in mine[behind]["topics"] and mine[caught_up]["last_consumed_ms"] > 0
    lags = [r["lag"] for r in rows]
    assert lags == sorted(lags, reverse=True)
    assert [r["group"] for r in rows].index(behind) < [r["group"] for r in rows].index(
        caught_up
    )
    only = jdoc(aio, "group", "progress", "--min-lag", "6")
    assert isinstance(only, list) and behind in [r["group"] for r in only]
    assert caught_up not in [r["group"] for r in only]
    assert behind in aio("group", "progress").stdout


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_producer_connections(rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
                                    ) -> None:  # fmt: skip
    group, client_id = unique_name("pg"), unique_name("client")
    async with Producer(group, rocketmq.namesrv_addr, client_id=client_id) as producer:
        await producer.send(Message("AIOROCKET_HEALTH", b"x"))
        result = await anyio.to_thread.run_sync(
            lambda: invoke(rocketmq.namesrv_addr, "producer", "list", "--group", group, "--json")
        )
        rows = json.loads(result.stdout)
        assert {(r["client_id"], r["language"]) for r in rows} == {(client_id, "PYTHON")}
        assert {r["broker"] for r in rows} <= set(rocketmq.broker_addrs) and rows
        assert all(r["address"].startswith("127.0.0.1:") for r in rows)


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_consume_directly_from_the_cli(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    topic, group = unique_name("parity"), unique_name("g")
    await rocketmq.create_topic(topic, queues=1)
    async with Producer("parity-p", rocketmq.namesrv_addr) as producer:
        sent = await producer.send(Message(topic, b"look at me"))
    seen: list[bytes] = []

    async def handle(msg: ConsumerMessage) -> None:
        seen.append(msg.body)

    consumer = Consumer(group, rocketmq.namesrv_addr, handler=handle,
                        consume_from_where=ConsumeFromWhere.LAST_OFFSET, **FAST)  # fmt: skip
    consumer.subscribe(topic)
    async with consumer:
        result = await anyio.to_thread.run_sync(lambda: invoke(
            rocketmq.namesrv_addr, "group", "consume-directly", group, sent.msg_id,
            "--topic", topic, "--json",
        ))  # fmt: skip
        doc = json.loads(result.stdout)
        assert doc["result"] == "CR_SUCCESS" and doc["client_id"] == consumer.client_id
        assert seen == [b"look at me"]  # LAST_OFFSET: only the direct call delivered it
    nobody = await anyio.to_thread.run_sync(lambda: invoke(
        rocketmq.namesrv_addr, "group", "consume-directly", group, sent.offset_msg_id, ok=False
    ))  # fmt: skip
    assert nobody.exit_code == 1 and "no members" in one_line_error(nobody)


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_dead_letters_listed_and_resent(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    topic, group = unique_name("parity"), unique_name("g")
    await rocketmq.create_topic(topic, queues=1)
    async with Producer("parity-p", rocketmq.namesrv_addr) as producer:
        for i in range(3):
            await producer.send(Message(topic, b"poison-%d" % i, tags="t", keys=[f"k{i}"],
                                        properties={"n": str(i)}))  # fmt: skip

    async def handle(msg: ConsumerMessage) -> None:
        raise RuntimeError("poison")

    consumer = Consumer(group, rocketmq.namesrv_addr, handler=handle, max_reconsume_times=0,
                        consume_from_where=ConsumeFromWhere.FIRST_OFFSET, **FAST)  # fmt: skip
    consumer.subscribe(topic)
    async with consumer, Admin(rocketmq.namesrv_addr) as admin:

        async def all_dead() -> bool:
            return len(await admin.dead_letters(group)) == 3

        await eventually(all_dead, timeout=60)
    namesrv = rocketmq.namesrv_addr

    def cli(*args: str, ok: bool = True) -> Result:
        return invoke(namesrv, *args, ok=ok)

    listed = json.loads((await anyio.to_thread.run_sync(
        lambda: cli("dlq", "list", group, "--json"))).stdout)  # fmt: skip
    assert sorted(d["body"] for d in listed) == ["poison-0", "poison-1", "poison-2"]
    assert {d["original_topic"] for d in listed} == {topic}
    assert all(d["properties"]["n"] == d["body"][-1] for d in listed)
    async with Admin(namesrv) as admin:
        before = (await admin.topic_stats(topic)).messages
        dry = await admin.resend_dead_letters(group, everything=True, dry_run=True)
        assert len(dry) == 3 and all(r.new_msg_id == "" for r in dry)
        assert (await admin.topic_stats(topic)).messages == before  # nothing sent
        with pytest.raises(ConfigError):
            await admin.resend_dead_letters(group, key="k0", everything=True)
    by_key = json.loads((await anyio.to_thread.run_sync(
        lambda: cli("dlq", "resend", group, "--key", "k1", "--yes", "--json"))).stdout)  # fmt: skip
    # to the group's retry topic: no other group of the topic gets the copy
    retry = f"%RETRY%{group}"
    assert [m["topic"] for m in by_key["messages"]] == [retry]
    new_id = by_key["messages"][0]["new_msg_id"]
    async with Admin(namesrv) as admin:
        copy = await admin.get_message(new_id, retry)
        assert copy.body == b"poison-1" and copy.tags == "t" and copy.keys == ["k1"]
        assert copy.properties["n"] == "1" and copy.properties["RETRY_TOPIC"] == topic
        assert (await admin.topic_stats(topic)).messages == before
    one = listed[0]
    by_id = json.loads((await anyio.to_thread.run_sync(lambda: cli(
        "dlq", "resend", group, "--msg-id", one["msg_id"], "--yes", "--json"))).stdout)  # fmt: skip
    assert [m["msg_id"] for m in by_id["messages"]] == [one["msg_id"]]
    dry_cli = json.loads((await anyio.to_thread.run_sync(lambda: cli(
        "dlq", "resend", group, "--all", "--dry-run", "--json"))).stdout)  # fmt: skip
    assert dry_cli["dry_run"] is True and len(dry_cli["messages"]) == 3
    refused = await anyio.to_thread.run_sync(lambda: cli("dlq", "resend", group, "--all",
                                                         ok=False))  # fmt: skip
    assert refused.exit_code == 2 and "--yes" in one_line_error(refused)
    none = await anyio.to_thread.run_sync(lambda: cli("dlq", "resend", group, "--key", "nope",
                                                      "--yes", ok=False))  # fmt: skip
    assert none.exit_code == 3
    # a group that does not exist: said, not an empty DLQ (issue 42)
    missing = await anyio.to_thread.run_sync(lambda: cli("dlq", "list", unique_name("g"),
                                                         "--json", ok=False))  # fmt: skip
    assert missing.exit_code == 3 and "does not exist" in one_line_error(missing)
    with pytest.raises(TopicNotExistError):
        async with Admin(namesrv) as admin:
            await admin.route(f"%DLQ%{unique_name('g')}")


def test_a_queue_by_offset_range(
    aio: Callable[..., Result], rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    topic = unique_name("parity")
    aio("topic", "create", topic, "--queues", "1", "--broker", "broker-a")
    aio("produce", topic, *[f"m{i}" for i in range(5)])

    async def read(admin: Admin) -> None:
        every = await admin.read_queue(topic, "broker-a", 0)
        assert [m.body for m in every] == [b"m%d" % i for i in range(5)]
        middle = await admin.read_queue(topic, "broker-a", 0, 1, 4)
        assert [m.queue_offset for m in middle] == [1, 2, 3]
        assert len(await admin.read_queue(topic, "broker-a", 0, 2, limit=2)) == 2
        with pytest.raises(TopicNotExistError):
            await admin.read_queue(topic, "broker-b", 0)
        with pytest.raises(ConfigError):
            await admin.read_queue(topic, "broker-a", 0, -1)

    run_admin(rocketmq, read)
    # the command line's view of the same range
    shown = aio("tail", topic, "--queue", "broker-a:0", "--offset", "1", "--end-offset", "4",
                "--json").stdout  # fmt: skip
    assert [json.loads(line)["body"] for line in shown.splitlines()] == ["m1", "m2", "m3"]
