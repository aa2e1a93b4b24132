"""``max_rate``'s token bucket (``aiorocket.consumer.rate``) and its validation; the
real-cluster check is tests/integration/test_consume_rate.py."""

from __future__ import annotations

import anyio
import pytest

from aiorocket.consumer import ConsumerConfig
from aiorocket.consumer.rate import RateLimit
from aiorocket.errors import ConfigError

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
