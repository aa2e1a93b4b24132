"""Per-queue buffers for [`PullConsumer`][aiorocket.consumer.PullConsumer].

Messages wait in their ProcessQueue's buffer until the application takes them, which
makes per-queue ``pause``/``resume`` and ``seek`` cheap: they act on one queue's buffer
and pull task. A message taken counts as consumed (aiokafka's position model).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import anyio
import anyio.abc

from aiorocket._signal import Signal

if TYPE_CHECKING:
    from aiorocket.consumer.locks import QueueLocks
    from aiorocket.consumer.process_queue import ProcessQueue
    from aiorocket.consumer.state import ConsumerState
    from aiorocket.message import MessageQueue
    from aiorocket.received import ConsumerMessage, QueueView

__all__ = ["Buffered"]


class Buffered:
    """The pull consumer's delivery strategy: buffers the application takes from.

    Parameters
    ----------
    state:
        The consumer's shared state: its process queues are the buffers.
    locks:
        With ``orderly=True``, the queues' broker locks: a revoked queue is unlocked.
    """

    def __init__(self, state: ConsumerState, locks: QueueLocks | None = None) -> None:
        self._state = state
        self._locks = locks
        #: notified when messages arrive or a queue is resumed
        self.available = Signal()
        self._next_queue = 0

    # -- Delivery ------------------------------------------------------------------

    def deliver(self, pq: QueueView, messages: list[ConsumerMessage]) -> None:
        if self._state.closing:
            return  # unsettled: never committed, so redelivered
        pq.buffer.extend(messages)
        pq.notify()
        self.available.notify()

    async def start(self, tg: anyio.abc.TaskGroup) -> None:
        pass

    def start_queue(self, pq: QueueView) -> None:
        pass

    async def quiesce(self, pqs: list[ProcessQueue]) -> None:
        pass  # taken messages are consumed already (position model)

    async def release(self, pqs: list[ProcessQueue]) -> None:
        if self._locks is not None:
            await self._locks.unlock([pq.mq for pq in pqs])

    def stop(self) -> list[ConsumerMessage]:
        return []  # buffered until the application takes them: uncommitted, redelivered

    async def drain(self, *, graceful: bool) -> list[ConsumerMessage]:
        return []

    # -- taking ------------------------------------------------------------------------

    def take(self, max_records: int) -> dict[MessageQueue, list[ConsumerMessage]]:
        """Up to ``max_records`` buffered messages of active queues, marked consumed;
        the first queue rotates between calls so no queue starves the others."""
        pqs = [pq for pq in self._state.process_queues.values() if not pq.dropped and not pq.paused]
        out: dict[MessageQueue, list[ConsumerMessage]] = {}
        if not pqs:
            return out
        taken = 0
        start = self._next_queue % len(pqs)
        self._next_queue += 1
        for pq in pqs[start:] + pqs[:start]:
            batch: list[ConsumerMessage] = []
            while pq.buffer and taken < max_records:
                msg: ConsumerMessage = pq.buffer.popleft()
                if not msg.current():
                    continue
                msg._settled = True
                pq.on_done(msg, msg._generation)  # returned = consumed (position model)
                batch.append(msg)
                taken += 1
            if batch:
                out[pq.mq] = batch
            if taken >= max_records:
                break
        return out
