"""Flow control of the push consumer: how many messages and bytes it holds unsettled.

A receive asks for a batch only when the cache has room for it, so a slow handler
stops the consumer from popping more messages (which would sit invisible to the rest
of the group and time out) instead of growing memory.
"""

from __future__ import annotations

import anyio

__all__ = ["FlowControl"]


class FlowControl:
    """Counts cached messages and body bytes; ``wait_room`` blocks above the limits."""

    def __init__(self, max_count: int, max_bytes: int) -> None:
        self.max_count = max_count
        self.max_bytes = max_bytes
        self.count = 0
        self.bytes = 0
        self._freed = anyio.Event()

    def full(self, incoming: int) -> bool:
        # A batch is allowed while under the byte limit: one large message must pass.
        return self.count + incoming > self.max_count or self.bytes >= self.max_bytes

    async def wait_room(self, incoming: int) -> None:
        while self.full(incoming):
            if self._freed.is_set():
                self._freed = anyio.Event()
            await self._freed.wait()

    def add(self, size: int) -> None:
        self.count += 1
        self.bytes += size

    def remove(self, size: int) -> None:
        self.count -= 1
        self.bytes -= size
        self._freed.set()

    def empty(self) -> bool:
        return self.count == 0
