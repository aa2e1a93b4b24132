"""What the tests of aiorocket.faststream share."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from aiorocket.consumer import ConsumeFromWhere, ConsumerConfig
from aiorocket.faststream import RocketBroker

FIRST = ConsumeFromWhere.FIRST_OFFSET
#: short polls and commits, so that a test's consumer sees and settles messages quickly
FAST = ConsumerConfig(persist_offset_interval=0.2, long_poll_timeout=2.0,
                      pull_request_timeout=12.0)  # fmt: skip


@asynccontextmanager
async def started(broker: RocketBroker) -> AsyncIterator[RocketBroker]:
    """The broker connected and its subscribers started."""
    async with broker:
        await broker.start()
        yield broker
