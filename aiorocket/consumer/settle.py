"""Settling a message over remoting: success lets its offset be committed; failure sends
it back first. Every retry and dead-letter decision of the remoting consumer is made here
(the gRPC one's are in ``aiorocket.consumer.pop.settler``).

A failed message goes back to the broker (CONSUMER_SEND_MSG_BACK: the group's retry
topic, or the dead-letter queue after ``max_reconsume_times``) before its offset may be
committed past; a send-back that fails is retried locally, so the message is never
committed without being handled or handed back. Broadcasting has no retry topic: a
failed message is retried locally a bounded number of times, then given up (counted).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import anyio

from aiorocket.consumer.config import MessageModel
from aiorocket.consumer.in_hand import CallCopies
from aiorocket.consumer.process_queue import ProcessQueue
from aiorocket.errors import (
    BrokerResponseError,
    ConnectionClosedError,
    RocketMQError,
)
from aiorocket.namespace import wrap
from aiorocket.results import DELAY_LEVELS, delay_level_for

if TYPE_CHECKING:
    from aiorocket.client.broker import BrokerClient
    from aiorocket.consumer.brokers import BrokerFinder
    from aiorocket.consumer.state import ConsumerState
    from aiorocket.received import ConsumerMessage

__all__ = ["RemotingSettler", "local_retry_after"]


def local_retry_after(local_retry_delay: float, delay_level: int) -> float:
    """Seconds before a message whose send-back failed is delivered here again: Java's
    ``local_retry_delay`` (5 s), or the send-back's delay level's time if longer, so a
    message asked back after 30 s (``Reconsume(delay=30)``, level 4) is not retried
    after 5 s because its send-back failed ("never earlier than asked",
    docs/consumer.md). Level 0 (the broker's choice) and below: ``local_retry_delay``.
    """
    if 1 <= delay_level <= len(DELAY_LEVELS):
        return max(local_retry_delay, float(DELAY_LEVELS[delay_level - 1]))
    return local_retry_delay


class RemotingSettler:
    """Settles messages of a remoting consumer (every ``ConsumerMessage._settler``).

    Parameters
    ----------
    state:
        The consumer's shared state (group, configuration, counters).
    broker:
        The broker request client (send-back).
    finder:
        Finds the master of a message's broker group.
    retry_later:
        ``retry_later(msg, after)`` delivers ``msg`` again ``after`` seconds from now:
        for a send-back that failed (``local_retry_delay``, or the delay the send-back
        was asked for if longer: :func:`local_retry_after`), and for broadcasting's
        local retries (``local_retry_delay``).
    """

    def __init__(
        self,
        state: ConsumerState,
        broker: BrokerClient,
        finder: BrokerFinder,
        retry_later: Callable[[ConsumerMessage, float], None],
    ) -> None:
        self._state = state
        self._broker = broker
        self._finder = finder
        self._retry_later = retry_later
        #: retry-topic copies of messages in a handler call, settled by their outcome
        #: (``aiorocket.consumer.in_hand``; the worker pool attaches them)
        self.in_hand = CallCopies()

    async def settle(self, msg: ConsumerMessage, delay_level: int | None) -> None:
        """Finish a message: success commits past it; failure sends it back first."""
        if delay_level is None:
            self.finish(msg)
            return
        delay = msg._take_retry_delay()
        if delay is not None and delay_level >= 0:
            # Seconds asked for: the shortest delay level of at least as long (the
            # send-back has levels only), so it never comes back early.
            delay_level = delay_level_for(delay)
        if msg._settled:
            return
        # copies wait for a message's outcome: this one's, maybe (decided at the end)
        waiting = self.in_hand.failing(msg, delay_level) if self.in_hand else None
        try:
            await self._settle_failed(msg, delay_level)
        finally:
            if waiting is not None:
                self.in_hand.resolved(waiting)

    async def _settle_failed(self, msg: ConsumerMessage, delay_level: int) -> None:
        msg._settled = True
        pq = msg._pq
        if pq is None:
            return
        assert isinstance(pq, ProcessQueue)
        state = self._state
        cfg = state.config
        if cfg.message_model is MessageModel.BROADCASTING:
            # No shared retry topic in broadcasting: retry here, a bounded number of times.
            if msg.reconsume_times < cfg.broadcast_max_retries:
                msg.reconsume_times += 1
                msg._settled = False
                self._retry_later(msg, cfg.local_retry_delay)
                return
            state.dropped_messages += 1
            state.log.warning(
                "broadcast_message_dropped",
                topic=msg.topic,
                queue=pq.mq.queue_id,
                offset=msg.queue_offset,
                attempts=msg.reconsume_times + 1,
            )
        elif pq.dropped:
            # The queue is no longer ours (revoked, or its broker left the route): its
            # offset was not committed past this message, so the queue's owner (this
            # client again, maybe) pulls it again. A copy sent back now would be a second
            # delivery, handled while that one is (the Java client drops such results).
            state.log.info("failed_message_of_dropped_queue", topic=msg.topic,
                           queue=pq.mq.queue_id, offset=msg.queue_offset)  # fmt: skip
            return
        else:
            try:
                sent = await self.send_back(pq, msg, delay_level)
            except BaseException:
                msg._settled = False  # interrupted: still unsettled, never committed
                raise
            if not sent:
                msg._settled = False
                self._retry_later(msg, local_retry_after(cfg.local_retry_delay, delay_level))
                return
        pq.on_done(msg, msg._generation)

    async def hand_back(self, cut: list[ConsumerMessage], timeout: float) -> int:
        """At close: the messages whose handler ``shutdown_timeout`` cut; returns how
        many were sent back (within ``timeout`` s).

        A cut message holds its queue's commit point, so a message after it that
        finished would be consumed again by the queue's next owner. Such a cut message
        is sent back for a retry (the retry topic, counted as an attempt), as a consume
        timeout does, and the close commits past it: only the cut messages come again.
        One with no finished message after it stays uncommitted: the next owner pulls it
        at once, with no attempt counted, and duplicates nothing. So does one at its last
        attempt (a send-back would dead-letter it), and every cut message of orderly or
        broadcasting consumption (order; offsets of its own).
        """
        cfg = self._state.config
        if cfg.orderly or cfg.message_model is not MessageModel.CLUSTERING:
            return 0
        level = cfg.retry_delay_level
        chosen = [
            m
            for m in cut
            if m.current()
            and isinstance(m._pq, ProcessQueue)
            and m._pq.tracker.finished_after(m.queue_offset)
            and not self.dead_letters(m, level)
        ]
        sent = 0
        with anyio.move_on_after(timeout):
            for msg in chosen:
                await self.settle(msg, level)
                sent += msg.settled  # a failed send-back leaves it unsettled, uncommitted
        self._state.log.info("cut_messages_handed_back", cut=len(cut), sent_back=sent)
        return sent

    def finish(self, msg: ConsumerMessage) -> bool:
        """Settle a message as consumed; False if it was settled already or is stale.

        Synchronous, so the per-message success path of workers and ``async for``
        awaits nothing.
        """
        if msg._settled:
            return False
        msg._settled = True
        pq = msg._pq
        return pq is not None and pq.on_done(msg, msg._generation)

    def dead_letters(self, msg: ConsumerMessage, delay_level: int) -> bool:
        """The broker's rule for a send-back: reconsume times at the limit, or a level
        of -1 (orderly consumption retries in place instead; broadcasting has no DLQ)."""
        cfg = self._state.config
        if cfg.message_model is MessageModel.BROADCASTING:
            return False  # broadcast_message_dropped says what happens instead
        return msg.reconsume_times >= cfg.reconsume_limit() or (
            delay_level < 0 and not cfg.orderly
        )

    def retry_in_place(self, msg: ConsumerMessage) -> float | None:
        """Orderly: count the failed attempt; pause ``suspend_current_queue_time``, or
        None past ``max_reconsume_times`` (then the dead-letter queue)."""
        msg.reconsume_times += 1
        cfg = self._state.config
        if msg.reconsume_times > cfg.reconsume_limit():
            return None
        return cfg.suspend_current_queue_time

    async def dead_letter(self, msg: ConsumerMessage, *, raise_unreachable: bool = False) -> bool:
        pq = msg._pq
        assert isinstance(pq, ProcessQueue)
        return await self.send_to_dead_letter(pq, msg, raise_unreachable=raise_unreachable)

    async def send_back(
        self,
        pq: ProcessQueue,
        msg: ConsumerMessage,
        delay_level: int,
        *,
        raise_unreachable: bool = False,
    ) -> bool:
        """CONSUMER_SEND_MSG_BACK; False when it failed (logged). ``raise_unreachable``:
        a failure that is not the broker's answer (no master, a timeout, a lost
        connection) raises instead, for callers that must not treat it as a refusal."""
        addr = await self._finder.master(pq.mq)
        if addr is None:
            if raise_unreachable:
                raise ConnectionClosedError(f"no master broker of {pq.mq.broker_name} to send to")
            return False
        state = self._state
        try:
            await self._broker.send_back(
                addr,
                msg,
                state.group,
                delay_level=delay_level,
                max_reconsume_times=state.config.reconsume_limit(),
                origin_topic=wrap(state.config.namespace, msg.topic),
            )
            return True
        except RocketMQError as exc:
            state.log.warning(
                "send_back_failed", topic=msg.topic, offset=msg.queue_offset, error=str(exc)
            )
            if raise_unreachable and not isinstance(exc, BrokerResponseError):
                raise
            return False

    async def send_to_dead_letter(
        self, pq: ProcessQueue, msg: ConsumerMessage, *, raise_unreachable: bool = False
    ) -> bool:
        """Send ``msg`` to the group's DLQ; False when it failed (see ``send_back``)."""
        return await self.send_back(pq, msg, -1, raise_unreachable=raise_unreachable)
