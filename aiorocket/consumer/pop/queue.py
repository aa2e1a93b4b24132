"""The gRPC source's queues, as the delivery strategies see them (a ``QueueView``).

A ``PopQueue`` groups what the strategies must treat as one unit: the messages of
one Proxy queue (topic, broker, queue id), or, in a FIFO group, of one message group,
which orderly delivery handles one at a time in arrival order. Its cached messages
count against the consumer's ``CacheBudget``,
which is what the receivers wait on.

A message group's queue lives while it holds messages: when its last one is settled
it is dropped (its consume loop ends) and forgotten; the group's next message makes a
new one. Since the old queue held nothing, the order within the group is kept.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import anyio

from aiorocket._signal import Signal
from aiorocket.message import MessageExt, MessageQueue

if TYPE_CHECKING:
    from aiorocket.consumer.process_queue import CacheBudget
    from aiorocket.received import PopMessage

__all__ = ["PopQueue", "PopQueues"]


class _Fixed:
    """Pop consumption has no offsets to reset: one generation for ever."""

    __slots__ = ()
    generation = 0


_FIXED = _Fixed()


class PopQueue:
    """The messages of one Proxy queue or one FIFO message group (see the module doc).

    Parameters
    ----------
    mq:
        What logs and handler errors name: the topic, broker and queue id (a message
        group's first message's).
    budget:
        The consumer's cache budget: this queue reports its messages to it.
    on_empty:
        Called when the last cached message is settled (message groups only).
    on_settled:
        Called with each message settled (the renewer lets go of it).
    """

    __slots__ = (
        "_budget",
        "_changed",
        "_on_empty",
        "_on_settled",
        "buffer",
        "cached",
        "consume_scope",
        "dropped",
        "mq",
        "order_lock",
        "running",
        "suspended_until",
        "tracker",
    )

    def __init__(
        self,
        mq: MessageQueue,
        budget: CacheBudget,
        on_empty: Callable[[PopQueue], None] | None = None,
        on_settled: Callable[[PopMessage], None] | None = None,
    ) -> None:
        self.mq = mq
        self.tracker = _FIXED
        self.dropped = False
        self.running = 0
        self.buffer: deque[Any] = deque()
        self.order_lock = anyio.Lock()
        self.suspended_until = 0.0
        self.consume_scope: anyio.CancelScope | None = None
        self.cached = 0
        self._budget = budget
        self._on_empty = on_empty
        self._on_settled = on_settled
        self._changed = Signal()

    def on_received(self, messages: list[PopMessage]) -> None:
        self.cached += len(messages)
        self._budget.add(len(messages), sum([len(m.body) for m in messages]))

    def on_done(self, msg: MessageExt, generation: int, now: float = 0.0) -> bool:
        self.cached -= 1
        self._budget.release(1, len(msg.body))
        if self._on_settled is not None:
            self._on_settled(msg)  # type: ignore[arg-type]  # a PopQueue holds PopMessages
        self._changed.notify()
        if not self.cached and self._on_empty is not None:
            self.dropped = True
            self._on_empty(self)
        return True

    def notify(self) -> None:
        self._changed.notify()

    async def wait_changed(self) -> None:
        await self._changed.wait()

    def __repr__(self) -> str:
        return f"<PopQueue {self.mq} cached={self.cached} running={self.running}>"


class PopQueues:
    """Finds each received message's ``PopQueue``, making it on first sight.

    Parameters
    ----------
    budget:
        The consumer's cache budget, shared by every queue.
    fifo:
        The group is FIFO: one queue per message group (of a topic).
    on_settled:
        Called with each message settled (``Renewer.forget``).
    """

    def __init__(
        self,
        budget: CacheBudget,
        *,
        fifo: bool,
        on_settled: Callable[[PopMessage], None] | None = None,
    ) -> None:
        self._budget = budget
        self.fifo = fifo
        self._on_settled = on_settled
        self._queues: dict[tuple[str, str, int] | tuple[str, str | None], PopQueue] = {}

    def queue_of(self, msg: PopMessage) -> tuple[PopQueue, bool]:
        """The message's queue, and whether it was made just now."""
        key: tuple[str, str, int] | tuple[str, str | None]
        group_key = (msg.topic, msg.message_group)
        key = group_key if self.fifo else (msg.topic, msg.broker_name, msg.queue_id)
        pq = self._queues.get(key)
        if pq is not None:
            return pq, False
        forget = self._forget_when_empty(group_key) if self.fifo else None
        mq = MessageQueue(msg.topic, msg.broker_name, msg.queue_id)
        pq = self._queues[key] = PopQueue(mq, self._budget, forget, self._on_settled)
        return pq, True

    def _forget_when_empty(self, key: tuple[str, str | None]) -> Callable[[PopQueue], None]:
        def forget(pq: PopQueue) -> None:
            if self._queues.get(key) is pq:
                del self._queues[key]

        return forget

    def all(self) -> list[PopQueue]:
        return list(self._queues.values())
