"""The per-loop one-shot event (aiorocket._loop): the semantics its per-message users
(work queue, auto-batcher, connection) rely on, on both backends."""

from __future__ import annotations

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
