"""The message consumers hand to user code, and the two seams it is settled through.

This is the neutral core of consumption, shared by both transports:

* ``ConsumerMessage``: a stored message that can be settled (ack, nack, hold), and
  ``PopMessage``, one received by pop (a receipt handle and a delivery attempt);
* ``Settler``: what settling means for a way of consuming (pull over remoting: commit
  offsets and send failures back; pop, through a Proxy or from the brokers: ack,
  change the invisible time, dead-letter). Every retry and dead-letter decision is
  made in a settler;
* ``QueueView``: what the delivery strategies read and change of the queue a
  message came from (a pulled ``ProcessQueue``, or a pop source's ``PopQueue``).

The delivery strategies (worker pool, ``async for``, orderly) are typed against these
protocols only, so one runtime serves both transports.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol

import anyio

from aiorocket._validate import check_retry_delay
from aiorocket.message import MessageExt, MessageQueue, init_stores_slots

if TYPE_CHECKING:
    from aiorocket._trace import CallTrace

__all__ = [
    "ConsumerMessage",
    "Generation",
    "PopMessage",
    "QueueView",
    "Settler",
]


class Generation(Protocol):
    """A queue's position generation: bumped by a reset (seek, OFFSET_ILLEGAL)."""

    @property
    def generation(self) -> int: ...


class QueueView(Protocol):
    """The queue a message came from, as the delivery strategies see it."""

    @property
    def mq(self) -> MessageQueue: ...

    @property
    def tracker(self) -> Generation: ...

    #: revoked (remoting) or closed: its messages are no longer to be handed out
    dropped: bool
    #: handler calls running for this queue
    running: int
    #: orderly: messages in order, the head being handled
    buffer: deque[Any]
    #: orderly: held while a handling step runs
    order_lock: anyio.Lock
    #: orderly: ``anyio.current_time()`` before which no step starts
    suspended_until: float
    #: orderly: the scope of the queue's consume loop
    consume_scope: anyio.CancelScope | None

    def notify(self) -> None:
        """Wake whoever waits in ``wait_changed``."""

    async def wait_changed(self) -> None:
        """Wait until a message of this queue finishes, or it is dropped or notified."""

    def on_done(self, msg: MessageExt, generation: int, now: float = 0.0) -> bool:
        """A message left the queue's cache settled; False if it was stale. ``now``:
        ``time.monotonic()`` if the caller just read it, else 0.0."""


class Settler(Protocol):
    """How messages of one transport are settled: every decision about a failed
    message (retry where, how often, when to dead-letter) lives in the implementation.
    """

    def finish(self, msg: ConsumerMessage) -> bool:
        """Settle as consumed, without awaiting; False if settled already or stale."""

    async def settle(self, msg: ConsumerMessage, delay_level: int | None) -> None:
        """``None``: consumed; else a failure: retry by ``delay_level`` (0: the
        transport's policy; -1: straight to the dead-letter queue), or after
        ``msg._retry_delay`` seconds when that is set (``retry_delay``)."""

    def dead_letters(self, msg: ConsumerMessage, delay_level: int) -> bool:
        """Whether failing ``msg`` now (with ``delay_level``) sends it to the
        dead-letter queue: its last attempt, or -1. For the log, before the settle."""

    def retry_in_place(self, msg: ConsumerMessage) -> float | None:
        """Orderly/FIFO consumption failed ``msg``: count the attempt and return the
        pause before it is handled again, or None once it is out of attempts (then
        ``dead_letter``). The message stays unsettled and in place."""

    async def dead_letter(self, msg: ConsumerMessage, *, raise_unreachable: bool = False) -> bool:
        """Send ``msg`` to the group's dead-letter queue; False if that failed (logged).
        ``raise_unreachable``: a failure that is not the server's answer raises."""


@dataclass(slots=True, eq=False, repr=False)
class ConsumerMessage(MessageExt):
    """A received message.

    A message is *settled* exactly once: ``await msg.ack()`` marks it consumed (its
    offset may then be committed); ``await msg.nack(delay_level)`` sends it back for a
    later retry (or, after ``max_reconsume_times``, to the dead-letter queue).
    ``async with msg:`` acks on a clean exit and nacks when the block raises.
    Until it is settled, no offset at or past it is committed, so a crash or
    cancellation redelivers it.
    """

    _pq: QueueView | None = None
    _generation: int = 0
    _settler: Settler | None = None
    _settled: bool = False
    _held: bool = False
    #: the consume-timeout watchdog cancelled its handler call (a failure, settled for a
    #: retry); a call cancelled otherwise (a close) leaves the message to be redelivered
    _timed_out: bool = False
    #: the exception a wrapper of the handler (FastStream's subscriber) caught and turned
    #: into a failure result: the dead-letter log names it, not the result
    _failure: Exception | None = None
    #: seconds the failure being settled asks the message back after
    #: (``Reconsume(delay=)``, ``nack(delay=)``); None: the transport's backoff. Set just
    #: before the settle, read by the settler (``retry_delay``)
    _retry_delay: float | None = None
    #: trace=True, ``async for``: the trace of its handing to the loop, until the
    #: application settles it (its ``SubAfter``; ``aiorocket.consumer.trace``)
    _trace: CallTrace | None = None

    @property
    def settled(self) -> bool:
        return self._settled

    def current(self) -> bool:
        """Still to be handed out or handled: not settled, its queue still ours, and not
        reset (seek, OFFSET_ILLEGAL, an operator's reset) since it was pulled. The one
        check every delivery path makes before giving a message to the application."""
        pq = self._pq
        return (
            pq is not None
            and not self._settled
            and not pq.dropped
            and self._generation == pq.tracker.generation
        )

    async def ack(self) -> None:
        if self._settler is not None:
            await self._settler.settle(self, None)

    async def nack(self, delay_level: int = 0, *, delay: float | None = None) -> None:
        """Failed: back for a retry by ``delay_level``, or after ``delay`` seconds
        (``Reconsume(delay=)`` says how each transport keeps it)."""
        if delay is not None:
            delay_level = 0
            self._retry_delay = check_retry_delay(delay)
        if self._settler is not None:
            await self._settler.settle(self, delay_level)

    def hold(self) -> ConsumerMessage:
        """Take manual control: ``async for`` will not auto-ack this message."""
        self._held = True
        return self

    async def __aenter__(self) -> ConsumerMessage:
        self._held = True
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._settled:
            return
        if exc_type is None:
            await self.ack()
        elif isinstance(exc, Exception):
            await self.nack()
        # Cancellation and other BaseExceptions leave the message unsettled, so it is
        # redelivered rather than reported as a handler failure.

    def _take_retry_delay(self) -> float | None:
        """The retry delay of the failure being settled (read once: a local retry of
        the same message starts without one)."""
        delay, self._retry_delay = self._retry_delay, None
        return delay

    def __repr__(self) -> str:
        state = "settled" if self._settled else "pending"
        return (
            f"ConsumerMessage(topic={self.topic!r}, queue={self.broker_name}:{self.queue_id}, "
            f"offset={self.queue_offset}, tags={self.tags!r}, body={len(self.body)}B, {state})"
        )


#: ConsumerMessage's fields that a decoder may leave unset (read as these defaults until
#: set): a pulled message seldom changes them (a timeout, a wrapper's failure, a retry
#: delay, a trace), and four slots a message stored and freed were ~150 of its ~22,000
#: instructions (benchmarks/ceiling.py; benchmarks/README.md, "Round 15")
UNSET_DEFAULTS: dict[str, Any] = {
    "_timed_out": False, "_failure": None, "_retry_delay": None, "_trace": None,
}  # fmt: skip

init_stores_slots(ConsumerMessage, UNSET_DEFAULTS)


@dataclass(slots=True, eq=False, repr=False)
class PopMessage(ConsumerMessage):
    """A message consumed by pop (through a 5.x Proxy, or from a broker over remoting).

    Handlers get it as a ``ConsumerMessage`` and settle it the same way; the pop state
    is the receipt handle that acks it (replaced by each renewal of its invisible
    time: over gRPC the Proxy's handle, over remoting the broker's check point,
    ``POP_CK``) and its delivery attempt.
    """

    receipt_handle: str = ""
    delivery_attempt: int = 1
    message_group: str | None = None
    _message_id: str = ""
    #: set while a renewal of the invisible time is in flight: whatever else uses the
    #: receipt handle (ack, nack, dead-letter) waits for it, since the renewal replaces it
    _renewal: anyio.Event | None = None
    #: ack requests made for this message (the ack batcher's retries)
    _ack_tries: int = 0
    #: its ack, ``aiorocket.consumer.pop.acks``: 0 none (or done), ACK_QUEUED (queued, or
    #: waiting for a retry: kept renewed though settled), ACK_SENDING (in a request: no
    #: renewal may start, it would replace the handle the request names)
    _ack_state: int = 0
    #: copies of it the server delivered again while it was in hand, settled by its
    #: outcome (``aiorocket.consumer.pop.in_hand``); None: none
    _copies: list[PopMessage] | None = None
    #: set while its retry's nack is in flight (settled, still in hand): a copy delivered
    #: meanwhile waits its retry with it instead of being handled at once
    _nacking: bool = False

    @property
    def message_id(self) -> str:
        """The message's id: the Proxy's, or (remoting) its ``UNIQ_KEY``, read from its
        properties only when asked (decoding them costs a fifth of a pop's CPU)."""
        return self._message_id or self.msg_id

    @message_id.setter
    def message_id(self, value: str) -> None:
        self._message_id = value

    async def renewed(self) -> None:
        """Wait until no renewal of this message is in flight (its handle is current)."""
        while self._renewal is not None:
            await self._renewal.wait()

    def __repr__(self) -> str:
        state = "settled" if self._settled else "pending"
        return (
            f"PopMessage(topic={self.topic!r}, id={self.message_id!r}, tags={self.tags!r}, "
            f"attempt={self.delivery_attempt}, body={len(self.body)}B, {state})"
        )


init_stores_slots(PopMessage, UNSET_DEFAULTS)
