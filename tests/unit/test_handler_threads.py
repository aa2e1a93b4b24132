"""An abandoned handler thread and the event loop it was started from: the thread tells
the loop it returned without waiting for the loop to run the word
(``aiorocket.consumer.threads``)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import anyio
import pytest

from aiorocket._log import get_logger
from aiorocket.consumer.threads import HandlerThreads

#: a generous bound for events that come at once when nothing is wrong
GUARD = 60.0


def test_a_handler_thread_returning_while_the_loop_is_stopped_is_not_stuck(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An abandoned handler thread that returns while its event loop has stopped but is
    not closed yet (the last pass of ``asyncio.run``'s shutdown, a test runner's teardown,
    an app's ``run_until_complete`` with more to do after it) tells the loop without
    waiting for it and is free again; the loop takes the word when it runs next. Before,
    it waited for the loop to run its word: for ever, a non-daemon AnyIO worker holding
    the interpreter's exit (CI's "the test left threads behind: 'AnyIO worker thread'
    (still runs, daemon=False)" on a starved machine, where a test's abandoned thread
    returned during the test runner's teardown).

    The thread is abandoned by a cancelled call of ``HandlerThreads.run`` itself: no
    consumer, no network (an earlier version ran a consumer against the fake Proxy and
    could wait for ever for a handler call that a starved run never made)."""
    started, go, done = threading.Event(), threading.Event(), threading.Event()
    call = HandlerThreads._call

    def watched(self: HandlerThreads, fn: Any, arg: Any, state: Any) -> Any:
        try:
            return call(self, fn, arg, state)
        finally:
            done.set()  # the call's word given: the worker goes back to its pool

    monkeypatch.setattr(HandlerThreads, "_call", watched)

    def handle(msg: str) -> None:
        started.set()
        go.wait(GUARD)

    async def abandon() -> HandlerThreads:
        threads = HandlerThreads(concurrency=1, max_abandoned=4, log=get_logger("test"))
        async with anyio.create_task_group() as tg:
            tg.start_soon(threads.run, handle, "m")
            assert await anyio.to_thread.run_sync(started.wait, GUARD)
            tg.cancel_scope.cancel()  # the call given up: its thread runs on
        return threads

    loop = asyncio.new_event_loop()
    try:
        threads = loop.run_until_complete(abandon())
        assert (threads.abandoned, threads.still_running()) == (1, ["m"])
        go.set()  # the loop has stopped: it runs nothing until asked again
        assert done.wait(GUARD), "the thread waits for a loop that does not run"
        loop.run_until_complete(asyncio.sleep(0))
        assert (threads.abandoned, threads.still_running()) == (0, [])
    finally:
        go.set()
        # Run the loop once more before closing it: a thread that waits for it (the
        # defect) is let go, so a failure here leaves no thread behind.
        loop.run_until_complete(asyncio.sleep(0))
        loop.close()


@pytest.mark.anyio
async def test_a_call_waiting_at_the_cap_starts_once_the_abandoned_thread_returns() -> None:
    """The word reaches a running loop on both backends (asyncio's call_soon_threadsafe,
    trio's run_sync_soon): the abandoned thread's return frees its place under
    ``max_abandoned`` and wakes the call that waited for room."""
    started, go = threading.Event(), threading.Event()
    ran: list[str] = []

    def stuck(msg: str) -> None:
        started.set()
        go.wait(GUARD)

    threads = HandlerThreads(concurrency=2, max_abandoned=1, log=get_logger("test"))
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(threads.run, stuck, "a")
            assert await anyio.to_thread.run_sync(started.wait, GUARD)
            tg.cancel_scope.cancel()  # given up: at the cap now
        assert threads.abandoned == 1
        with anyio.fail_after(GUARD):
            async with anyio.create_task_group() as tg:
                tg.start_soon(threads.run, ran.append, "b")  # waits for room
                await anyio.wait_all_tasks_blocked()
                assert ran == []
                go.set()
        assert (ran, threads.abandoned, threads.still_running()) == (["b"], 0, [])
    finally:
        go.set()
