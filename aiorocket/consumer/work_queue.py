"""The queue between pull tasks and handler workers (or the ``async for`` iterator).

A memory object stream costs an event-loop round trip per item (its receive always
checkpoints); at tens of thousands of messages per second that round trip is the
largest cost of dispatch. Here a worker pops items while there are any and only waits
when the queue is empty. Pull tasks never block on it: the per-queue cache limits
already bound how much can be queued.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import Generic, TypeVar

import anyio

from aiorocket._signal import Signal

T = TypeVar("T")


class WorkQueue(Generic[T]):
    __slots__ = ("_closed", "_items", "_ready")

    def __init__(self) -> None:
        self._items: deque[T] = deque()
        self._ready = Signal()
        self._closed = False

    def put_many(self, items: Iterable[T]) -> None:
        if self._closed:
            raise anyio.ClosedResourceError
        self._items.extend(items)
        self._ready.notify()

    def close(self) -> None:
        """No more puts; getters drain what is queued, then get EndOfStream."""
        self._closed = True
        self._ready.notify()

    @property
    def closed(self) -> bool:
        return self._closed

    async def get(self) -> T:
        items = self._items
        while not items:
            if self._closed:
                raise anyio.EndOfStream
            await self._ready.wait()
        return items.popleft()

    def __len__(self) -> int:
        return len(self._items)
