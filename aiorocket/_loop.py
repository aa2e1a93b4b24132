"""Per-event-loop shortcuts for calls made once per message.

``anyio.current_time()`` and ``anyio.Event()`` look the async backend up (a sniffio
context variable, then a dict) on every call: a microsecond or two each, several times
per message on the send path. A component that lives in one event loop captures the
loop's clock and its event type once, when it starts, and calls them directly.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from dataclasses import dataclass

import anyio


@dataclass(frozen=True, slots=True)
class LoopShortcuts:
    #: the running loop's clock: the same values as ``anyio.current_time()``.
    now: Callable[[], float]
    #: makes an ``anyio.Event`` of the running backend.
    new_event: Callable[[], anyio.Event]


def capture() -> LoopShortcuts:
    """The shortcuts of the running event loop (call it inside that loop)."""
    now: Callable[[], float] = anyio.current_time
    try:
        now = asyncio.get_running_loop().time  # anyio's asyncio clock is loop.time()
    except RuntimeError:
        trio = sys.modules.get("trio")
        if trio is not None:
            now = trio.current_time
    # The backend's Event class (anyio.Event() returns an instance of it) constructs
    # itself without the lookup.
    return LoopShortcuts(now, type(anyio.Event()))
