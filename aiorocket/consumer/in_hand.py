"""A message delivered again while a handler call of it still runs (remoting pull).

A queue taken from this member while its handler hung is pulled by another member; if
that member's call fails, the broker stores a copy in the group's retry topic, and this
member, which pulls the retry topic too, may receive the copy while its own first call
still runs (pull_remoting seed 7017 of the simulator). Dispatched, the copy would be
handled a second time at once.

The rule is the POP consumer's (``aiorocket.consumer.pop.in_hand``): a copy of a message
in a handler call is not handed to the application; it waits for that call and is
settled by the message's outcome. A success finishes the copy too (its offset in the
retry queue may be committed past: the message was handled); a failure (the handler's,
a consume timeout, the application's nack) sends the copy down its own retry path with
the same delay level (``RemotingSettler.settle``: sent back, counted as one more
attempt; its queue revoked meanwhile, left for the queue's next owner). Meanwhile the
copy stays in its queue's cache, unsettled, so nothing commits past it.

Every await: the copies wait in ``settle_by_outcome``, a task of the worker pool. The
first call ending any way settles the message (``_settled``) before the pool's next
await, and wakes the wait (its queue's ``notify``; a failure's too, ``failed``). If
the pool is cancelled (the close) while copies wait or are being settled, they stay
unsettled and registered: the close's drain takes them with the calls it cut
(``unsettled``), so they are handed back or left uncommitted like those, redelivered.
A copy's own queue revoked or reset meanwhile: its settling is stale (nothing
committed) and the queue's next owner delivers it.

Identity (``same_message``, the POP consumer's too): a redelivery keeps the message's
``UNIQ_KEY``, and the broker's send-back records the first one's id as
``ORIGIN_MESSAGE_ID`` (``SendMessageProcessor.consumerSendMsgBack``: the properties are
copied, ``setOriginMessageId`` with the stored message's id unless one is set). A
candidate has the copy's body and topic before its id is read (its properties parsed).

Cost: only messages of a retry topic are looked at (``WorkerPool.deliver``, once per
pull answer: a topic test), and only against the handler calls running then (at most
``consume_concurrency``); a handler call registers nothing, so the per-message path is
unchanged. A copy whose first delivery is queued, not yet in a call, is not found: it
is dispatched (the two calls may overlap; at-least-once holds).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from aiorocket.message import PROPERTY_ORIGIN_MESSAGE_ID, PROPERTY_UNIQ_KEY

if TYPE_CHECKING:
    from aiorocket.received import ConsumerMessage, Settler

__all__ = ["CallCopies", "Waiting", "redelivered_id", "same_message"]


def same_message(held: ConsumerMessage, copy: ConsumerMessage, key: str) -> bool:
    """``held`` (unsettled, in hand) is the message ``copy`` delivers again, ``key``
    being the copy's id (``redelivered_id``). Body and topic first: cheap, and they
    spare most candidates the parsing of their properties (``msg_id``)."""
    return (
        held is not copy
        and not held._settled
        and held.body == copy.body
        and held.topic == copy.topic
        and held.msg_id == key
    )


def redelivered_id(copy: ConsumerMessage) -> str:
    """The id a redelivery shares with its first delivery: the producer's ``UNIQ_KEY``
    (kept), else the one the broker recorded (the first's offset id); "" if neither."""
    props = copy.properties
    return props.get(PROPERTY_UNIQ_KEY) or props.get(PROPERTY_ORIGIN_MESSAGE_ID) or ""


class Waiting:
    """A message in a handler call and its copies waiting for its outcome."""

    __slots__ = ("copies", "first", "level")

    def __init__(self, first: ConsumerMessage) -> None:
        self.first = first
        self.copies: list[ConsumerMessage] = []
        #: the delay level its failure was settled with; None: not failed
        self.level: int | None = None


class CallCopies:
    """Copies of messages in a handler call, by the message (see the module doc)."""

    __slots__ = ("_waiting",)

    def __init__(self) -> None:
        self._waiting: dict[int, Waiting] = {}

    def attach(
        self, messages: list[ConsumerMessage], calls: Iterable[ConsumerMessage]
    ) -> tuple[list[ConsumerMessage], list[Waiting]]:
        """Split redelivered ``messages``: those to dispatch, and the new waits (to be
        run by ``settle_by_outcome``) of those attached to a message of ``calls``."""
        running = [m for m in calls if not m._settled]
        if not running:
            return messages, []
        out: list[ConsumerMessage] = []
        new: list[Waiting] = []
        for msg in messages:
            key = redelivered_id(msg)
            first = next((m for m in running if same_message(m, msg, key)), None) if key else None
            if first is None:
                out.append(msg)
                continue
            waiting = self._waiting.get(id(first))
            if waiting is None:
                waiting = self._waiting[id(first)] = Waiting(first)
                new.append(waiting)
            waiting.copies.append(msg)
        return out, new

    def failed(self, msg: ConsumerMessage, level: int) -> None:
        """``msg`` is being settled as failed (before it is marked settled): its copies
        follow with ``level``."""
        waiting = self._waiting.get(id(msg))
        if waiting is not None:
            waiting.level = level
            if msg._pq is not None:  # the wait sees it settled after this settle's start
                msg._pq.notify()

    async def settle_by_outcome(self, waiting: Waiting, settler: Settler) -> None:
        """Wait until ``waiting.first`` is settled, then settle its copies alike. Cancelled:
        what is unsettled stays registered (``unsettled``)."""
        first = waiting.first
        pq = first._pq
        assert pq is not None
        while not first._settled:
            await pq.wait_changed()
        for copy in waiting.copies:
            if waiting.level is None:
                settler.finish(copy)
            else:
                await settler.settle(copy, waiting.level)
        del self._waiting[id(first)]

    def unsettled(self) -> list[ConsumerMessage]:
        """Copies still waiting or not settled (the pool was cancelled)."""
        return [c for w in self._waiting.values() for c in w.copies if not c._settled]

    def __len__(self) -> int:
        return len(self._waiting)
