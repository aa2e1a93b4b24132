"""Regression tests of the command line's defects (issue 32), each run as a user would,
against the real cluster."""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from aiorocket.cli import cli
from aiorocket.consumer import Consumer, PullConsumer
from aiorocket.errors import ConfigError, FilterExpressionError
from aiorocket.testing.broker import LocalRocketMQ

from .cli_helpers import invoke, one_line_error

pytestmark = [pytest.mark.integration]

BAD_SQL = "region = = 'eu'"


@pytest.fixture
def aio(rocketmq: LocalRocketMQ) -> Callable[..., Result]:
    return functools.partial(invoke, rocketmq.namesrv_addr)


@pytest.fixture
def topic(aio: Callable[..., Result], unique_name: Callable[[str], str]) -> str:
    """A topic with 1 queue per broker holding 3 messages: two from the eu region."""
    name = unique_name("cli")
    aio("topic", "create", name, "--queues", "1")
    for body, region in (("one", "eu"), ("two", "us"), ("three", "eu")):
        aio("produce", name, body, "-p", f"region={region}", "--tag", "t", "--key", f"k-{body}")
    return name


def test_an_invalid_sql_filter_is_refused_not_ignored(
    aio: Callable[..., Result], topic: str
) -> None:
    refused = aio("tail", topic, "--from", "earliest", "--sql", BAD_SQL, ok=False)
    assert refused.exit_code == 2 and refused.stdout == ""
    line = one_line_error(refused)
    assert "SQL92" in line and BAD_SQL in line and "column" in line
    matched = aio("tail", topic, "--from", "earliest", "--sql", "region = 'eu'", "--body-only")
    assert sorted(matched.stdout.split()) == ["one", "three"]


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_consumers_refuse_an_invalid_sql_filter_at_start(
    rocketmq: LocalRocketMQ, topic: str, unique_name: Callable[[str], str]
) -> None:
    consumer = Consumer(unique_name("g"), rocketmq.namesrv_addr, handler=lambda m: None)
    consumer.subscribe(topic, sql=BAD_SQL)
    with pytest.raises(FilterExpressionError) as caught:
        async with consumer:
            pytest.fail("started with a filter the broker cannot compile")
    assert caught.value.topic == topic and caught.value.expression == BAD_SQL
    assert isinstance(caught.value, ConfigError)  # a usage mistake, not retriable
    assert not caught.value.retriable
    pull = PullConsumer(unique_name("g"), rocketmq.namesrv_addr)
    pull.subscribe(topic, sql=BAD_SQL)
    with pytest.raises(FilterExpressionError):
        async with pull:
            pytest.fail("started with a filter the broker cannot compile")
    good = Consumer(unique_name("g"), rocketmq.namesrv_addr, handler=lambda m: None)
    good.subscribe(topic, sql="region = 'eu'")
    async with good:
        assert good.started


def test_a_message_too_large_is_one_line(
    aio: Callable[..., Result], topic: str, tmp_path: Path
) -> None:
    big = tmp_path / "big5MB.txt"
    big.write_bytes(b"x" * 5_000_000)
    result = aio("produce", topic, "--file", str(big), ok=False)
    assert result.exit_code == 2
    assert "exceeds the maximum" in one_line_error(result)
    # several sends in flight (a task group): still the first error, one line
    many = aio("produce", topic, "--file", str(big), "--count", "5", ok=False)
    assert many.exit_code == 2 and "exceeds the maximum" in one_line_error(many)


def test_usage_mistakes_name_the_option(
    aio: Callable[..., Result], rocketmq: LocalRocketMQ, topic: str
) -> None:
    bad_name = aio("topic", "create", "bad topic!", ok=False)
    assert bad_name.exit_code == 2 and "may only contain" in one_line_error(bad_name)
    assert "RESPONSE" not in bad_name.stderr
    delay = aio("produce", topic, "x", "--delay", "-5", ok=False)
    assert delay.exit_code == 2 and "--delay" in delay.stderr
    small = aio("tail", topic, "--from", "5", ok=False)
    assert small.exit_code == 2 and "--offset" in small.stderr
    nowhere = CliRunner(env={"AIOROCKET_NAMESRV_ADDR": ""}).invoke(cli, ["topic", "list"])
    assert nowhere.exit_code == 2
    assert "--namesrv" in one_line_error(nowhere) and "namesrv=" not in nowhere.stderr
    # -n is the NameServer everywhere, after the command too (as mqadmin takes it)
    here = CliRunner(env={"AIOROCKET_NAMESRV_ADDR": ""}).invoke(
        cli, ["topic", "route", topic, "-n", rocketmq.namesrv_addr]
    )
    assert here.exit_code == 0, here.stderr
    assert aio("tail", topic, "--from", "earliest", "-n", "x", ok=False).exit_code != 0


def test_tail_json_offsets_and_queues(aio: Callable[..., Result], topic: str) -> None:
    docs = [json.loads(line) for line in aio("tail", topic, "--from", "earliest", "--json")
            .stdout.splitlines()]  # fmt: skip
    assert sorted(d["body"] for d in docs) == ["one", "three", "two"]
    by_queue: dict[str, list[dict[str, object]]] = {}
    for d in docs:
        by_queue.setdefault(f"{d['broker']}:{d['queue']}", []).append(d)
    queue, msgs = max(by_queue.items(), key=lambda kv: len(kv[1]))
    offsets = sorted(int(str(m["queue_offset"])) for m in msgs)
    # one queue, from its second message on
    start = offsets[1] if len(offsets) > 1 else offsets[0]
    ranged = aio("tail", topic, "--queue", queue, "--offset", str(start), "--json").stdout
    got = [json.loads(line) for line in ranged.splitlines()]
    assert [g["queue_offset"] for g in got] == [o for o in offsets if o >= start]
    assert {f"{g['broker']}:{g['queue']}" for g in got} == {queue}
    # an offset range: [first, first + 1)
    one = aio("tail", topic, "--queue", queue, "--offset", str(offsets[0]),
              "--end-offset", str(offsets[0] + 1), "--json").stdout  # fmt: skip
    assert [json.loads(line)["queue_offset"] for line in one.splitlines()] == [offsets[0]]
    missing = aio("tail", topic, "--queue", "broker-z:9", ok=False)
    assert missing.exit_code == 2 and "broker-z:9" in one_line_error(missing)


def test_tail_and_message_get_show_what_an_operator_reads(
    aio: Callable[..., Result], topic: str
) -> None:
    lines = aio("tail", topic, "--from", "earliest", "--sql", "region = 'us'").stdout.splitlines()
    assert len(lines) == 1
    line = lines[0]
    assert re.match(r"broker-\w:0@\d+  \d{4}-\d\d-\d\dT\S+  [0-9A-F]{32}  ", line), line
    assert "tags=t" in line and "keys=k-two" in line and "region=us" in line
    assert line.endswith("| two") and "UNIQ_KEY" not in line
    doc = json.loads(aio("tail", topic, "--from", "earliest", "--sql", "region = 'us'",
                         "--json").stdout)  # fmt: skip
    shown = aio("message", "get", doc["offset_msg_id"]).stdout
    fields = dict(re.split(r"\s{2,}", row, maxsplit=1) for row in shown.splitlines() if row)
    assert fields["msg id"] == doc["msg_id"]
    assert fields["queue"] == f"{doc['broker']}:{doc['queue']} offset {doc['queue_offset']}"
    assert fields["tags"] == "t" and fields["keys"] == "k-two"
    assert fields["properties"] == "region=us"  # the application's own, apart
    assert "UNIQ_KEY=" in fields["system properties"]
    assert fields["born"].startswith(doc["born_time"]) and fields["stored"].startswith(
        doc["store_time"]
    )
    assert fields["reconsume times"] == "0"
    assert fields["body (3 B, text)"] == "two"
    assert "[" not in shown and "{" not in shown  # no Python reprs


def test_describe_a_group_without_members(
    aio: Callable[..., Result], topic: str, unique_name: Callable[[str], str]
) -> None:
    group = unique_name("g")
    aio("group", "create", group, "--retry-max", "3")
    aio("bench", "consume", topic, "--group", group, "-c", "3", "--timeout", "60")
    aio("produce", topic, "four")  # one message behind
    text = aio("group", "describe", group).stdout
    assert f"group {group}: no members connected" in text
    assert "retry max times: 3" in text
    assert "lag 1" in text
    doc = json.loads(aio("group", "describe", group, "--json").stdout)
    assert doc["members"] == [] and doc["config"]["retry_max_times"] == 3
    assert doc["lag"]["total"] == 1
    assert {q["topic"] for q in doc["lag"]["queues"]} >= {topic}


def test_bench_consume_leaves_no_group_behind(
    aio: Callable[..., Result], rocketmq: LocalRocketMQ, topic: str
) -> None:
    before = aio("group", "list").stdout
    result = json.loads(aio("bench", "consume", topic, "-c", "3", "--json").stdout)
    # read through the brokers' tools group: no group of its own (issue 42)
    assert result["messages"] == 3 and result["group"] == "TOOLS_CONSUMER"
    assert aio("group", "list").stdout == before


def test_one_local_broker_command_set(rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
                                      ) -> None:  # fmt: skip
    env = {**os.environ, "AIOROCKET_BROKER_DIR": str(rocketmq.base_dir)}

    def both(*args: str) -> tuple[subprocess.CompletedProcess[str], ...]:
        commands = (["aiorocket.cli", "broker"], ["aiorocket.testing.broker"])
        return tuple(
            subprocess.run(
                [sys.executable, "-m", *prefix, *args],
                capture_output=True, text=True, timeout=120, env=env,
            )
            for prefix in commands
        )

    new, old = both("--help")
    commands = {"start", "stop", "status", "resolve", "topic", "group"}
    for result in (new, old):
        assert result.returncode == 0
        listed = {ln.split()[0] for ln in result.stdout.split("Commands:")[1].splitlines()
                  if ln.strip()}  # fmt: skip
        assert listed == commands
    for spelling in ("fifo", "FIFO"):  # one --type, any case, in both
        name = unique_name("t")
        for result in both("topic", name, "--type", spelling, "--queues", "1"):
            assert result.returncode == 0, result.stderr
    group = unique_name("g")
    for result in both("group", group):
        assert result.returncode == 0, result.stderr
        assert f"consumer group {group}" in result.stdout
    for result in both("topic", "bad name"):  # the broker's refusal: one line
        assert result.returncode == 1
        assert result.stderr.startswith("error: ") and len(result.stderr.splitlines()) == 1


_APP = textwrap.dedent("""
    from fastapi import FastAPI
    from aiorocket.integrations.fastapi import RocketMQRouter

    router = RocketMQRouter(namesrv="127.0.0.1:1", producer_group="p")

    @router.subscriber("orders", group="g")
    async def process(msg) -> None: ...

    app = FastAPI()
    app.include_router(router)
""")


def test_an_unreachable_namesrv_under_uvicorn_is_one_clear_line(tmp_path: Path) -> None:
    (tmp_path / "app.py").write_text(_APP)
    result = subprocess.run(
        [sys.executable, "-m", "uvicorn", "app:app", "--port", "0"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode != 0
    log = result.stdout + result.stderr
    failed = [ln for ln in log.splitlines() if ln.startswith("service_start_failed")]
    assert len(failed) == 1 and "NameServerUnavailableError" in failed[0], log
    assert "127.0.0.1:1" in failed[0]
    # uvicorn still prints the exception it got, without the client's frames and causes
    assert "The above exception was the direct cause" not in log
    assert "aiorocket/remoting" not in log and "aiorocket/consumer" not in log
    assert len(log.splitlines()) < 30, log


def test_topic_create_refuses_an_existing_topic_update_asks_before_shrinking(
    aio: Callable[..., Result], rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    """`topic create` of an existing topic rewrote it (16 readable queues became 8,
    exit 0); now it is refused, and `topic update` asks before cutting readable queues."""
    name = unique_name("ledger")
    aio("topic", "create", name, "--queues", "4", "--broker", "broker-a")
    refused = aio("topic", "create", name, ok=False)
    assert refused.exit_code == 2
    assert "exists on broker-a with other settings" in one_line_error(refused)
    assert "topic update" in refused.stderr
    again = aio("topic", "create", name, "--queues", "4", "--broker", "broker-a")
    assert "4 queues" in again.stdout
    asked = aio("topic", "update", name, "--queues", "2", ok=False)  # no terminal, no --yes
    assert asked.exit_code == 2 and "pass --yes" in asked.stderr
    route = aio("topic", "route", name, "--json")
    assert [(b["read"], b["write"]) for b in json.loads(route.stdout)["brokers"]] == [(4, 4)]
    done = aio("topic", "update", name, "--queues", "2", "--yes", "--json")
    assert json.loads(done.stdout)["changes"] == [{
        "broker": "broker-a", "before": "4 read / 4 write queues, perm rw",
        "after": "2 read / 2 write queues, perm rw",
    }]  # fmt: skip
    grown = aio("topic", "update", name, "--read-queues", "3", "--write-queues", "3")
    assert "3 read / 3 write" in grown.stdout
