"""The queue between pull tasks and handler workers (or the ``async for`` iterator).

A memory object stream costs an event-loop round trip per item (its receive always
checkpoints); at tens of thousands of messages per second that round trip is the
largest cost of dispatch. Here a getter pops items while there are any and only waits
when the queue is empty. Pull tasks never block on it: the per-queue cache limits
already bound how much can be queued.

Idle getters are woken one at a time: a put wakes one, and a getter that takes an item
while more are queued wakes the next. Waking every idle worker per put (a broadcast)
cost a loop round trip per worker per pull, most of them finding nothing left: the
first one drains a burst without yielding when handlers are quick. With the chain,
slow handlers still spread over all workers, since each woken getter hands the rest
on before its handler runs.

On asyncio the hand-on waits for the getter to yield to the loop (a callback scheduled
with ``call_soon``: it runs once the getter's handler awaits something, or the getter
waits again): what is still queued then wakes the next getter. A getter whose quick
handlers drain the queue without yielding so wakes nobody, where a wake-up at the take
cost a getter's round trip a pull answer, spent finding the queue empty
(benchmarks/README.md, "Round 13"). On trio (no such callback) the next getter is woken
at the take.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sized
from typing import Generic, TypeVar

import anyio

from aiorocket._loop import OneShotEvent, capture

__all__ = [
    "T",
    "WorkQueue",
]

T = TypeVar("T")


class WorkQueue(Generic[T]):
    __slots__ = (
        "_call_soon", "_closed", "_hand_on_due", "_items", "_new_event", "_waiters",
        "pop_nowait", "queued",
    )  # fmt: skip

    def __init__(self) -> None:
        self._items: deque[T] = deque()
        self._waiters: deque[OneShotEvent] = deque()  # idle getters, oldest first
        self._new_event: Callable[[], OneShotEvent] | None = None  # set in the loop
        #: asyncio's ``loop.call_soon`` (set in the loop; None on trio): hands on later
        self._call_soon: Callable[[Callable[[], None]], object] | None = None
        self._hand_on_due = False  # a hand-on is scheduled and has not run yet
        self._closed = False
        #: The next item without waiting; IndexError when none is queued (then await
        #: get(), which also reports the end). A plain call, where get() costs a
        #: coroutine per item.
        self.pop_nowait = self._items.popleft
        #: The queued items themselves, to read only: true while ``pop_nowait`` has one.
        #: Asked before it, where its IndexError on an empty queue cost an exception a
        #: wait (once a burst: benchmarks/README.md, "Round 18").
        self.queued: Sized = self._items

    def put_many(self, items: Iterable[T]) -> None:
        if self._closed:
            raise anyio.ClosedResourceError
        self._items.extend(items)
        if self._waiters and self._items:
            self._waiters.popleft().set()

    def push_front(self, *items: T) -> None:
        """Return items taken but not handled, so they are the next ones taken (also
        after ``close``: getters drain them with the rest)."""
        self._items.extendleft(reversed(items))
        if self._waiters:
            self._waiters.popleft().set()

    def take_all(self) -> list[T]:
        """Remove and return every queued item."""
        items = list(self._items)
        self._items.clear()
        return items

    def close(self) -> None:
        """No more puts; getters drain what is queued, then get EndOfStream."""
        self._closed = True
        waiters = self._waiters
        while waiters:
            waiters.popleft().set()

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def idle_getters(self) -> int:
        return len(self._waiters)

    async def get(self) -> T:
        items = self._items
        while not items:
            if self._closed:
                raise anyio.EndOfStream
            new_event = self._new_event
            if new_event is None:
                loop = capture()
                new_event = self._new_event = loop.new_event
                self._call_soon = loop.call_soon
            event = new_event()
            self._waiters.append(event)
            try:
                await event.wait()
            except BaseException:
                if not event.is_set():
                    self._waiters.remove(event)
                elif items and self._waiters:
                    # Woken but cancelled before taking an item: pass the wake-up on.
                    self._waiters.popleft().set()
                raise
        item = items.popleft()
        if items and self._waiters:
            # more queued: another idle getter shares them, if they are still queued
            # once this one yields (see the module)
            call_soon = self._call_soon
            if call_soon is None:
                self._waiters.popleft().set()
            elif not self._hand_on_due:
                self._hand_on_due = True
                call_soon(self._hand_on)
        return item

    def _hand_on(self) -> None:
        """The getter that took an item has yielded: wake the next idle getter if items
        are still queued (the chain goes on from that getter's take)."""
        self._hand_on_due = False
        if self._items and self._waiters:
            self._waiters.popleft().set()

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[T]:
        """The queued items, oldest first (not taken; nothing may be put meanwhile)."""
        return iter(self._items)
