"""The Spark connector's process-wide runtime (aiorocket.spark._runtime) is stopped by its
close however early that comes: its thread ends and its loop is closed."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import pytest

from aiorocket.spark import _runtime


class _HeldLoop(asyncio.SelectorEventLoop):
    """A loop whose thread starts running it only once someone asks about it from
    outside: the window between the runtime's thread start and its loop's start, held
    open for as long as the close looks."""

    def __init__(self) -> None:
        self.asked = threading.Event()
        self.armed = False  # asked by the test only (the loop asks itself as it is made)
        super().__init__()

    def run_forever(self) -> None:
        self.asked.wait()
        super().run_forever()

    def is_running(self) -> bool:
        running = super().is_running()
        if self.armed:
            self.asked.set()
        return running

    def call_soon_threadsafe(  # type: ignore[override]
        self, callback: Callable[..., Any], *args: Any, **kw: Any
    ) -> Any:
        handle = super().call_soon_threadsafe(callback, *args, **kw)
        if self.armed:
            self.asked.set()
        return handle


def test_a_close_before_the_loop_has_started_stops_the_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Closed before its thread had started the loop (a Spark task failing at once, or
    the test of one runtime per process closing the one it just made), the runtime
    returned from close at once: nothing was running yet. Its thread then ran the loop
    forever, a thread in an event loop that no owner would stop."""
    monkeypatch.setattr(asyncio, "new_event_loop", _HeldLoop)  # the runtime's loop
    rt = _runtime._Runtime()
    loop = rt.loop
    assert isinstance(loop, _HeldLoop) and not loop.asked.is_set()
    loop.armed = True
    try:
        rt.close(timeout=10.0)
        rt.thread.join(10.0)  # bounded: the thread's end is what is awaited
        assert not rt.thread.is_alive()
        assert loop.is_closed()
    finally:
        if rt.thread.is_alive():  # the old close: stop what it left running
            loop.call_soon_threadsafe(loop.stop)
            rt.thread.join()
        if not loop.is_closed():
            loop.close()
