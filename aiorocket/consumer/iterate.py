"""``async for msg in consumer``: the work queue as an async iterator.

The iterator replaces the handler workers: it settles a message when the loop asks for
the next one, so the body's success is the ack, with no task or callback per message.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING

import anyio
import anyio.lowlevel

from aiorocket.consumer.dispatch import WorkItem
from aiorocket.consumer.message import ConsumerMessage
from aiorocket.consumer.work_queue import WorkQueue

if TYPE_CHECKING:
    from aiorocket.consumer.consumer import Consumer

#: messages yielded between checkpoints: a body that never awaits must not starve pulls.
_BURST = 32


async def messages(
    consumer: Consumer, queue: WorkQueue[WorkItem]
) -> AsyncGenerator[ConsumerMessage, None]:
    """Yield the consumer's messages; settle each one when the next is asked for.

    No message is lost to cancellation: the only awaits are before a message is taken
    (the burst checkpoint) or while taking it (``queue.get``, which takes an item only
    when it returns). The message yielded last and left unsettled (``break``, a body that
    raised or was cancelled) is *released* when the iterator closes: put back at the
    front of the queue, so the next iteration yields it again and the commit point can
    move past it. A held message (``msg.hold()``, ``async with msg``) is the
    application's to settle and is never released.
    """
    previous: ConsumerMessage | None = None
    finish = consumer.finish
    pop_nowait = queue.pop_nowait
    countdown = _BURST
    try:
        while True:
            if previous is not None:
                if not previous._held:
                    finish(previous)  # asking for the next message settles the last one
                previous = None
            countdown -= 1
            if not countdown:
                countdown = _BURST
                await anyio.lowlevel.checkpoint()  # let pulls run between bursts
            try:
                item = pop_nowait()
            except IndexError:
                try:
                    item = await queue.get()
                except anyio.EndOfStream:
                    return
            if isinstance(item, list):  # batches go to batch handlers only; be lenient
                queue.push_front(*item)
                continue
            pq = item._pq
            if pq is None or pq.dropped or item._settled:
                continue
            if item._generation != pq.tracker.generation:
                continue
            previous = item
            yield item
    finally:
        if previous is not None and not previous._held and not previous._settled:
            queue.push_front(previous)
