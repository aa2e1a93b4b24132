"""``message get`` as a newcomer uses it (issue 42): the producer's id alone (what
SendResult, the logs and FastStream give), and key lookups that find every match up to
--count, within a time range, and say when the list is cut."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable

import pytest
from click.testing import Result

from aiorocket.testing.broker import LocalRocketMQ

from .cli_helpers import invoke, one_line_error

pytestmark = [pytest.mark.integration]


@pytest.fixture
def aio(rocketmq: LocalRocketMQ) -> Callable[..., Result]:
    return functools.partial(invoke, rocketmq.namesrv_addr)


def test_a_producer_id_needs_no_topic(
    aio: Callable[..., Result], unique_name: Callable[[str], str]
) -> None:
    topic = unique_name("lookup")
    aio("topic", "create", topic, "--queues", "1")
    msg_id = aio("produce", topic, "hello").stdout.split()[0]
    found = json.loads(aio("message", "get", msg_id, "--json").stdout)
    assert (found["msg_id"], found["topic"], found["body"]) == (msg_id, topic, "hello")
    missing = aio("message", "get", "C0000202000000000000000000000000", ok=False)
    assert missing.exit_code == 3 and "any of" in one_line_error(missing)


def test_a_key_lookup_finds_past_the_index_page_and_says_when_it_is_cut(
    aio: Callable[..., Result], unique_name: Callable[[str], str]
) -> None:
    topic = unique_name("lookup")
    aio("topic", "create", topic, "--queues", "1", "--broker", "broker-a")
    # paced over 2 s: the index keeps store times to the second, so a lookup splits its
    # time range down to a second (fewer than a page of 64 each here), not further
    aio("produce", topic, "ref", "--key", "k-ref", "--count", "80", "--rate", "40")
    aio("produce", topic, "other", "--key", "k-other")

    def lookup(*args: str) -> tuple[list[dict[str, str]], str]:
        result = aio("message", "get", "--key", "k-ref", "--topic", topic, "--json",
                     "--from", "-10m", *args)  # fmt: skip
        return json.loads(result.stdout), result.stderr

    every, note = lookup("-c", "80")
    assert len(every) == 80 and note == ""  # a broker answers 64 at most per query
    assert len(lookup("-c", "81")[0]) == 80
    assert len({m["offset_msg_id"] for m in every}) == 80
    some, note = lookup("-c", "50")
    assert len(some) == 50 and "more match" in note
    assert [m["offset_msg_id"] for m in some] == [m["offset_msg_id"] for m in every[:50]]
    # before every message was stored: none
    none = aio("message", "get", "--key", "k-ref", "--topic", topic, "--until", "-1h",
               ok=False)  # fmt: skip
    assert none.exit_code == 3
