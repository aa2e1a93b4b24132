"""The producer's ``max_rate`` (``aiorocket.producer.pace``): concurrent senders queue up
at the rate; a cancelled wait gives its tokens back; validation. The real-cluster check
is tests/integration/test_send_rate.py."""

from __future__ import annotations

import time

import anyio
import pytest

from aiorocket.errors import ConfigError
from aiorocket.producer import Producer, ProducerConfig
from aiorocket.producer.pace import SendRate

pytestmark = pytest.mark.anyio


def test_max_rate_must_be_positive() -> None:
    with pytest.raises(ConfigError, match="max_rate"):
        ProducerConfig(max_rate=0).validate()
    with pytest.raises(ConfigError, match="max_rate"):
        Producer("g", "127.0.0.1:1", max_rate=-1)
    ProducerConfig(max_rate=0.5).validate()


async def test_concurrent_senders_go_at_the_rate_not_together() -> None:
    """60 senders at once at 100 a second: a second's worth (100) would go at once, so
    start from an empty bucket; each then waits its own turn: the last after ~0.6 s."""
    rate = SendRate(100.0)
    await rate.acquire(100)  # empty the bucket
    done: list[float] = []
    start = time.monotonic()

    async def send() -> None:
        await rate.acquire()
        done.append(time.monotonic() - start)

    async with anyio.create_task_group() as tg:
        for _ in range(60):
            tg.start_soon(send)
    done.sort()
    assert done[-1] >= 0.55
    assert done[29] < done[-1] - 0.2  # spread over the time, not all at the end


async def test_a_cancelled_wait_gives_its_tokens_back() -> None:
    rate = SendRate(10.0)
    await rate.acquire(10)  # empty
    with anyio.move_on_after(0.05):
        await rate.acquire(50)  # 5 s of debt: cancelled
    start = time.monotonic()
    await rate.acquire()  # waits ~0.1 s for one token, not 5 s
    assert time.monotonic() - start < 1.0
