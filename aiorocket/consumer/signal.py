"""A reusable wake-up signal: waiters block until the next :meth:`Signal.notify`.

``anyio.Event`` cannot be cleared, so a signal swaps in a fresh event each time it
fires. Waiters re-check their condition in a loop, which makes lost wake-ups harmless.
"""

from __future__ import annotations

import anyio


class Signal:
    __slots__ = ("_event",)

    def __init__(self) -> None:
        self._event = anyio.Event()

    def notify(self) -> None:
        event, self._event = self._event, anyio.Event()
        event.set()

    async def wait(self) -> None:
        await self._event.wait()
