"""The per-loop one-shot event (aiorocket._loop): the semantics its per-message users
(work queue, auto-batcher, connection) rely on, on both backends."""

from __future__ import annotations

import asyncio
import time

import anyio
import pytest

from aiorocket._loop import capture

pytestmark = pytest.mark.anyio


async def test_set_wakes_the_waiter_and_reads_as_set() -> None:
    event = capture().new_event()
    woke = anyio.Event()

    async def waiter() -> None:
        await event.wait()
        woke.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(waiter)
        await anyio.wait_all_tasks_blocked()
        assert not event.is_set() and not woke.is_set()
        event.set()
        event.set()  # a second set is harmless
    assert event.is_set() and woke.is_set()


async def test_wait_on_a_set_event_returns() -> None:
    event = capture().new_event()
    event.set()
    with anyio.fail_after(5):
        await event.wait()


@pytest.mark.parametrize("set_during_cancellation", [True, False])
async def test_a_cancelled_waiter_reads_the_event_as_set_only_if_it_was(
    set_during_cancellation: bool,
) -> None:
    # The work queue hands a wake-up on when its waiter was set but cancelled before it
    # ran: the event must say it was set even though the waiter's cancellation came first.
    event = capture().new_event()
    seen: list[bool] = []

    async def waiter() -> None:
        try:
            await event.wait()
        except anyio.get_cancelled_exc_class():
            seen.append(event.is_set())
            raise

    async with anyio.create_task_group() as tg:
        tg.start_soon(waiter)
        await anyio.wait_all_tasks_blocked()
        tg.cancel_scope.cancel()  # the waiter is cancelled but has not run yet...
        if set_during_cancellation:
            event.set()  # ...when a setter picks it
    assert seen == [set_during_cancellation]
    event.set()  # setting it afterwards must not raise (its future was cancelled)
    assert event.is_set()


async def test_now_reads_the_running_loops_clock() -> None:
    # On asyncio's own loop ``now`` is ``time.monotonic`` itself (its clock, a call less
    # a message); the values are the loop's and anyio's either way.
    before = anyio.current_time()
    now = capture().now()
    assert before <= now <= anyio.current_time()


def test_a_loop_with_its_own_clock_is_asked_itself() -> None:
    # The shortcut may skip only asyncio's BaseEventLoop.time: a loop that keeps another
    # clock (uvloop's, a simulator's virtual one) must be read through its own time().
    class Shifted(asyncio.SelectorEventLoop):
        def time(self) -> float:
            return super().time() + 1_000_000.0

    async def read() -> tuple[float, float]:
        return capture().now(), asyncio.get_running_loop().time()

    loop = Shifted()
    try:
        now, loop_time = loop.run_until_complete(read())
    finally:
        loop.close()
    assert loop_time - 1.0 < now <= loop_time  # the loop's clock, not time.monotonic()
    assert now > time.monotonic() + 999_000.0
