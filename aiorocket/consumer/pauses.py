"""What the application paused (``Consumer.pause``): the one answer every receive loop
asks before it receives.

Pausing stops *receiving*: the remoting pull task of a paused queue waits instead of
pulling (``Puller``); a pop receive skips paused topics and, with all of them paused,
waits (``Receiver``, the sources' topic choice). Nothing already received is touched:
the cache's messages are still handled and settled in order, a receive in flight when
the pause is asked still hands on what it brings, and the queues stay ours (offsets
commit, POP messages keep being renewed). Resuming wakes the loops, which go on from
where they stopped (the pull task's next offset; the broker's pop position).

Names are the application's (no namespace); a queue is a
[`MessageQueue`][aiorocket.message.MessageQueue]. Pausing covers queues assigned
later too (a rebalance), so a paused topic stays paused until resumed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from aiorocket._signal import Signal
from aiorocket.message import MessageQueue

__all__ = ["PauseTarget", "Pauses"]

#: what may be paused: a topic's name or one queue
PauseTarget = str | MessageQueue


class Pauses:
    """The paused topics and queues of one consumer (``ConsumerState.pauses``).

    Parameters
    ----------
    unwrap:
        The application's name of a topic as the receive loops know it (the
        namespace taken off).
    """

    def __init__(self, unwrap: Callable[[str], str] = lambda topic: topic) -> None:
        self._unwrap = unwrap
        #: everything paused (``pause()`` with no target)
        self.everything = False
        self._topics: set[str] = set()
        #: topics resumed by name while everything is paused
        self._resumed: set[str] = set()
        self._queues: set[MessageQueue] = set()
        #: ``any`` as a plain attribute, kept by every change: a pull task reads it once a
        #: pull, where ``queue_paused`` cost a call (benchmarks/README.md, "Round 18")
        self.some = False
        self._changed = Signal()
        #: called after each change (wakes waiting pull tasks)
        self.on_change: list[Callable[[], None]] = []

    def pause(self, targets: Iterable[PauseTarget]) -> None:
        targets = list(targets)
        if not targets:
            self.everything = True
            self._resumed.clear()
        for target in targets:
            if isinstance(target, MessageQueue):
                self._queues.add(target)
            else:
                self._topics.add(target)
                self._resumed.discard(target)
        self._notify()

    def resume(self, targets: Iterable[PauseTarget]) -> None:
        """Resume ``targets`` (none: everything paused, whatever it was)."""
        targets = list(targets)
        if not targets:
            self.everything = False
            self._topics.clear()
            self._queues.clear()
            self._resumed.clear()
        for target in targets:
            if isinstance(target, MessageQueue):
                self._queues.discard(target)
            else:
                self._topics.discard(target)
                if self.everything:  # the others (and the retry queues) stay paused
                    self._resumed.add(target)
        self._notify()

    def paused(self, subscribed: Iterable[str]) -> frozenset[PauseTarget]:
        """The paused topics and queues (of ``subscribed``, the application's topic names,
        every one not resumed while everything is paused)."""
        if self.everything:
            return frozenset([*(t for t in subscribed if t not in self._resumed), *self._queues])
        return frozenset([*self._topics, *self._queues])

    @property
    def any(self) -> bool:
        return self.everything or bool(self._topics or self._queues)

    def idle(self, topics: Iterable[str]) -> bool:
        """Nothing of ``topics`` (the loop's names) is to be received."""
        return all(self.topic_paused(t) for t in topics)

    def topic_paused(self, topic: str) -> bool:
        """Receiving ``topic`` (the loop's name of it) is paused."""
        if self.everything:
            return not self._resumed or self._unwrap(topic) not in self._resumed
        return bool(self._topics) and self._unwrap(topic) in self._topics

    def queue_paused(self, mq: MessageQueue) -> bool:
        """Pulling ``mq`` (the loop's name of it) is paused: it, its topic or everything."""
        if not (self.everything or self._topics or self._queues):
            return False
        topic = self._unwrap(mq.topic)
        if self.topic_paused(topic):
            return True
        return MessageQueue(topic, mq.broker_name, mq.queue_id) in self._queues

    async def wait_changed(self) -> None:
        await self._changed.wait()

    def _notify(self) -> None:
        self.some = self.any
        self._changed.notify()
        for callback in self.on_change:
            callback()
