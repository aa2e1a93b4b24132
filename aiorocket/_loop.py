"""Per-event-loop shortcuts for calls made once per message.

``anyio.current_time()`` and ``anyio.Event()`` look the async backend up (a sniffio
context variable, then a dict) on every call: a microsecond or two each, several times
per message on the send path. A component that lives in one event loop captures the
loop's clock and its event type once, when it starts, and calls them directly.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import anyio


class FutureEvent:
    """A one-shot ``anyio.Event`` for asyncio made of one bare future.

    ``anyio.Event()`` on asyncio is a wrapper around an ``asyncio.Event``, whose ``wait()``
    binds the loop (under a global lock), makes a future and keeps it in a deque: a
    create/set/wait cycle costs about 40% more than a bare future's, paid once per
    message on the auto-batching send path and once per request (measured for issue 17:
    benchmarks/README.md, "Where the two misses come from"). Only what the
    per-message users need: ``set``, ``is_set`` and ``wait``. Unlike ``anyio.Event``,
    ``wait()`` on a set event returns without yielding to the loop.
    """

    __slots__ = ("_future", "_set")

    def __init__(self, future: asyncio.Future[None]) -> None:
        self._future = future
        # set() was called: kept apart from the future, which a cancelled waiter cancels
        # (a setter that races the cancellation must still read as having set it).
        self._set = False

    def set(self) -> None:
        self._set = True
        if not self._future.done():
            self._future.set_result(None)

    def is_set(self) -> bool:
        return self._set

    def wait(self) -> asyncio.Future[None]:
        # The future itself, awaited by the caller: a coroutine less per wait (once per
        # request and per woken worker: benchmarks/README.md, "Round 11").
        return self._future


#: what ``LoopShortcuts.new_event`` makes.
OneShotEvent = anyio.Event | FutureEvent


@dataclass(frozen=True, slots=True)
class LoopShortcuts:
    #: the running loop's clock: the same values as ``anyio.current_time()``.
    now: Callable[[], float]
    #: makes a one-shot event: a ``FutureEvent`` on asyncio, else an ``anyio.Event``.
    new_event: Callable[[], OneShotEvent]
    #: asyncio's ``loop.call_soon`` (a callback run once the running task yields to the
    #: loop); None on trio, which has no such callback
    call_soon: Callable[[Callable[[], None]], object] | None = None


def capture() -> LoopShortcuts:
    """The shortcuts of the running event loop (call it inside that loop)."""
    now: Callable[[], float] = anyio.current_time
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        trio = sys.modules.get("trio")
        if trio is not None:
            now = trio.current_time
        # The backend's Event class (anyio.Event() returns an instance of it) constructs
        # itself without the lookup.
        return LoopShortcuts(now, type(anyio.Event()))
    create_future = loop.create_future
    # asyncio's own clock is ``time.monotonic()`` (BaseEventLoop.time): called directly,
    # a call less for each ``now()`` (several a message on the send path). A loop that
    # keeps another clock (uvloop's, a virtual one) is asked itself.
    clock = time.monotonic if type(loop).time is asyncio.BaseEventLoop.time else loop.time
    return LoopShortcuts(clock, lambda: FutureEvent(create_future()), loop.call_soon)


def first_error(exc: BaseException) -> BaseException:
    """The error a user should read: task groups (concurrent sends, a consumer's tasks)
    wrap what failed in (nested) exception groups; the first real error inside, not a
    cancellation its siblings got because of it."""
    # By its shape: BaseExceptionGroup is a builtin from 3.11 only (a backport before).
    # Cancellations (asyncio's and trio's) are BaseExceptions, errors are Exceptions.
    while isinstance(inside := getattr(exc, "exceptions", None), tuple) and inside:
        errors = [e for e in inside if isinstance(e, Exception)]
        exc = (errors or list(inside))[0]
    return exc


def soon_from_thread() -> Callable[..., object]:
    """The running loop's way in for another thread that does not wait for an answer:
    ``soon(fn, *args)`` schedules ``fn(*args)`` in the loop and returns at once (call it
    inside the loop, use it from any thread). It raises ``RuntimeError`` once the loop is
    closed or the trio run has finished.

    ``anyio.from_thread.run_sync`` waits for the call's result instead: on an asyncio loop
    that has stopped but is not closed yet (the last pass of ``asyncio.run``'s shutdown,
    a test runner's teardown, an app's ``run_until_complete`` with more to do after it)
    its call never runs, and the calling thread (a non-daemon AnyIO worker) waits for
    ever, holding the interpreter's exit."""
    try:
        return asyncio.get_running_loop().call_soon_threadsafe
    except RuntimeError:
        pass
    import trio  # the other backend anyio runs on: imported only when in use

    return trio.lowlevel.current_trio_token().run_sync_soon
