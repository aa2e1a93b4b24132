"""Synchronous handlers in worker threads, and a bound on the threads a timeout abandons.

A thread cannot be interrupted: when a handler call overruns ``consume_timeout`` (or
its queue closes), the call is given up and the message counts as failed, but the
thread runs on until the function returns, maybe never. Each such thread is counted
while it runs; once ``max_abandoned_threads`` of them are still running, a new call
waits until one of them returns instead of starting yet another thread, so a handler
that hangs on every message cannot pile up threads without bound.

A call marked abandoned tells the event loop when its thread returns at last, without
waiting for the loop to take the word (``aiorocket._loop.soon_from_thread``): a loop that
has stopped and is not closed yet never would, and the thread, a non-daemon AnyIO worker,
would wait for ever and hold the interpreter's exit. Calls that return in time cost a
lock and two flags more than a plain ``to_thread`` call.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import Any

import anyio
import anyio.to_thread

from aiorocket._log import Logger
from aiorocket._loop import soon_from_thread
from aiorocket._signal import Signal

__all__ = ["HandlerThreads"]


class _Call:
    """One call's state, shared with its thread (under ``HandlerThreads._lock``)."""

    __slots__ = ("abandoned", "finished")

    def __init__(self) -> None:
        self.finished = False
        self.abandoned = False


class HandlerThreads:
    """Runs synchronous handler calls in threads; counts and caps the abandoned ones.

    Parameters
    ----------
    concurrency:
        Calls that may run at once (``consume_concurrency``).
    max_abandoned:
        Abandoned threads still running at which new calls wait (``max_abandoned_threads``).
    log:
        The consumer's logger.
    """

    def __init__(self, *, concurrency: int, max_abandoned: int, log: Logger) -> None:
        self._log = log
        #: how an abandoned thread reaches the loop (made in the loop, which runs the calls)
        self._soon = soon_from_thread()
        self.max_abandoned = max_abandoned
        #: threads given up (timed out or cancelled) that are still running
        self.abandoned = 0
        #: threads given up since the start
        self.abandoned_total = 0
        # Calls awaited at once (anyio frees a call's token when it is abandoned). With
        # the wait in run(), threads alive stay below concurrency + max_abandoned: the
        # cap can be overshot only by calls that were already running when it was hit.
        self._limiter = anyio.CapacityLimiter(concurrency)
        self._freed = Signal()
        self._capped = False
        self._lock = threading.Lock()
        #: the arguments (a message, a batch) of abandoned calls still running, by id
        self._busy: dict[int, Any] = {}

    async def run(self, fn: Callable[[Any], Any], arg: Any) -> Any:
        """``fn(arg)`` in a worker thread; cancelled, the thread is abandoned and counted."""
        if self.abandoned >= self.max_abandoned:
            await self._wait_for_room()
        call = _Call()
        try:
            return await anyio.to_thread.run_sync(
                self._call, fn, arg, call, abandon_on_cancel=True, limiter=self._limiter
            )
        except BaseException:
            with self._lock:  # against the thread finishing right now
                call.abandoned = not call.finished
            if call.abandoned:
                self._abandon(arg)
            raise

    def _call(self, fn: Callable[[Any], Any], arg: Any, call: _Call) -> Any:
        """In the worker thread: the handler, then a word to the loop if abandoned."""
        try:
            return fn(arg)
        finally:
            with self._lock:
                call.finished = True
                abandoned = call.abandoned
            if abandoned:
                with contextlib.suppress(RuntimeError):  # the loop is gone: nobody to tell
                    self._soon(self._returned, arg)

    def still_running(self) -> list[Any]:
        """The messages abandoned calls still work on (their threads run on)."""
        out: list[Any] = []
        for arg in self._busy.values():
            out.extend(arg if isinstance(arg, list) else [arg])
        return out

    def _abandon(self, arg: Any) -> None:
        self._busy[id(arg)] = arg
        self.abandoned += 1
        self.abandoned_total += 1
        self._log.warning(
            "handler_thread_abandoned",
            running=self.abandoned,
            cap=self.max_abandoned,
            hint="a synchronous handler overran consume_timeout and cannot be "
            "interrupted: its thread runs on",
        )

    def _returned(self, arg: Any) -> None:
        """An abandoned thread returned (run in the event loop)."""
        self._busy.pop(id(arg), None)
        self.abandoned -= 1
        if self.abandoned < self.max_abandoned:
            self._capped = False  # the next time the cap is reached is logged again
            self._freed.notify()

    async def _wait_for_room(self) -> None:
        if not self._capped:
            self._capped = True
            self._log.warning(
                "handler_threads_capped",
                abandoned=self.abandoned,
                cap=self.max_abandoned,
                hint="new handler calls wait until an abandoned thread returns",
            )
        while self.abandoned >= self.max_abandoned:
            await self._freed.wait()
