"""Settling a popped message (through a Proxy, or from the brokers over remoting); every
retry and dead-letter decision of pop consumption is made here (the remoting pull
consumer's are in ``aiorocket.consumer.settle``).

* success: the ack is queued (``AckBatcher``), no await;
* failure: the invisible time is changed to the retry's backoff (gRPC: the server's
  retry policy; remoting: the broker's delay levels, 10 s, 30 s, 1 min, ...), so the
  message comes back then, from the group's pop retry topic; at the last attempt (or
  ``Reconsume(-1)``) it is moved to the group's dead-letter queue (gRPC:
  ForwardMessageToDeadLetterQueue; remoting: sent back with delay level -1, then its
  ack queued like a success's, ``PopSource.dead_letter_settles``);
* FIFO (orderly delivery): a failed message is retried in place after a pause (gRPC:
  the backoff; remoting: ``suspend_current_queue_time``),
  kept invisible meanwhile by the renewer, and dead-lettered at max attempts;
* released (never handed out, or its handler cancelled by the close): made visible
  again at once (invisible duration 0), so another member takes it without waiting;
* a copy delivered again while its message was in hand (``in_hand``) follows that
  message's outcome: acked with its success or dead-lettering, retried with its failure.

A request that fails with a retriable error is tried again (``TRIES`` times, backing
off): the Proxy renews an auto-renewed message until it is acked or its invisible time
changed, so a nack given up would hold the message back for hours (up to the Proxy's
``renewMaxTimeMillis``). A nack or dead-lettering that still fails (or is cancelled
mid-request) keeps its message accounted for: it stays in the cache and its queue (a
FIFO group stays blocked behind it), and goes to the backlog, tried again by ``run``
while the consumer runs, backing off as a failed ack does (``acks.ack_backoff``); the
close releases what is still in the backlog (``close``: visible again at once). A
request the server refuses for good is logged, and the message comes back after its
invisible time. Each step waits for a renewal of the same message in flight.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import anyio

from aiorocket._release import TRIES, release_all
from aiorocket._release import retried as _retried
from aiorocket.consumer.pop.acks import ack_backoff, until_due
from aiorocket.errors import RocketMQError
from aiorocket.received import ConsumerMessage, PopMessage

if TYPE_CHECKING:
    from aiorocket._log import Logger
    from aiorocket.consumer.pop.acks import AckBatcher
    from aiorocket.consumer.pop.source import PopSource

__all__ = ["DEFAULT_MAX_ATTEMPTS", "TRIES", "PopSettler", "max_attempts"]

#: requests a nack, release or dead-lettering may take on retriable errors
#: the server's max delivery attempts when its settings name none
DEFAULT_MAX_ATTEMPTS = 17


def max_attempts(server_max: int, max_reconsume_times: int) -> int:
    """Deliveries before the dead-letter queue: the server policy's (0: unknown), capped
    by the consumer's ``max_reconsume_times + 1`` (-1: the server's alone)."""
    attempts = server_max or DEFAULT_MAX_ATTEMPTS
    if max_reconsume_times != -1:
        attempts = min(attempts, max_reconsume_times + 1)
    return attempts


class PopSettler:
    """Settles popped messages (``ConsumerMessage._settler``).

    Parameters
    ----------
    source:
        The pop session: changes invisible times, moves messages to the DLQ.
    acks:
        Where successes queue their acks.
    max_attempts:
        Deliveries before the dead-letter queue (the server policy's, capped by
        ``max_reconsume_times + 1``).
    backoff:
        ``backoff(attempt)``: seconds before the retry of a failed delivery attempt.
    retry_pause:
        ``retry_pause(attempt)``: orderly, the pause before an in-place retry.
    log:
        The consumer's logger.
    """

    def __init__(
        self,
        source: PopSource,
        acks: AckBatcher,
        *,
        max_attempts: int,
        backoff: Callable[[int], float],
        retry_pause: Callable[[int], float],
        log: Logger,
    ) -> None:
        self._source = source
        self._acks = acks
        self.max_attempts = max_attempts
        self._backoff = backoff
        self._retry_pause = retry_pause
        self._log = log
        #: nacks that failed, by message id, waiting for their retry (``run``)
        self._backlog: dict[int, _Nack] = {}
        self._wake = anyio.Event()

    def finish(self, msg: ConsumerMessage) -> bool:
        if msg._settled:
            return False
        msg._settled = True
        assert isinstance(msg, PopMessage)
        self._acks.add(msg)
        if msg._copies:
            self._ack_copies(msg)
        pq = msg._pq
        return pq is not None and pq.on_done(msg, 0)

    async def settle(self, msg: ConsumerMessage, delay_level: int | None) -> None:
        if delay_level is None:
            self.finish(msg)
            return
        delay = msg._take_retry_delay()
        if msg._settled or not isinstance(msg, PopMessage):
            return
        await self._fail(msg, delay_level, delay)

    async def _fail(self, msg: PopMessage, delay_level: int, delay: float | None) -> None:
        msg._settled = msg._nacking = True
        try:
            await self._settle_failed(msg, delay_level, delay)
        finally:
            # delivered again while in hand (its nack included): each its own retry
            msg._nacking = False
            copies, msg._copies = msg._copies, None
            for copy in copies or ():
                if not copy._settled:
                    await self._fail(copy, delay_level, delay)

    async def _settle_failed(self, msg: PopMessage, delay_level: int, delay: float | None) -> None:
        dead = delay_level == -1 or msg.delivery_attempt >= self.max_attempts
        if delay is None:
            delay = self._backoff(msg.delivery_attempt)
        # the asked-for seconds are the invisible time itself: back exactly then
        nack = _Nack(msg, None if dead else delay)
        try:
            await self._nack(nack, TRIES)
        except RocketMQError as err:
            if err.retriable:
                self._later(nack, err)
                return  # still held: in the backlog
            self._log.warning("nack_failed", topic=msg.topic, msg_id=msg.message_id,
                              error=str(err))  # fmt: skip
        except BaseException:
            # Cancelled mid-request: not known to be sent, so kept for a retry or the
            # close's release (a renewing Proxy would hold it otherwise).
            self._later(nack, None)
            raise
        _done(msg)

    def _ack_copies(self, msg: PopMessage) -> None:
        """``msg`` succeeded or is dead-lettered: its copies delivered again while it
        was in hand are acked too (``in_hand``: its own handle is stale by then)."""
        copies, msg._copies = msg._copies, None
        for copy in copies or ():
            self.finish(copy)

    @property
    def backlog(self) -> int:
        """Nacks that failed and wait for their retry (their messages still held)."""
        return len(self._backlog)

    def _later(self, nack: _Nack, err: RocketMQError | None) -> None:
        """Keep ``nack`` (its message still held) for a retry after the acks' backoff."""
        nack.tries += 1
        wait = ack_backoff(nack.tries)
        nack.due = time.monotonic() + wait
        self._backlog[id(nack.msg)] = nack
        self._wake.set()
        self._log.warning("nack_retried", topic=nack.msg.topic, msg_id=nack.msg.message_id,
                          tries=nack.tries, retry_in=wait,
                          error=None if err is None else str(err))  # fmt: skip

    async def run(self) -> None:
        """Send the nacks of the backlog again when due, until cancelled (owned by the
        consumer's task group)."""
        while True:
            with anyio.move_on_after(until_due(n.due for n in self._backlog.values())):
                await self._wake.wait()
            self._wake = anyio.Event()
            now = time.monotonic()
            for nack in [n for n in self._backlog.values() if n.due <= now]:
                await self._retry(nack)

    async def _retry(self, nack: _Nack) -> None:
        msg = nack.msg
        try:
            await self._nack(nack, 1)
        except RocketMQError as err:
            if self._backlog.get(id(msg)) is not nack:
                return  # released by the close meanwhile
            if err.retriable:
                self._later(nack, err)
                return
            self._log.warning("nack_failed", topic=msg.topic, msg_id=msg.message_id,
                              error=str(err))  # fmt: skip
        if self._backlog.get(id(msg)) is nack:
            del self._backlog[id(msg)]
            _done(msg)

    async def close(self, timeout: float) -> int:
        """Release the messages of the backlog (visible again at once, at most
        ``timeout`` s); returns how many could not be."""
        nacks = list(self._backlog.values())
        self._backlog.clear()
        if not nacks:
            return 0
        msgs = [n.msg for n in nacks]
        try:
            return await self.make_visible(msgs, timeout)
        finally:
            for m in msgs:
                _done(m)

    def dead_letters(self, msg: ConsumerMessage, delay_level: int) -> bool:
        assert isinstance(msg, PopMessage)
        return delay_level == -1 or msg.delivery_attempt >= self.max_attempts

    def retry_in_place(self, msg: ConsumerMessage) -> float | None:
        assert isinstance(msg, PopMessage)
        attempt = msg.delivery_attempt
        if attempt >= self.max_attempts:
            return None
        msg.delivery_attempt = attempt + 1
        msg.reconsume_times += 1
        return self._retry_pause(attempt)

    async def dead_letter(self, msg: ConsumerMessage, *, raise_unreachable: bool = False) -> bool:
        assert isinstance(msg, PopMessage)
        try:
            await self._forward(msg)
        except RocketMQError as err:
            self._log.warning("dead_letter_failed", topic=msg.topic, msg_id=msg.message_id,
                              error=str(err))  # fmt: skip
            if raise_unreachable:
                raise
            return False
        if msg._copies:
            self._ack_copies(msg)
        return True

    async def release(self, messages: list[PopMessage], timeout: float) -> int:
        """Make unsettled ``messages`` visible again at once (at most ``timeout`` s);
        returns how many could not be released (they come back after their invisible
        time). Released messages are settled on our side."""
        left = [m for m in messages if not m._settled]
        for m in left:
            m._settled = True
        try:
            return await self.make_visible(left, timeout)
        finally:
            for m in left:
                _done(m)

    async def make_visible(self, messages: list[PopMessage], timeout: float) -> int:
        """Make ``messages`` (settled on our side: released, or acks that failed) visible
        again at once, at most ``timeout`` s; returns how many could not be."""
        left = await release_all(messages, lambda m: self._change(m, 0.0), timeout)
        return len(left)

    async def _change(self, msg: PopMessage, seconds: float, tries: int = TRIES) -> None:
        await msg.renewed()
        await _retried(lambda: self._source.change_invisible(msg, seconds), tries)

    async def _forward(self, msg: PopMessage, tries: int = TRIES) -> None:
        await msg.renewed()
        await _retried(lambda: self._source.dead_letter(
            msg, attempt=msg.delivery_attempt, max_attempts=self.max_attempts
        ), tries)  # fmt: skip
        if not self._source.dead_letter_settles:
            self._acks.add(msg)  # in the DLQ: acked like a success, with the ack's retries
        self._log.info("forwarded_to_dlq", topic=msg.topic, msg_id=msg.message_id,
                       attempts=msg.delivery_attempt)  # fmt: skip

    async def _nack(self, nack: _Nack, tries: int) -> None:
        """The nack's request(s): the dead-letter queue, or the retry's invisible time."""
        if nack.seconds is None:
            await self._forward(nack.msg, tries)
        else:
            await self._change(nack.msg, nack.seconds, tries)


@dataclass(slots=True, eq=False)
class _Nack:
    """A nack to send: ``seconds`` of invisible time, or (None) the dead-letter queue."""

    msg: PopMessage
    seconds: float | None
    #: requests of it that failed so far, and when it is tried again (the backlog)
    tries: int = 0
    due: float = 0.0


def _done(msg: PopMessage) -> None:
    """Settled on our side: out of its queue (and the cache, the renewer)."""
    if msg._pq is not None:
        msg._pq.on_done(msg, 0)
