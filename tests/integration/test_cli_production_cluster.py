"""The CLI on a cluster configured as production is (issue 42): no topic and no group is
created on first use. Every read goes through the tools group ``TOOLS_CONSUMER`` (which
the brokers create for themselves), every command ends, and a missing name is exit 3."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator

import pytest
from click.testing import Result

from aiorocket.testing.broker import LocalRocketMQ

from .cli_helpers import invoke, one_line_error
from .helpers import throwaway_cluster

pytestmark = [pytest.mark.integration]


@pytest.fixture(scope="module")
def production() -> Iterator[LocalRocketMQ]:
    yield from throwaway_cluster("noauto", brokers=1, proxy=False, broker_props={
        "autoCreateTopicEnable": False, "autoCreateSubscriptionGroup": False,
    })  # fmt: skip


@pytest.fixture
def aio(production: LocalRocketMQ) -> Callable[..., Result]:
    return functools.partial(invoke, production.namesrv_addr)


def test_reads_need_no_group_of_their_own(
    aio: Callable[..., Result], unique_name: Callable[[str], str]
) -> None:
    # The broker created the tools group although it creates no group on first use.
    assert "TOOLS_CONSUMER" in aio("group", "list", "--system").stdout.split()
    topic = unique_name("prod")
    aio("topic", "create", topic, "--queues", "2")
    aio("produce", topic, "a", "b", "c", "--key", "k")
    tailed = aio("tail", topic, "--from", "earliest", "--body-only", "--no-follow")
    assert sorted(tailed.stdout.split()) == ["a", "b", "c"]
    assert "consumed 3 messages" in aio("bench", "consume", topic, "-c", "3").stdout
    assert "0 dead-lettered" in aio("dlq", "list", "TOOLS_CONSUMER").stdout
    # nothing was left behind
    assert aio("group", "list").stdout.split() == []


def test_missing_names_are_one_line_and_exit_3(
    aio: Callable[..., Result], unique_name: Callable[[str], str]
) -> None:
    topic = unique_name("prod")
    aio("topic", "create", topic, "--queues", "1")
    produced = aio("produce", unique_name("nope"), "x", ok=False)
    assert produced.exit_code == 3 and "does not exist" in one_line_error(produced)
    listed = aio("dlq", "list", "nope-group", ok=False)
    assert listed.exit_code == 3 and "'nope-group' does not exist" in one_line_error(listed)
    bench = aio("bench", "consume", topic, "-c", "1", "--group", "nope-group", ok=False)
    assert bench.exit_code == 3
    assert "aiorocket group create nope-group" in one_line_error(bench)
    # --timeout after the command, as -n
    assert aio("topic", "list", "--timeout", "2").exit_code == 0


def test_without_the_tools_group_a_read_says_how_to_create_it(
    aio: Callable[..., Result], unique_name: Callable[[str], str]
) -> None:
    topic = unique_name("prod")
    aio("topic", "create", topic, "--queues", "1")
    aio("group", "delete", "TOOLS_CONSUMER", "--yes")
    try:
        tailed = aio("tail", topic, "--from", "earliest", "--no-follow", ok=False)
        assert tailed.exit_code == 3
        line = one_line_error(tailed)
        assert "TOOLS_CONSUMER" in line and "aiorocket group create TOOLS_CONSUMER" in line
    finally:
        aio("group", "create", "TOOLS_CONSUMER")
    assert aio("tail", topic, "--from", "earliest", "--no-follow").exit_code == 0
