"""A message delivered again while this member still has it in hand (remoting pull).

A queue taken from this member while its handler hung is pulled by another member; if
that member's call fails, the broker stores a copy in the group's retry topic, and this
member, which pulls the retry topic too, may receive the copy while its own first call
still runs (pull_remoting seed 7017 of the simulator). Dispatched, the copy would be
handled a second time at once.

The rule is the POP consumer's (``aiorocket.consumer.pop.in_hand``): a copy of a message
in hand is not handed to the application; it waits for that message's call and is
settled by its outcome. A success finishes the copy too (its offset in the
retry queue may be committed past: the message was handled); a failure (the handler's,
a consume timeout, the application's nack) sends the copy down its own retry path with
the same delay level (``RemotingSettler.settle``: sent back, counted as one more
attempt; its queue revoked meanwhile, left for the queue's next owner). Meanwhile the
copy stays in its queue's cache, unsettled, so nothing commits past it.

The outcome is the message's last: a failure counts once its settling is over
(``failing`` then ``resolved``, around ``RemotingSettler.settle``'s send-back). A
send-back that fails leaves the message unsettled for a local retry, and its failure is
undone (``resolved``): the copies wait on for the retry's outcome, so a retry that
succeeds finishes them rather than sending them back (one delivery more for nothing).

Where a first delivery may be when its copy comes: in a handler call, or queued (in the
work queue, not yet taken). Both are looked for (``attach``: the calls and the queued
messages of the pool). A queued one may never reach a call here: its queue revoked or
reset, a worker skips it; so may one whose send-back failed, its local retry dropped
with its queue. A copy whose first is not settled, not being settled, not in a call,
and whose queue is dropped or reset is handed on (``CallHost.hand_on``: queued for the
workers like any message), as it would have been with no first in hand; the first
delivery comes again to its queue's next owner.

Every await: the copies wait in ``settle_by_outcome``, a task of the worker pool. The
first call ending any way settles the message (``_settled``) before the pool's next
await, or starts settling its failure (``failing``), and the end of that settling wakes
the wait (its queue's ``notify``). When every worker has returned (the close: the work
queue closed and drained), nothing settles a first here any more: ``close`` ends the
waits, and the copies still waiting stay unsettled and registered. So do those of a
pool cancelled (the close's cut) while they wait or are being settled. The close's drain
returns them (``unsettled``) with the calls it cut, handed back or left uncommitted like
those (``RemotingSettler.hand_back``), redelivered; a first left waiting for its local
retry is not handed out again and stays uncommitted in its queue (its next owner pulls
it). A copy's own queue revoked or reset meanwhile: its settling is stale (nothing
committed) and the queue's next owner delivers it.

Identity (``same_message``, the POP consumer's too): a redelivery keeps the message's
``UNIQ_KEY``, and the broker's send-back records the first one's id as
``ORIGIN_MESSAGE_ID`` (``SendMessageProcessor.consumerSendMsgBack``: the properties are
copied, ``setOriginMessageId`` with the stored message's id unless one is set). A
candidate has the copy's body and topic before its id is read (its properties parsed).

Cost: only messages of a retry topic are looked at (``WorkerPool.deliver``, once per
pull answer: a topic test); a handler call and a queued message register nothing, so
the per-message path is unchanged. A retry answer's copies are indexed by body, and the
handler calls running then (at most ``consume_concurrency``) and the queued messages
are passed over once, a dict lookup each (``attach``): a retry answer costs a pass over
the work queue, which the cache limits bound (``pull_threshold_for_queue`` a queue);
a copy's properties, and a candidate's, are read only for a body found.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Protocol

from aiorocket.message import PROPERTY_ORIGIN_MESSAGE_ID, PROPERTY_UNIQ_KEY

if TYPE_CHECKING:
    from aiorocket.received import ConsumerMessage, Settler

__all__ = ["CallCopies", "CallHost", "Waiting", "hashable", "redelivered_id", "same_message"]


def hashable(body: bytes) -> bytes:
    """The codec's bodies are bytes; one built otherwise (a bytearray) is copied."""
    return body if type(body) is bytes else bytes(body)


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


class CallHost(Protocol):
    """What a wait needs of the worker pool."""

    def in_call(self, msg: ConsumerMessage) -> bool:
        """``msg`` is in a handler call now."""
        ...

    def hand_on(self, copies: list[ConsumerMessage]) -> bool:
        """Queue ``copies`` for the workers; False if the pool is closing (not queued)."""
        ...


class Waiting:
    """A message in hand (in a handler call, or queued) and its copies waiting for its
    outcome."""

    __slots__ = ("copies", "first", "level", "settling")

    def __init__(self, first: ConsumerMessage) -> None:
        self.first = first
        self.copies: list[ConsumerMessage] = []
        #: the delay level its failure was settled with; None: not failed, or its
        #: failure undone (a failed send-back: a local retry decides)
        self.level: int | None = None
        #: its failure is being settled (a send-back under way): not decided yet
        self.settling = False

    def decided(self) -> bool:
        return self.first._settled and not self.settling

    def abandoned(self) -> bool:
        """Unsettled, and its queue dropped or reset: no worker will call it (one in a
        call may still end: ``CallHost.in_call``)."""
        first = self.first
        pq = first._pq
        return (
            not first._settled
            and not self.settling
            and (pq is None or pq.dropped or first._generation != pq.tracker.generation)
        )


class CallCopies:
    """Copies of messages in hand, by the message (see the module doc)."""

    __slots__ = ("_waiting", "closed")

    def __init__(self) -> None:
        self._waiting: dict[int, Waiting] = {}
        #: every worker has returned: no first is settled here any more
        self.closed = False

    def attach(
        self,
        messages: list[ConsumerMessage],
        calls: Iterable[ConsumerMessage],
        queued: Iterable[ConsumerMessage],
    ) -> tuple[list[ConsumerMessage], list[Waiting]]:
        """Split redelivered ``messages``: those to dispatch, and the new waits (to be
        run by ``settle_by_outcome``) of those attached to a message of ``calls`` (in a
        handler call) or ``queued`` (not yet taken; only one still current counts)."""
        wanted: dict[bytes, list[ConsumerMessage]] = {}
        for msg in messages:
            wanted.setdefault(hashable(msg.body), []).append(msg)
        keys: dict[int, str] = {}  # id(copy): its id, read once its body is found
        firsts: dict[int, ConsumerMessage] = {}  # id(copy): its first
        for held, queued_now in _in_hand(calls, queued):
            candidates = wanted.get(hashable(held.body))
            if candidates is None or (queued_now and not held.current()):
                continue
            for copy in candidates:
                if id(copy) in firsts:
                    continue
                key = keys.get(id(copy))
                if key is None:
                    key = keys[id(copy)] = redelivered_id(copy)
                if key and same_message(held, copy, key):
                    firsts[id(copy)] = held
        if not firsts:
            return messages, []
        out: list[ConsumerMessage] = []
        new: list[Waiting] = []
        for msg in messages:
            first = firsts.get(id(msg))
            if first is None:
                out.append(msg)
                continue
            waiting = self._waiting.get(id(first))
            if waiting is None:
                waiting = self._waiting[id(first)] = Waiting(first)
                new.append(waiting)
            waiting.copies.append(msg)
        return out, new

    def failing(self, msg: ConsumerMessage, level: int) -> Waiting | None:
        """``msg``'s failure is being settled with ``level`` (before it is marked
        settled); ``resolved`` follows when that settling is over."""
        waiting = self._waiting.get(id(msg))
        if waiting is not None:
            waiting.level = level
            waiting.settling = True
        return waiting

    def resolved(self, waiting: Waiting) -> None:
        """The settling ``failing`` began is over: the copies follow it if it settled
        the message, else (a failed send-back, a local retry to come; interrupted) the
        failure is undone and they wait for the next outcome."""
        waiting.settling = False
        first = waiting.first
        if not first._settled:
            waiting.level = None
        if first._pq is not None:
            first._pq.notify()

    async def settle_by_outcome(self, waiting: Waiting, settler: Settler, host: CallHost) -> None:
        """Wait until ``waiting.first``'s outcome is decided, then settle its copies
        alike; hand them on if no call of it will run here. Ended by ``close`` or
        cancelled: what is unsettled stays registered (``unsettled``)."""
        first = waiting.first
        pq = first._pq
        assert pq is not None
        while not waiting.decided():
            if self.closed:
                return
            if waiting.abandoned() and not host.in_call(first):
                del self._waiting[id(first)]
                if not host.hand_on(waiting.copies):
                    self._waiting[id(first)] = waiting  # closing: the drain takes them
                return
            await pq.wait_changed()
        for copy in waiting.copies:
            if waiting.level is None:
                settler.finish(copy)
            else:
                await settler.settle(copy, waiting.level)
        del self._waiting[id(first)]

    def open(self) -> None:
        """The worker pool (re)starts."""
        self.closed = False

    def close(self) -> None:
        """Every worker has returned: the waits end (see the module doc)."""
        self.closed = True
        for waiting in self._waiting.values():
            if waiting.first._pq is not None:
                waiting.first._pq.notify()

    def unsettled(self) -> list[ConsumerMessage]:
        """Copies still waiting or not settled (the pool closed or was cancelled)."""
        return [c for w in self._waiting.values() for c in w.copies if not c._settled]

    def __len__(self) -> int:
        return len(self._waiting)


def _in_hand(
    calls: Iterable[ConsumerMessage], queued: Iterable[ConsumerMessage]
) -> Iterable[tuple[ConsumerMessage, bool]]:
    """The messages in hand, those in a call first: (message, queued)."""
    for m in calls:
        yield m, False
    for m in queued:
        yield m, True
