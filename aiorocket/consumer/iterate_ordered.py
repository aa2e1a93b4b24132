"""``async for`` over a FIFO source (a gRPC FIFO group, a lite consumer): each message
group in order.

``Iterated`` hands the loop every message as it arrives. For a FIFO source that breaks
the order on a failure: the failed message goes to the server's backoff while the loop
is handed, and acks, the group's next one. Here, as ``Orderly`` does for a handler, a
message group (a ``QueueView``) has at most one message out to the loops at a time:

* its next message goes to the loops only once that one is settled (acked, or moved to
  the dead-letter queue);
* a failed one (``msg.nack()``, ``async with msg`` whose body raised) is retried in
  place: it stays invisible (the renewer keeps it) and comes back to the loops after the
  settler's pause (``Settler.retry_in_place``), with its delivery attempt counted; at
  its last attempt (or ``nack(-1)``) it goes to the dead-letter queue;
* it comes back only once the loop that failed it has asked for its next message (or
  ended), so that loop cannot settle it again by moving past it;
* a failure once the consumer closes is not retried (the loops end, and the retry's
  task group stops): the message is left unsettled, for the close to release (see
  ``OrderedIterated._left``).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING

import anyio

from aiorocket.consumer.iterate import Iterated

if TYPE_CHECKING:
    import anyio.abc

    from aiorocket.consumer.state import ConsumerState
    from aiorocket.received import ConsumerMessage, QueueView, Settler

__all__ = ["OrderedIterated"]


class _InPlace:
    """The ``Settler`` of an ordered loop's messages: the consumer's, except that a
    failure is retried in place, and a settled message lets its group's next one go."""

    def __init__(self, settler: Settler, owner: OrderedIterated) -> None:
        self._settler = settler
        self._owner = owner
        self.dead_letters = settler.dead_letters
        self.retry_in_place = settler.retry_in_place
        self.dead_letter = settler.dead_letter

    def finish(self, msg: ConsumerMessage) -> bool:
        done = self._settler.finish(msg)
        self._owner.settled(msg)
        return done

    async def settle(self, msg: ConsumerMessage, delay_level: int | None) -> None:
        if delay_level is None:
            self.finish(msg)
        elif not msg._settled:
            await self._owner.failed(msg, delay_level)


class OrderedIterated(Iterated):
    """Messages wait for the application's ``async for`` loops, one per message group
    at a time (see the module docstring).

    Parameters
    ----------
    state:
        The consumer's shared state (closing flag, ``suspend_current_queue_time``).
    settler:
        The consumer's settler: acks, pauses before in-place retries, dead-letters.
    """

    def __init__(self, state: ConsumerState, settler: Settler) -> None:
        self._in_place = _InPlace(settler, self)
        super().__init__(state, self._in_place)
        self._inner = settler
        self._tg: anyio.abc.TaskGroup | None = None
        #: each group's message out to the loops (queued, or in a loop's hands)
        self._out: dict[QueueView, ConsumerMessage] = {}
        #: messages a loop holds (yielded, not yet asked past)
        self._lent: set[ConsumerMessage] = set()
        #: failed messages waiting for their pause to end
        self._retrying: set[ConsumerMessage] = set()
        #: failed messages whose pause is over, waiting for their loop to move on
        self._due: set[ConsumerMessage] = set()

    # -- Delivery ------------------------------------------------------------------

    def deliver(self, pq: QueueView, messages: list[ConsumerMessage]) -> None:
        if self._state.closing or self.queue.closed:
            return  # unsettled: released at the close
        settler = self._settler  # ``_in_place``, traced when tracing (Iterated)
        for msg in messages:
            msg._settler = settler
        pq.buffer.extend(messages)
        self._next(pq)

    async def start(self, tg: anyio.abc.TaskGroup) -> None:
        self._tg = tg

    # -- one message per group -----------------------------------------------------

    def _next(self, pq: QueueView) -> None:
        """Hand the group's next message to the loops, unless one is out."""
        out = self._out.get(pq)
        if out is not None and out.current():
            return
        self._out.pop(pq, None)
        while pq.buffer:
            msg: ConsumerMessage = pq.buffer.popleft()
            if msg.current():
                self._out[pq] = msg
                self.queue.put_many((msg,))
                return

    def settled(self, msg: ConsumerMessage) -> None:
        """``msg`` is settled: its group's next message may go."""
        pq = msg._pq
        if pq is not None and self._out.get(pq) is msg:
            del self._out[pq]
            if not self._state.closing and not self.queue.closed:
                self._next(pq)

    async def failed(self, msg: ConsumerMessage, delay_level: int) -> None:
        """Retry ``msg`` in place after the settler's pause, or dead-letter it."""
        if msg in self._retrying:
            return  # failed twice (a nack, then ``async with msg`` raising): one retry
        if self._state.closing:
            self._left(msg)
            return
        self._retrying.add(msg)
        msg._held = True  # the loop that failed it must not ack it by moving past it
        settler = self._inner
        pause = None if delay_level == -1 else settler.retry_in_place(msg)
        if pause is not None:
            self._retry(msg, pause)
            return
        dead = False
        try:
            dead = await settler.dead_letter(msg)
        finally:
            if msg._settled:  # released by the close while the request was out
                self._retrying.discard(msg)
            elif dead:
                self._retrying.discard(msg)
                msg._settled = True
                if msg._pq is not None:
                    msg._pq.on_done(msg, msg._generation)
                self.settled(msg)
            else:  # the dead-letter queue failed (or the call was cut): again, later
                self._retry(msg, self._state.config.suspend_current_queue_time)

    def _retry(self, msg: ConsumerMessage, pause: float) -> None:
        if self._state.closing:  # the retry's task group stops (or has stopped): none
            self._left(msg)
            return
        self._state.log.info("iterated_retry_in_place", topic=msg.topic, msg_id=msg.msg_id,
                             seconds=pause, attempts=msg.reconsume_times)  # fmt: skip
        assert self._tg is not None
        self._tg.start_soon(self._again, msg, pause)

    def _left(self, msg: ConsumerMessage) -> None:
        """A failure while the consumer closes (or after): no retry in place (no loop
        would take it), the message left unsettled, as the close leaves every message it
        does not settle: released by its release step (a pop source: visible again at
        once), or, after that step, by the session's end (the server stops renewing
        it); over remoting never committed, so the queue's next owner delivers it."""
        self._retrying.discard(msg)
        self._state.log.info("iterated_failure_while_closing", topic=msg.topic,
                             msg_id=msg.msg_id, settled=msg._settled)  # fmt: skip

    async def _again(self, msg: ConsumerMessage, pause: float) -> None:
        await anyio.sleep(pause)
        self._retrying.discard(msg)
        if msg in self._lent:
            self._due.add(msg)  # back once its loop asked past it
        else:
            self._requeue(msg)

    def _requeue(self, msg: ConsumerMessage) -> None:
        if msg.current() and not self._state.closing and not self.queue.closed:
            self.queue.push_front(msg)  # unsettled otherwise: released at the close

    # -- iteration -----------------------------------------------------------------------

    async def messages(self) -> AsyncGenerator[ConsumerMessage, None]:
        """``Iterated.messages``, noting which messages a loop holds."""
        lent = self._lent
        inner = super().messages()
        held: ConsumerMessage | None = None
        try:
            async for msg in inner:
                msg._held = False  # a retried message is the loop's again
                lent.add(msg)
                held = msg
                yield msg
                self._passed(held)
                held = None
        finally:
            await inner.aclose()
            if held is not None:
                self._passed(held)

    def _passed(self, msg: ConsumerMessage) -> None:
        self._lent.discard(msg)
        if msg in self._due:
            self._due.discard(msg)
            self._requeue(msg)
