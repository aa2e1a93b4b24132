"""Moving a task's rows through the process's loop: no task per row, no stop per batch.

Two costs per row, and per batch, that the sink's paths shared:

* **A task per row.** Half messages (exactly-once) and their ends cannot share a
  request, so each row is one request of its own, many in flight. Spawned as a task per
  row behind a limiter, every row paid a spawn, a scheduling and a limiter wait on top
  of its send. :func:`each` keeps the same number in flight with a fixed set of workers
  that take the next row from one shared iterator.
* **A stop per Arrow batch.** Spark hands ``write`` an iterator of Arrow batches that
  its JVM converts and streams while Python reads them. The sink converted a batch,
  sent every row of it and waited for the last answer before reading the next: the JVM
  stood still while the rows went out, and the producer ran dry at each batch's end.
  :func:`hand_over` runs the sending on the loop for the whole task while Spark's
  thread reads and converts the next batch, at most ``ahead`` batches ahead.
"""

from __future__ import annotations

import concurrent.futures
from collections import deque
from collections.abc import AsyncIterable, Awaitable, Callable, Coroutine, Iterable, Iterator
from typing import Any, Generic, Protocol, TypeVar

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream

__all__ = ["each", "each_of", "hand_over"]

T = TypeVar("T")
R = TypeVar("R")


class _Loop(Protocol):
    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]: ...

    def result(self, future: concurrent.futures.Future[T]) -> T: ...


class _Items(Generic[T]):
    """One iterator over lists added while it is being consumed: every worker's
    ``for item in items`` takes the next item; a worker leaves when none is left."""

    def __init__(self) -> None:
        self._lists: deque[Iterable[T]] = deque()
        self._current: Iterator[T] = iter(())

    def add(self, items: Iterable[T]) -> None:
        self._lists.append(items)

    def __iter__(self) -> Iterator[T]:
        return self

    def __next__(self) -> T:
        while True:
            for item in self._current:
                return item
            if not self._lists:
                raise StopIteration
            self._current = iter(self._lists.popleft())


async def each_of(
    lists: AsyncIterable[list[T]], parallel: int, fn: Callable[[T], Awaitable[None]]
) -> None:
    """``await fn(item)`` for every item of every list, at most ``parallel`` at once, by
    workers that take the next item as they finish one (started as lists arrive, at most
    one per item). The first failure cancels the others and raises, as in a task group.
    """
    items: _Items[T] = _Items()
    live = 0

    async def work() -> None:
        nonlocal live
        try:
            # No await between the last next() and the decrement: a list added while a
            # worker is leaving is seen by the count below, and gets workers of its own.
            for item in items:
                await fn(item)
        finally:
            live -= 1

    async with anyio.create_task_group() as tg:
        async for batch in lists:
            items.add(batch)
            for _ in range(min(parallel - live, len(batch))):
                live += 1
                tg.start_soon(work)


async def each(items: list[T], parallel: int, fn: Callable[[T], Awaitable[None]]) -> None:
    """:func:`each_of` for one list."""

    async def one() -> AsyncIterable[list[T]]:
        yield items

    await each_of(one(), parallel, fn)


def hand_over(
    loop: _Loop,
    lists: Iterator[list[T]],
    consume: Callable[[MemoryObjectReceiveStream[list[T]]], Awaitable[R]],
    ahead: int = 1,
) -> R:
    """Run ``consume`` on ``loop`` for the whole of ``lists``, which this thread (Spark's)
    produces meanwhile; at most ``ahead`` lists wait between the two.

    Returns what ``consume`` returns, and raises what it raised (a failed send), which
    stops the reading. If the reading raises (Spark's iterator, a bad row), ``consume``
    is told the lists ended and this waits for it to finish the lists it took, then
    raises the reading's error: nothing of the task runs on after it returns.
    """
    send, receive = anyio.create_memory_object_stream[list[T]](ahead)

    async def run() -> R:
        with receive:  # closed when consume ends: a waiting hand-over is woken, broken
            return await consume(receive)

    done = loop.submit(run())
    try:
        for items in lists:
            try:
                loop.submit(send.send(items)).result()
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                break  # consume ended early: its error is raised below
    except BaseException:
        loop.submit(send.aclose()).result()
        concurrent.futures.wait([done])
        raise
    loop.submit(send.aclose()).result()
    return loop.result(done)
