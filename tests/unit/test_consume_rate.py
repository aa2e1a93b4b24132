"""``max_rate``'s token bucket (``aiorocket.consumer.rate``) and its validation; the
real-cluster check is tests/integration/test_consume_rate.py."""

from __future__ import annotations

import anyio
import pytest

from aiorocket.consumer import ConsumerConfig
from aiorocket.consumer.rate import RateLimit, TopicRates
from aiorocket.errors import ConfigError
from aiorocket.received import ConsumerMessage

pytestmark = pytest.mark.anyio


def test_max_rate_must_be_positive() -> None:
    with pytest.raises(ConfigError, match="max_rate"):
        ConsumerConfig(max_rate=0).validate()
    ConsumerConfig(max_rate=0.5).validate()


async def test_a_debt_is_waited_out_at_the_rate() -> None:
    limit = RateLimit(100.0)
    await limit.ready()  # a full bucket: at once
    limit.take(110)  # one second's worth and 10 more: 0.1 s of debt (+ a token)
    start = anyio.current_time()
    await limit.ready()
    assert anyio.current_time() - start >= 0.1


def test_topic_max_rate_must_map_topics_to_positive_rates() -> None:
    with pytest.raises(ConfigError, match=r"topic_max_rate\['t'\]"):
        ConsumerConfig(topic_max_rate={"t": 0}).validate()
    with pytest.raises(ConfigError, match="topic_max_rate must map"):
        ConsumerConfig(topic_max_rate=[("t", 1.0)]).validate()  # type: ignore[arg-type]
    ConsumerConfig(topic_max_rate={"t": 2.5}).validate()


async def test_a_limited_topic_is_asked_by_its_own_receive_loop_only() -> None:
    """The sources' topic filter: a shared pop receive loop asks the unlimited topics,
    a limited topic's own loop that topic only (names with or without a namespace)."""
    rates = TopicRates({"slow": 5.0}, lambda topic: topic.removeprefix("ns%"))
    assert rates.limited(["fast", "ns%slow"]) == ["ns%slow"]
    seen: dict[str | None, list[str]] = {}

    async def loop(own: str | None) -> None:
        rates.enter_loop(own)
        seen[own] = [t for t in ("fast", "ns%slow", "slow") if rates.receivable(t)]

    async with anyio.create_task_group() as tg:  # each loop its own task (context)
        tg.start_soon(loop, None)
        tg.start_soon(loop, "ns%slow")
    assert seen == {None: ["fast"], "ns%slow": ["ns%slow", "slow"]}
    assert rates.receivable("fast")  # this task is no loop: it asks as a shared one


async def test_each_topic_pays_for_its_own_messages() -> None:
    rates = TopicRates({"a": 10.0}, lambda topic: topic)
    bucket = rates.of("a")
    assert bucket is not None and bucket.wait_time() == 0
    msgs = [ConsumerMessage(t, b"", {}, 0, i, i) for i, t in enumerate(["a"] * 12 + ["b"])]
    rates.take(msgs)  # 12 of "a" from a 10-token bucket: 0.3 s to the next token
    assert 0.2 < bucket.wait_time() <= 0.3
    assert rates.of("b") is None
