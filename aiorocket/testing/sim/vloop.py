"""An asyncio event loop on a virtual clock, for the gRPC runs (grpclib is asyncio only,
so trio's MockClock cannot serve them).

The loop's ``time()`` is virtual. Whenever it would wait (for its next timer, with no
socket ready), it first gives the kernel a moment (``SETTLE`` seconds of real time: data
written to a loopback socket is readable by then) and, if still nothing is ready, jumps
the clock to that timer instead of sleeping: a run's long polls, invisible durations
and backoffs cost no real time, and time-dependent behaviour does not depend on the
machine's load. Like trio's ``MockClock(autojump_threshold=0)``, it needs every peer in
the process (the simulated Proxy is) and numeric addresses (no resolver threads).
"""

from __future__ import annotations

import asyncio
import selectors
from typing import Any

__all__ = ["SETTLE", "VirtualTimeLoop"]

#: real seconds the loop waits for I/O in flight before it jumps the clock
SETTLE = 0.0005


class _JumpingSelector:
    """Wraps a selector: a wait that would time out with nothing ready jumps the clock."""

    def __init__(self, inner: selectors.BaseSelector, loop: VirtualTimeLoop) -> None:
        self._inner = inner
        self._loop = loop

    def select(self, timeout: float | None = None) -> list[Any]:
        if timeout is not None and timeout <= 0:
            return self._inner.select(0)
        events = self._inner.select(SETTLE)
        if events:
            return events
        if timeout is None:  # no timer at all: only I/O can wake the loop
            return self._inner.select(None)
        self._loop.advance(timeout)
        return []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """``asyncio.SelectorEventLoop`` whose clock only moves when the loop would wait."""

    def __init__(self) -> None:
        self._now = 0.0
        super().__init__(_JumpingSelector(selectors.DefaultSelector(), self))  # type: ignore[arg-type]

    def time(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        self._now += seconds
