"""``async for msg in consumer``: the work queue as an async iterator.

The iterator replaces the handler workers: it settles a message when the loop asks for
the next one, so the body's success is the ack, with no task or callback per message.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
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
) -> AsyncIterator[ConsumerMessage]:
    """Yield the consumer's messages; settle each one when the next is asked for."""
    previous: ConsumerMessage | None = None
    finish = consumer.finish
    pop_nowait = queue.pop_nowait
    countdown = _BURST
    while True:
        if previous is not None and not previous._held:
            finish(previous)  # asking for the next message settles the last one
        previous = None
        try:
            item = pop_nowait()
        except IndexError:
            try:
                item = await queue.get()
            except anyio.EndOfStream:
                return
        for msg in item if isinstance(item, list) else (item,):
            pq = msg._pq
            if pq is None or pq.dropped or msg._settled:
                continue
            if msg._generation != pq.tracker.generation:
                continue
            if previous is not None and not previous._held:
                finish(previous)
            previous = msg
            countdown -= 1
            if not countdown:
                countdown = _BURST
                await anyio.lowlevel.checkpoint()  # let pulls run between bursts
            yield msg
