"""A reusable wake-up signal: waiters block until the next ``Signal.notify``.

``anyio.Event`` cannot be cleared, so a signal hands out a fresh event per round of
waiters. The event is created only when somebody waits: notifying with no waiter (the
common case on the per-message path) costs an attribute check. Waiters re-check their
condition in a loop, which makes lost wake-ups harmless.
"""

from __future__ import annotations

import anyio


class Signal:
    __slots__ = ("_event",)

    def __init__(self) -> None:
        self._event: anyio.Event | None = None

    def notify(self) -> None:
        event = self._event
        if event is not None:
            self._event = None
            event.set()

    async def wait(self) -> None:
        event = self._event
        if event is None:
            event = self._event = anyio.Event()
        await event.wait()
