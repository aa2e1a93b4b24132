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
  again at once (invisible duration 0), so another member takes it without waiting.

A request that fails with a retriable error is tried again (``TRIES`` times, backing
off): the Proxy renews an auto-renewed message until it is acked or its invisible time
changed, so a lost nack would hold the message back until this client goes away. One
that still fails leaves the message to come back when the Proxy stops renewing it (the
client's session ends) or its invisible time ends: nothing is lost. Each step waits for
a renewal of the same message in flight.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import anyio

from aiorocket.errors import RocketMQError
from aiorocket.received import ConsumerMessage, PopMessage

if TYPE_CHECKING:
    from aiorocket._log import Logger
    from aiorocket.consumer.pop.acks import AckBatcher
    from aiorocket.consumer.pop.source import PopSource

__all__ = ["DEFAULT_MAX_ATTEMPTS", "TRIES", "PopSettler", "max_attempts"]

#: requests a nack, release or dead-lettering may take on retriable errors
TRIES = 3

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

    def finish(self, msg: ConsumerMessage) -> bool:
        if msg._settled:
            return False
        msg._settled = True
        assert isinstance(msg, PopMessage)
        self._acks.add(msg)
        pq = msg._pq
        return pq is not None and pq.on_done(msg, 0)

    async def settle(self, msg: ConsumerMessage, delay_level: int | None) -> None:
        if delay_level is None:
            self.finish(msg)
            return
        if msg._settled or not isinstance(msg, PopMessage):
            return
        msg._settled = True
        try:
            if delay_level == -1 or msg.delivery_attempt >= self.max_attempts:
                await self._forward(msg)
            else:
                await self._change(msg, self._backoff(msg.delivery_attempt))
        except RocketMQError as err:
            self._log.warning("nack_failed", topic=msg.topic, msg_id=msg.message_id,
                              error=str(err))  # fmt: skip
        finally:
            # Settled on our side whatever happened: no longer renewed, so a failed or
            # interrupted request still brings it back after its invisible time.
            if msg._pq is not None:
                msg._pq.on_done(msg, 0)

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
                if m._pq is not None:
                    m._pq.on_done(m, 0)

    async def make_visible(self, messages: list[PopMessage], timeout: float) -> int:
        """Make ``messages`` (settled on our side: released, or acks that failed) visible
        again at once, at most ``timeout`` s; returns how many could not be."""
        released = 0

        async def one(msg: PopMessage) -> None:
            nonlocal released
            async with limiter:
                try:
                    await self._change(msg, 0.0)
                    released += 1
                except RocketMQError:
                    pass

        limiter = anyio.Semaphore(16)
        with anyio.move_on_after(timeout, shield=True):
            async with anyio.create_task_group() as tg:
                for m in messages:
                    tg.start_soon(one, m)
        return len(messages) - released

    async def _change(self, msg: PopMessage, seconds: float) -> None:
        await msg.renewed()
        await _retried(lambda: self._source.change_invisible(msg, seconds))

    async def _forward(self, msg: PopMessage) -> None:
        await msg.renewed()
        await _retried(lambda: self._source.dead_letter(
            msg, attempt=msg.delivery_attempt, max_attempts=self.max_attempts
        ))  # fmt: skip
        if not self._source.dead_letter_settles:
            self._acks.add(msg)  # in the DLQ: acked like a success, with the ack's retries
        self._log.info("forwarded_to_dlq", topic=msg.topic, msg_id=msg.message_id,
                       attempts=msg.delivery_attempt)  # fmt: skip


async def _retried(call: Callable[[], Awaitable[None]]) -> None:
    """``call()``, again after a retriable error (``TRIES`` in all, backing off)."""
    for attempt in range(1, TRIES + 1):
        try:
            return await call()
        except RocketMQError as err:
            if not err.retriable or attempt == TRIES:
                raise
            await anyio.sleep(0.2 * 2**attempt)
