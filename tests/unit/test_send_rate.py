"""The producer's ``max_rate`` (``aiorocket.producer.pace``): concurrent senders queue up
at the rate; a cancelled wait gives its tokens back; validation. The real-cluster check
is tests/integration/test_send_rate.py."""

from __future__ import annotations

from types import SimpleNamespace

import anyio
import anyio.lowlevel
import pytest

from aiorocket import _bucket
from aiorocket.errors import ConfigError
from aiorocket.producer import Producer, ProducerConfig, pace
from aiorocket.producer.pace import SendRate

pytestmark = pytest.mark.anyio


def test_max_rate_must_be_positive() -> None:
    with pytest.raises(ConfigError, match="max_rate"):
        ProducerConfig(max_rate=0).validate()
    with pytest.raises(ConfigError, match="max_rate"):
        Producer("g", "127.0.0.1:1", max_rate=-1)
    ProducerConfig(max_rate=0.5).validate()


async def test_concurrent_senders_go_at_the_rate_not_together(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """60 senders at once at 100 a second: a second's worth (100) would go at once, so
    start from an empty bucket; each then waits its own turn: 0.01 s, 0.02 s, ... the
    last 0.6 s. Counted on a clock that stands still while they ask (each wait is what
    the debt left by those before it says), not from when each woke up: on a starved
    machine the wakes bunch up at the end whatever the waits were."""
    clock = SimpleNamespace(monotonic=lambda: 100.0)
    monkeypatch.setattr(_bucket, "time", clock)
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)
        await anyio.lowlevel.checkpoint()

    monkeypatch.setattr(pace, "anyio", SimpleNamespace(sleep=sleep, lowlevel=anyio.lowlevel))
    rate = SendRate(100.0)
    await rate.acquire(100)  # empty the bucket
    assert waits == []
    async with anyio.create_task_group() as tg:
        for _ in range(60):
            tg.start_soon(rate.acquire)
    assert waits == pytest.approx([(i + 1) / 100 for i in range(60)])


async def test_a_cancelled_wait_gives_its_tokens_back() -> None:
    rate = SendRate(10.0)
    await rate.acquire(10)  # empty
    with anyio.move_on_after(0.05):
        await rate.acquire(36_000)  # an hour of debt: cancelled
    # ~0.1 s for one token, not an hour: 60 s is a hang's guard, not a bound (it was
    # `< 1.0` s of wall clock against 5 s of debt).
    with anyio.fail_after(60):
        await rate.acquire()
