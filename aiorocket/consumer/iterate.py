"""``async for msg in consumer``: the delivery strategy without a handler.

The iterator replaces the handler workers: it settles a message when the loop asks for
the next one, so the body's success is the ack, with no task or callback per message.
With ``trace=True`` each message handed to a loop is a ``SubBefore`` and its settling a
``SubAfter`` (``aiorocket.consumer.trace``).
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING

import anyio
import anyio.abc
import anyio.lowlevel

from aiorocket.consumer.dispatch import _BURST as _WORKER_BURST
from aiorocket.consumer.dispatch import WorkItem, close_and_take
from aiorocket.consumer.trace import TracedSettler
from aiorocket.consumer.work_queue import WorkQueue
from aiorocket.received import ConsumerMessage

if TYPE_CHECKING:
    from aiorocket.consumer.process_queue import ProcessQueue
    from aiorocket.consumer.state import ConsumerState
    from aiorocket.received import QueueView, Settler

__all__ = ["Iterated"]

#: seconds of a loop pass after which the iterator checkpoints at the end of a worker's
#: burst though the pass's burst (``Iterated.burst``) is not taken yet: a body that
#: blocks (never awaits) holds the other tasks (pulls, renewals, heartbeats) no longer
#: than a handler worker's burst would, and a fast one still takes the whole burst
PASS_SECONDS = 0.05


class Iterated:
    """Messages wait in one queue for the application's ``async for`` loops.

    Parameters
    ----------
    state:
        The consumer's shared state (closing flag).
    settler:
        Settles the message the loop asked past.
    """

    def __init__(self, state: ConsumerState, settler: Settler) -> None:
        self._state = state
        trace = state.trace
        #: settles the loop's messages; with trace=True wrapped to write each one's
        #: SubAfter, and set on every message delivered (``ack``/``nack`` go through it)
        self._settler: Settler = settler if trace is None else TracedSettler(settler, trace)
        self._retag = trace is not None
        #: messages not yet yielded (and those a closed iterator released)
        self.queue: WorkQueue[WorkItem] = WorkQueue()
        #: messages yielded between checkpoints: a body that never awaits must not
        #: starve pulls, but one loop pass must take what the handler strategy's workers
        #: take together (``consume_concurrency`` x their burst): at 32 a pass, a pass's
        #: pulls decoded up to one answer per queue and the loop fell behind after a stall
        #: (20,000/s, benchmarks/README.md round 7: dispatch p99 18.7-41.2 ms at 32,
        #: 3.7-7.5 ms at 640, the handler consumer's 4.5-6.1)
        self.burst = max(state.config.consume_concurrency, 1) * _WORKER_BURST

    # -- Delivery ------------------------------------------------------------------

    def deliver(self, pq: QueueView, messages: list[ConsumerMessage]) -> None:
        queue = self.queue
        if self._state.closing or queue.closed:
            return  # unsettled: never committed, so redelivered
        if self._retag:
            settler = self._settler
            for msg in messages:
                msg._settler = settler
        queue.put_many(messages)

    async def start(self, tg: anyio.abc.TaskGroup) -> None:
        pass

    def start_queue(self, pq: QueueView) -> None:
        pass

    async def quiesce(self, pqs: list[ProcessQueue]) -> None:
        pass  # a message the loop holds is stale once its queue is dropped: never committed

    async def release(self, pqs: list[ProcessQueue]) -> None:
        pass

    def stop(self) -> list[ConsumerMessage]:
        return close_and_take(self.queue)

    async def drain(self, *, graceful: bool) -> list[ConsumerMessage]:
        return []  # the loop's body is the application's: closing ends its iteration

    # -- iteration -----------------------------------------------------------------------

    async def messages(self) -> AsyncGenerator[ConsumerMessage, None]:
        """Yield the consumer's messages; settle each one when the next is asked for.

        No message is lost to cancellation: the only awaits are before a message is
        taken (the burst checkpoint) or while taking it (``queue.get``, which takes an
        item only when it returns). The message yielded last and left unsettled
        (``break``, a body that raised or was cancelled) is *released* when the iterator
        closes: put back at the front of the queue, so the next iteration yields it again
        and the commit point can move past it. A held message (``msg.hold()``, ``async
        with msg``) is the application's to settle and is never released.
        """
        queue = self.queue
        previous: ConsumerMessage | None = None
        finish = self._settler.finish
        pop_nowait = queue.pop_nowait
        queued = queue.queued  # asked first: no IndexError a wait ("Round 18")
        burst = self.burst
        countdown = _WORKER_BURST
        in_pass = 0  # taken this pass, counted a worker's burst at a time
        monotonic = time.monotonic
        pass_began = monotonic()
        trace = self._state.trace
        try:
            while True:
                if previous is not None:
                    if not previous._held:
                        finish(previous)  # asking for the next message settles the last one
                    previous = None
                countdown -= 1
                if not countdown:
                    countdown = _WORKER_BURST
                    in_pass += _WORKER_BURST
                    if in_pass >= burst or monotonic() - pass_began >= PASS_SECONDS:
                        await anyio.lowlevel.checkpoint()  # let pulls run between bursts
                        in_pass = 0
                        pass_began = monotonic()
                if queued:
                    item = pop_nowait()
                else:
                    try:
                        item = await queue.get()
                    except anyio.EndOfStream:
                        return
                if isinstance(item, list):  # batches go to batch handlers only; be lenient
                    queue.push_front(*item)
                    continue
                if not item.current():
                    continue
                previous = item
                if trace is not None:
                    trace.handed(item)  # its SubBefore; the settle writes its SubAfter
                yield item
        finally:
            if previous is not None and not previous._held and not previous._settled:
                queue.push_front(previous)
