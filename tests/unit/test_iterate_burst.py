"""``async for`` takes, per event-loop pass, what the handler workers take together.

The iterator is one task; the handler strategy's ``consume_concurrency`` workers each
take a burst of messages per pass. At one burst a pass the iterator fell behind the
pulls after any stall (each pass decodes up to one answer per queue) and its messages
waited behind a backlog of its own (benchmarks/README.md, round 7)."""

from __future__ import annotations

import time
from collections.abc import Callable

import anyio
import anyio.lowlevel
import pytest

from aiorocket.consumer.dispatch import _BURST as WORKER_BURST

from .consumer_fakes import FakeBroker, FakeCluster, consumer_of, running
from .test_orderly_faults import until

pytestmark = pytest.mark.anyio

BACKLOG = 1500  # two queues of 750: under the per-queue cache limit (1,000)


async def loop_passes(concurrency: int, n: int, body: Callable[[], object]) -> int:
    """Event-loop passes while ``async for`` yields ``n`` of a buffered backlog to a
    loop whose ``body()`` never awaits."""
    broker = FakeBroker("broker-a", 0)
    for i in range(BACKLOG):
        broker.add(i % 2, b"m%d" % i)
    passes = 0

    async def count_passes() -> None:
        nonlocal passes
        while True:
            passes += 1
            await anyio.lowlevel.checkpoint()

    async with (
        running(FakeCluster({"broker-a": [broker]})) as cluster,
        consumer_of(cluster, consume_concurrency=concurrency) as consumer,
    ):
        with anyio.fail_after(30):
            async for _first in consumer:  # the loop stalls: the pulls buffer the rest
                break  # its message goes back to the front, unsettled
            iterated = consumer._iterated
            assert iterated is not None
            await until(lambda: len(iterated.queue) >= BACKLOG)
            async with anyio.create_task_group() as tg:
                tg.start_soon(count_passes)
                await anyio.lowlevel.checkpoint()
                start = passes
                taken = 0
                async for _msg in consumer:
                    body()
                    taken += 1
                    if taken == n:
                        break
                took = passes - start
                tg.cancel_scope.cancel()
    return took


@pytest.mark.parametrize("concurrency", [1, 20])
async def test_a_loop_pass_yields_the_handler_workers_burst(concurrency: int) -> None:
    n = 2 * concurrency * WORKER_BURST
    took = await loop_passes(concurrency, n, lambda: None)
    # one checkpoint (and so one pass of the other tasks) a burst of the workers' size
    assert took <= 3, f"{took} loop passes for {n} messages"
    assert took >= 1


async def test_a_slow_body_that_never_awaits_lets_the_loop_run_every_worker_burst() -> None:
    """A body that blocks (2 ms a message, never awaiting): the iterator checkpoints
    after a worker's burst once a pass has taken PASS_SECONDS, not after the 640 of
    consume_concurrency=20 (1.3 s without a pass of the pulls, renewals, heartbeats;
    a 50 ms body: 32 s, past a POP message's invisible time)."""
    n = 10 * WORKER_BURST  # 32 x 2 ms = 64 ms a burst, past PASS_SECONDS (50 ms)
    took = await loop_passes(20, n, lambda: time.sleep(0.002))
    assert took >= 9, f"{took} loop passes for {n} messages of 2 ms"
