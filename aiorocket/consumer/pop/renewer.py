"""The invisible time of received messages, renewed by the client: always over
remoting (a broker has no auto-renew), and over gRPC for a Proxy that does not renew
auto-renewed receives itself (``aiorocket.consumer.pop.grpc_source``; the Apache
Proxy does, by default).

A popped message is invisible to the rest of the group for ``invisible_duration``; if
it is still unsettled then, the server delivers it again, to us or another member, while
we may still be handling it (a duplicate beyond the in-flight window, the complaint most
often made of pop consumers). So every message received and not yet settled is renewed
(ChangeInvisibleDuration) shortly before its invisible time ends: while it waits in the
cache, while its handler runs (up to ``consume_timeout``: the watchdog then cancels the
handler and the message is settled as failed) and while a FIFO retry waits in place.

Rules:

* the invisible time is the consumer's ``invisible_duration``;
* messages are held in receive batches keyed by when their invisible time ends, in a
  heap: a sweep looks only at the batches due;
* a settled message is let go of at once (``forget``, from its queue's ``on_done``: two
  dict operations), so what the renewer holds is what the cache budget counts, not
  every message received within ``invisible_duration`` (up to 12 h) with its body;
  batches left empty are dropped from the heap once they are half of it;
* but a message whose ack is not answered yet stays, and is renewed while its ack waits
  (queued, or for a retry: ``PopMessage._ack_state`` ACK_QUEUED), never while a request
  names it (ACK_SENDING: held, due again at once); the ack batcher lets go of it when
  its ack is done with (``aiorocket.consumer.pop.acks``). Else an ack retried past the
  invisible time (a busy broker) would let the acked message come back;
* a renewal replaces the receipt handle: anything else that uses the handle (ack, nack,
  dead-letter) waits for a renewal in flight (``PopMessage.renewed``), and the ack
  request that follows a renewal carries its new handle;
* a message delivered again while in hand (``aiorocket.consumer.pop.in_hand``) is held
  but no longer renewed: its handle is stale, its copies' are renewed;
* a renewal the server refuses for good (the handle is no longer valid: the message was
  redelivered meanwhile) *loses* the message: it is settled locally without an ack and
  counted (``lost``), since it is now someone else's; a transient failure is retried at
  the next sweep.
"""

from __future__ import annotations

import heapq
import itertools
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import anyio

from aiorocket.consumer.pop.acks import ACK_QUEUED
from aiorocket.errors import RocketMQError

if TYPE_CHECKING:
    from aiorocket._log import Logger
    from aiorocket.received import PopMessage

__all__ = ["Renewer", "renew_margin"]

#: renewals in flight at once
_CONCURRENCY = 16


def renew_margin(invisible: float, request_timeout: float) -> float:
    """Seconds before its invisible time ends that a message is renewed: room for two
    request timeouts, but never more than half of the invisible time."""
    return min(max(invisible / 3, 2 * request_timeout), invisible / 2)


class Renewer:
    """Keeps received, unsettled messages invisible to the rest of the group.

    Parameters
    ----------
    change:
        ``change(msg, seconds)``: ChangeInvisibleDuration, replacing the handle.
    invisible:
        The invisible duration of receives and renewals, in seconds.
    request_timeout:
        The deadline of one renewal (sets the margin, ``renew_margin``).
    on_lost:
        Called with a message whose renewal was refused for good.
    is_lost:
        Whether a renewal's error is such a refusal (``PopSource.lost``).
    log:
        The consumer's logger.
    """

    def __init__(
        self,
        change: Callable[[PopMessage, float], Awaitable[None]],
        *,
        invisible: float,
        request_timeout: float,
        on_lost: Callable[[PopMessage], None],
        is_lost: Callable[[RocketMQError], bool],
        log: Logger,
    ) -> None:
        self._change = change
        self.invisible = invisible
        self.margin = renew_margin(invisible, request_timeout)
        self.tick = min(1.0, self.margin / 4)
        self._on_lost = on_lost
        self._is_lost = is_lost
        self._log = log
        #: (when the invisible time ends, seq, the batch's unsettled messages, as the
        #: keys of a dict: in order; a PopMessage hashes by identity, eq=False)
        self._held: list[tuple[float, int, dict[PopMessage, None]]] = []
        #: each held message's batch (a message leaves it when settled)
        self._batch_of: dict[PopMessage, dict[PopMessage, None]] = {}
        #: batches in the heap left empty by settled messages
        self._empty = 0
        #: the messages whose renewal is in flight (out of the heap until it ends)
        self._renewing: dict[PopMessage, None] = {}
        #: renew from the client; False while the Proxy renews (auto_renew): messages are
        #: still held, so that the close knows what is unsettled, but not renewed here
        self.renews = True
        self._seq = itertools.count()
        #: renewals that succeeded / messages lost to a refused renewal, since the start
        self.renewed = 0
        self.lost = 0

    def hold(self, messages: list[PopMessage], received_at: float) -> None:
        """Messages received at ``received_at`` (``time.monotonic()``)."""
        self._push(received_at + self.invisible, messages)

    def _push(self, due: float, messages: list[PopMessage]) -> None:
        batch = dict.fromkeys([m for m in messages if not m._settled or m._ack_state])
        if batch:
            self._batch_of.update(dict.fromkeys(batch, batch))
            heapq.heappush(self._held, (due, next(self._seq), batch))

    def forget(self, msg: PopMessage) -> None:
        """``msg`` is settled: let go of it (and of its body) now, unless its ack is
        not done with (the ack batcher calls again then)."""
        if msg._ack_state:
            return
        batch = self._batch_of.pop(msg, None)
        if batch is None:
            return  # not held, or being renewed (the sweep drops it when settled)
        del batch[msg]
        if not batch:
            self._empty += 1
            if self._empty > 64 and 2 * self._empty > len(self._held):
                # In place: a sweep in flight holds the same list.
                self._held[:] = [entry for entry in self._held if entry[2]]
                heapq.heapify(self._held)
                self._empty = 0

    def held(self, *, owed: bool = False) -> list[PopMessage]:
        """Every held message not settled yet (those of a sweep in flight too);
        ``owed``: and those settled whose ack is owed (in hand, ``in_hand``)."""
        if owed:
            held = [m for _, _, batch in self._held for m in batch if _in_hand(m)]
            return held + [m for m in self._renewing if _in_hand(m)]
        held = [m for _, _, batch in self._held for m in batch if not m._settled]
        return held + [m for m in self._renewing if not m._settled]

    @property
    def holding(self) -> int:
        """Messages held (settled ones are let go of at once)."""
        return len(self._batch_of)

    async def run(self) -> None:
        """Sweep every tick until cancelled (owned by the consumer's task group). A
        sweep does not wait for the one before: a renewal hanging on a broker whose
        connection went silent (until its request timeout) holds back no other."""
        async with anyio.create_task_group() as tg:
            while True:
                await anyio.sleep(self.tick)
                tg.start_soon(self.sweep)

    async def sweep(self) -> None:
        """Renew every unsettled message whose invisible time ends within the margin."""
        started = time.monotonic()
        due: list[PopMessage] = []
        sending: list[PopMessage] = []
        superseded: list[PopMessage] = []
        held = self._held
        batch_of = self._batch_of
        while held and held[0][0] <= started + self.margin:
            batch = heapq.heappop(held)[2]
            if not batch:
                self._empty -= 1
            for m in batch:
                batch_of.pop(m, None)  # out of its batch while renewed
                if m._copies and not m._settled:
                    superseded.append(m)  # its handle is stale: the copies' are renewed
                elif _renewable(m):
                    due.append(m)
                elif m._ack_state:
                    sending.append(m)  # its ack is in a request: held, due again at once
        self._push(started, sending)
        self.hold(superseded, started)  # still held: the close releases it
        if not due:
            return
        if not self.renews:
            self.hold(due, started)  # kept track of only: the Proxy renews them
            return
        limiter = anyio.Semaphore(_CONCURRENCY)
        self._renewing.update(dict.fromkeys(due))  # out of the heap: the close must see them

        async def renew(msg: PopMessage) -> None:
            # Its outcome is booked when its own renewal ends, not at the sweep's end: a
            # transient failure is due again at the next sweep, whatever else hangs.
            booked = False
            try:
                async with limiter:
                    if not _renewable(msg):
                        return  # settled meanwhile (due again at once if its ack is pending)
                    event = msg._renewal = anyio.Event()
                    try:
                        await self._change(msg, self.invisible)
                    except RocketMQError as err:
                        if self._is_lost(err):
                            booked = True  # no longer ours, though its ack may be pending
                            self._lose(msg, err)
                            return
                        self._log.warning("renew_failed", topic=msg.topic,
                                          msg_id=msg.message_id, error=str(err))  # fmt: skip
                    else:
                        booked = True
                        self.renewed += 1
                        self.hold([msg], started)  # invisible from the sweep's start on
                    finally:
                        msg._renewal = None
                        event.set()
            finally:
                del self._renewing[msg]
                if not booked:
                    # a transient failure, or cancelled: due again at once
                    self._push(started, [msg])

        async with anyio.create_task_group() as tg:
            for msg in due:
                tg.start_soon(renew, msg)

    def _lose(self, msg: PopMessage, err: RocketMQError) -> None:
        self.lost += 1
        self._log.warning(
            "invisible_time_lost", topic=msg.topic, msg_id=msg.message_id, error=str(err),
            hint="the server no longer knows this delivery: the message is delivered again",
        )  # fmt: skip
        self._on_lost(msg)


def _in_hand(msg: PopMessage) -> bool:
    """Unsettled, or handled with its ack owed."""
    return not msg._settled or bool(msg._ack_state)


def _renewable(msg: PopMessage) -> bool:
    """Unsettled, or settled with its ack queued or waiting for a retry."""
    return not msg._settled or msg._ack_state == ACK_QUEUED
