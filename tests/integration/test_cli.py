"""The ``aiorocket`` command line against the real broker (click's CliRunner, in process)."""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable

import pytest
from click.testing import CliRunner, Result

from aiorocket.cli import cli
from aiorocket.testing.broker import LocalRocketMQ

from .cli_helpers import invoke, one_line_error

pytestmark = [pytest.mark.integration]


@pytest.fixture
def aio(rocketmq: LocalRocketMQ) -> Callable[..., Result]:
    """Run ``aiorocket ARGS...`` against the local broker."""
    return functools.partial(invoke, rocketmq.namesrv_addr)


def test_produce_n_then_tail_n_returns_the_same_bodies(
    aio: Callable[..., Result], unique_name: Callable[[str], str]
) -> None:
    topic = unique_name("cli")
    aio("topic", "create", topic, "--queues", "2")
    bodies = [f"line {i}" for i in range(25)]
    sent = json.loads(aio("produce", topic, "--tag", "a", "--json", input="\n".join(bodies)).stdout)
    assert sent["messages"] == 25 and len(sent["results"]) == 25
    got = aio("tail", topic, "--from", "earliest", "-c", "25", "--timeout", "30",
              "--body-only").stdout  # fmt: skip
    assert sorted(got.splitlines()) == sorted(bodies)
    # Filtered by tag, as JSON documents, stopping at the end without --max.
    aio("produce", topic, "other", "--tag", "b")
    docs = aio("consume", topic, "--from", "earliest", "--tag", "b", "--format", "json").stdout
    assert [json.loads(line)["body"] for line in docs.splitlines()] == ["other"]
    hexed = aio("tail", topic, "--from", "earliest", "--tag", "b", "--format", "hex",
                "--body-only").stdout  # fmt: skip
    assert hexed.split() == [b"other".hex()]
    # --count repeats the bodies, from arguments too.
    aio("produce", topic, "x", "y", "--count", "4", "--tag", "c", "--key", "k-1", "-p", "p=1")
    got = aio("tail", topic, "--from", "earliest", "--tag", "c", "--body-only").stdout.split()
    assert sorted(got) == ["x", "x", "y", "y"]
    stats = json.loads(aio("topic", "stats", topic, "--json").stdout)
    assert stats["messages"] == 30
    table = aio("topic", "stats", topic).stdout
    assert f"{topic}: {stats['messages']} messages" in table
    assert topic in json.loads(aio("topic", "list", "--json").stdout)
    route = json.loads(aio("topic", "route", topic, "--json").stdout)
    assert {b["broker"] for b in route["brokers"]} == {"broker-a", "broker-b"}


def _lag(aio: Callable[..., Result], group: str, topic: str) -> int:
    doc = json.loads(aio("group", "lag", group, "--topic", topic, "--json").stdout)
    table = aio("group", "lag", group, "--topic", topic).stdout
    assert re.search(rf"{re.escape(group)}: lag {doc['total']}\b", table), table
    assert doc["total"] == sum(q["lag"] for q in doc["queues"])
    return int(doc["total"])


def test_lag_falls_to_zero_and_reset_offset_re_reads(
    aio: Callable[..., Result], unique_name: Callable[[str], str]
) -> None:
    topic, group = unique_name("cli"), unique_name("g")
    aio("topic", "create", topic, "--queues", "2")
    aio("produce", topic, *[f"m{i}" for i in range(10)])
    aio("bench", "consume", topic, "--group", group, "-c", "10", "--timeout", "60")
    assert _lag(aio, group, topic) == 0
    assert group in json.loads(aio("group", "list", "--json").stdout)
    dry = json.loads(aio("group", "reset-offset", group, "--topic", topic, "--to", "earliest",
                         "--dry-run", "--json").stdout)  # fmt: skip
    assert sum(q["old"] - q["new"] for q in dry["queues"]) == 10
    assert _lag(aio, group, topic) == 0  # the dry run changed nothing
    refused = aio("group", "reset-offset", group, "--topic", topic, "--to", "earliest", ok=False)
    assert refused.exit_code == 2 and "--yes" in one_line_error(refused)
    aio("group", "reset-offset", group, "--topic", topic, "--to", "earliest", "--yes")
    assert _lag(aio, group, topic) == 10
    again = json.loads(
        aio("bench", "consume", topic, "--group", group, "-c", "10", "--json").stdout
    )
    assert again["messages"] == 10
    assert _lag(aio, group, topic) == 0
    described = json.loads(aio("group", "describe", group, "--json").stdout)
    assert described["members"] == []


def test_message_get_by_id_and_key(
    aio: Callable[..., Result], unique_name: Callable[[str], str]
) -> None:
    topic = unique_name("cli")
    aio("topic", "create", topic, "--queues", "1")
    sent = json.loads(aio("produce", topic, "needle", "--key", "order-9", "--json").stdout)
    msg_id = sent["results"][0]["msg_id"]
    doc = json.loads(aio("message", "get", msg_id, "--topic", topic, "--json").stdout)
    assert doc["body"] == "needle" and doc["keys"] == ["order-9"]
    assert doc["properties"] == {}  # the user's own; KEYS, UNIQ_KEY, ... apart
    assert doc["system_properties"]["KEYS"] == "order-9"
    again = json.loads(aio("message", "get", doc["offset_msg_id"], "--json").stdout)
    assert again["msg_id"] == msg_id
    text = aio("message", "get", doc["offset_msg_id"]).stdout
    assert "needle" in text and msg_id in text
    for _ in range(50):  # the key index is written asynchronously by the broker
        found = aio("message", "get", "--key", "order-9", "--topic", topic, "--json", ok=False)
        if found.exit_code == 0:
            break
    assert [d["body"] for d in json.loads(found.stdout)] == ["needle"]


def test_user_mistakes_give_one_line_and_an_exit_code(
    aio: Callable[..., Result], unique_name: Callable[[str], str]
) -> None:
    missing = unique_name("missing")
    result = aio("topic", "stats", missing, ok=False)
    assert result.exit_code == 3 and missing in one_line_error(result)
    result = aio("group", "lag", missing, ok=False)
    assert result.exit_code == 3 and missing in one_line_error(result)
    result = aio("group", "reset-offset", missing, "--topic", "t", "--to", "yesterday", ok=False)
    assert result.exit_code == 2 and "Traceback" not in result.stderr
    result = aio("message", "get", "nonsense", ok=False)
    assert result.exit_code == 2 and "topic" in one_line_error(result)
    result = aio("produce", missing, ok=False, input="")
    assert result.exit_code == 2 and "nothing to send" in one_line_error(result)
    unreachable = CliRunner().invoke(cli, ["-n", "127.0.0.1:1", "--timeout", "1", "topic", "list"])
    assert unreachable.exit_code == 1
    assert "NameServer unreachable" in one_line_error(unreachable)
    nowhere = CliRunner(env={"AIOROCKET_NAMESRV_ADDR": ""}).invoke(cli, ["group", "list"])
    assert nowhere.exit_code == 2 and "NameServer" in one_line_error(nowhere)


def test_console_scripts_and_broker_status(rocketmq: LocalRocketMQ) -> None:
    """``python -m aiorocket.cli broker status`` and the old module entry agree."""
    # The session's cluster may be a private one (CI): point both commands at its directory.
    env = {**os.environ, "AIOROCKET_BROKER_DIR": str(rocketmq.base_dir)}
    new = subprocess.run([sys.executable, "-m", "aiorocket.cli", "broker", "status", "--env"],
                         capture_output=True, text=True, timeout=60, env=env)  # fmt: skip
    old = subprocess.run([sys.executable, "-m", "aiorocket.testing.broker", "status", "--env"],
                         capture_output=True, text=True, timeout=60, env=env)  # fmt: skip
    assert new.returncode == old.returncode == 0, new.stderr
    assert new.stdout == old.stdout
    assert f"AIOROCKET_NAMESRV_ADDR={rocketmq.namesrv_addr}" in new.stdout
