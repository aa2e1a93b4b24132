"""mqadmin's daily offset work in the CLI (issue 42): a reset to a given offset, of one
queue, and cloneGroupOffset."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable

import pytest
from click.testing import Result

from aiorocket.testing.broker import LocalRocketMQ

from .cli_helpers import invoke

pytestmark = [pytest.mark.integration]


@pytest.fixture
def aio(rocketmq: LocalRocketMQ) -> Callable[..., Result]:
    return functools.partial(invoke, rocketmq.namesrv_addr)


def _offsets(aio: Callable[..., Result], group: str, topic: str) -> dict[str, int]:
    doc = json.loads(aio("group", "lag", group, "--topic", topic, "--json").stdout)
    return {f"{q['broker']}:{q['queue']}": q["committed"] for q in doc["queues"]}


def test_reset_to_an_offset_of_one_queue_then_clone_the_group(
    aio: Callable[..., Result], unique_name: Callable[[str], str]
) -> None:
    topic, group, other = unique_name("offs"), unique_name("g"), unique_name("g2")
    aio("topic", "create", topic, "--queues", "2", "--broker", "broker-a")
    # one message per send, round robin: 3 on each queue
    aio("produce", topic, "m", "--count", "6", "--concurrency", "1")
    stats = json.loads(aio("topic", "stats", topic, "--json").stdout)["queues"]
    ends = {f"{q['broker']}:{q['queue']}": q["max"] for q in stats}
    assert sorted(ends.values()) == [3, 3]
    for g in (group, other):
        aio("group", "create", g)
    aio("group", "reset-offset", group, "--topic", topic, "--to", "latest", "--yes")
    assert _offsets(aio, group, topic) == ends
    aio("group", "reset-offset", group, "--topic", topic, "--offset", "1",
        "--queue", "broker-a:1", "--yes")  # fmt: skip
    moved = {**ends, "broker-a:1": 1}
    assert _offsets(aio, group, topic) == moved
    # beyond the queue's end: kept within its range
    dry = json.loads(aio("group", "reset-offset", group, "--topic", topic, "--offset", "99",
                         "--dry-run", "--json").stdout)  # fmt: skip
    assert {f"{q['broker']}:{q['queue']}": q["new"] for q in dry["queues"]} == ends
    aio("group", "clone-offsets", group, other, "--topic", topic, "--yes")
    assert _offsets(aio, other, topic) == moved
    both = aio("group", "reset-offset", group, "--topic", topic, "--to", "latest",
               "--offset", "1", ok=False)  # fmt: skip
    assert both.exit_code == 2
