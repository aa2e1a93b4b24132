"""Retry delays in seconds (``Reconsume(delay=)``, ``nack(delay=)``): the rounding to a
delay level over remoting pull, the validation, and how the delay reaches each settler.
The real-cluster checks (the message comes back then) are in
tests/integration/test_retry_delay.py."""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any, cast

import anyio
import pytest

from aiorocket._log import get_logger
from aiorocket.consumer import ConsumerConfig, Reconsume
from aiorocket.consumer.handler import Handler
from aiorocket.consumer.pop.settler import PopSettler
from aiorocket.errors import ConfigError
from aiorocket.received import ConsumerMessage, PopMessage, QueueView
from aiorocket.results import DELAY_LEVELS, delay_level_for

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize(
    ("seconds", "level"),
    [(0, 1), (1, 1), (1.01, 2), (3, 2), (5, 2), (7, 3), (60, 5), (61, 6), (7200, 18),
     (10**6, 18)],
)  # fmt: skip
def test_remoting_rounds_a_delay_up_to_the_next_level(seconds: float, level: int) -> None:
    assert delay_level_for(seconds) == level
    assert DELAY_LEVELS[level - 1] >= min(seconds, DELAY_LEVELS[-1])  # never earlier


@pytest.mark.parametrize("bad", [-1, math.nan, math.inf, "5", True])
def test_a_bad_delay_is_a_config_error(bad: Any) -> None:
    with pytest.raises(ConfigError, match="retry delay"):
        Reconsume(delay=bad)


def test_a_delay_and_a_delay_level_together_are_refused() -> None:
    with pytest.raises(ConfigError, match="not both"):
        Reconsume(delay_level=3, delay=1.0)


class _Recorder:
    def __init__(self) -> None:
        self.settled: list[tuple[int | None, float | None]] = []

    async def settle(self, msg: ConsumerMessage, delay_level: int | None) -> None:
        self.settled.append((delay_level, msg._take_retry_delay()))


async def test_nack_with_a_delay_reaches_the_settler_once() -> None:
    settler = _Recorder()
    msg = ConsumerMessage("t", b"x", {}, 0, 0, 0, _settler=cast(Any, settler))
    await msg.nack(delay=2.5)
    await msg.nack()  # the delay was read: a later failure takes the backoff
    assert settler.settled == [(0, 2.5), (0, None)]
    with pytest.raises(ConfigError):
        await msg.nack(delay=-1)
    assert len(settler.settled) == 2  # refused before anything was settled


def _handler() -> Handler:
    state = SimpleNamespace(config=ConsumerConfig(), log=get_logger("test"), trace=None)
    return Handler(lambda m: None, batch=False, threads=cast(Any, None), state=cast(Any, state))


def test_a_handler_result_notes_its_delay_and_a_plain_failure_clears_it() -> None:
    handler, pq = _handler(), cast(QueueView, SimpleNamespace())
    msg = ConsumerMessage("t", b"x", {}, 0, 0, 0)
    assert handler.level_of(pq, msg, Reconsume(delay=4)) == 0
    assert msg._retry_delay == 4
    assert handler.level_of(pq, msg, False) == ConsumerConfig().retry_delay_level
    assert msg._retry_delay is None


class _Source:
    def __init__(self) -> None:
        self.changes: list[float] = []

    async def change_invisible(self, msg: PopMessage, seconds: float) -> None:
        self.changes.append(seconds)


async def test_pop_sets_the_invisible_time_to_the_delay_else_the_backoff() -> None:
    source = _Source()
    settler = PopSettler(cast(Any, source), cast(Any, None), max_attempts=16,
                         backoff=lambda attempt: 10.0, retry_pause=lambda attempt: 1.0,
                         log=get_logger("test"))  # fmt: skip
    asked, plain = PopMessage("t", b"a", {}, 0, 0, 0), PopMessage("t", b"b", {}, 0, 1, 0)
    asked._retry_delay = 2.5
    with anyio.fail_after(5):
        await settler.settle(asked, 0)
        await settler.settle(plain, 0)
    assert source.changes == [2.5, 10.0]


async def test_faststream_nack_takes_a_delay() -> None:
    """``raise NackMessage(delay=2.5)`` calls ``nack(delay=2.5)``: the subscriber's
    outcome is ``Reconsume(delay=2.5)``, the consumer settles it as any handler's."""
    pytest.importorskip("faststream")
    from aiorocket.faststream._message import CURRENT_OUTCOME, Outcome, RocketMessage

    outcome = Outcome()
    token = CURRENT_OUTCOME.set(outcome)
    try:
        raw = ConsumerMessage("t", b"x", {}, 0, 0, 0)
        msg = RocketMessage(raw_message=raw, body=b"x", message_id="m", group="g")
    finally:
        CURRENT_OUTCOME.reset(token)
    await msg.nack(delay=2.5)
    assert outcome.result == Reconsume(delay=2.5)
