"""Receivers: long-poll the server (a Proxy, or the brokers) while the cache has room,
and hand the messages on.

Each of a few receive loops asks for a batch only while the consumer's cache budget has
room, so slow handlers stop the consumer from popping more (messages that would sit
invisible to the rest of the group) instead of growing memory. A received batch is
held by the renewer at once, split by ``PopQueue``
and delivered to the strategy, but for copies of messages still in hand
(``aiorocket.consumer.pop.in_hand``): attached to the message in hand, or, when it was
handled and its ack is owed, acked at once.

While the consumer is behind (a receive came back full: messages were waiting beyond
its batch), ``PopSource.behind_receivers`` more loops receive beside them, and park
again once a receive comes back with less than half a batch. Each receive brings at
most a batch (32 through a Proxy), so the loops out bound the rate: two loops drained
a backlog through the Proxy at 9,661/s on a quiet machine, 1.9x the 5,000/s of issue
43's tail goal, and the backlog of any stall drained at the spare 0.9x while every
message behind it waited (benchmarks/README.md, issue 43). The extra loops receive
only while there is a backlog, where each brings a full batch; an idle consumer keeps
only its few parked.

A failed receive backs off (``receive_backoff``, shared by the loops) until the next
attempt, or until the source's connection is new (``PopSource.new_connection``): then
it goes out at once and the backoff starts again.

Who renews the invisible time: the server where it can (``PopSource.server_renews``:
the Proxy's auto-renew), else the client's renewer (``aiorocket.consumer.pop.renewer``),
which holds every received message until it is settled.

A receive cancelled in flight (the close) may have popped messages that never arrive:
they come back after their invisible time, which is why the close cancels receives
first and keeps everything else.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Collection
from typing import TYPE_CHECKING

import anyio

from aiorocket._signal import Signal
from aiorocket.consumer.pauses import Pauses
from aiorocket.consumer.pop.in_hand import DISPATCH, HANDLED
from aiorocket.errors import RocketMQError
from aiorocket.received import ConsumerMessage, PopMessage

if TYPE_CHECKING:
    from aiorocket._log import Logger
    from aiorocket.consumer.delivery import Delivery
    from aiorocket.consumer.pop.in_hand import InHand
    from aiorocket.consumer.pop.queue import PopQueue, PopQueues
    from aiorocket.consumer.pop.renewer import Renewer
    from aiorocket.consumer.pop.source import PopSource
    from aiorocket.consumer.process_queue import CacheBudget
    from aiorocket.consumer.rate import RateLimit, TopicRates
    from aiorocket.received import Settler

__all__ = ["Receiver", "receive_backoff"]


def receive_backoff(failures: int) -> float:
    """Seconds a receive loop waits after ``failures`` receives failed in a row."""
    return min(10.0, 0.2 * 2.0 ** min(failures, 6))


class Receiver:
    """Feeds the delivery strategy from a pop source.

    Parameters
    ----------
    source:
        The session that receives.
    queues:
        Finds each message's queue.
    budget:
        The cache budget the receives wait on.
    renewer:
        Holds every received message until it is settled.
    in_hand:
        Keeps a copy of a message in hand from being dispatched (``in_hand``).
    settler:
        Every received message's settler.
    delivery:
        The strategy messages are handed to.
    log:
        The consumer's logger.
    batch_size:
        Messages asked for per receive (1-32).
    invisible:
        The receives' invisible duration, in seconds.
    pauses:
        What the application paused (``Consumer.pause``).
    topics:
        The subscribed topics (a live view).
    release:
        Makes messages visible again at once (received for a topic paused meanwhile).
    rate:
        The consume rate limit (``max_rate``), None without one.
    topic_rates:
        The per-topic limits (``topic_max_rate``), None without any.
    """

    def __init__(
        self,
        source: PopSource,
        queues: PopQueues,
        budget: CacheBudget,
        renewer: Renewer,
        in_hand: InHand,
        settler: Settler,
        delivery: Delivery,
        log: Logger,
        *,
        batch_size: int,
        invisible: float,
        pauses: Pauses | None = None,
        topics: Collection[str] = (),
        release: Callable[[list[PopMessage]], Awaitable[object]] | None = None,
        rate: RateLimit | None = None,
        topic_rates: TopicRates | None = None,
    ) -> None:
        self._source = source
        self._queues = queues
        self._budget = budget
        self._renewer = renewer
        self._in_hand = in_hand
        self._settler = settler
        self._delivery = delivery
        self._log = log
        self._batch_size = batch_size
        self._invisible = invisible
        #: what the application paused, and the subscribed topics it is asked about
        #: (the source skips paused topics; with all paused, the loops wait here)
        self._pauses = Pauses() if pauses is None else pauses
        self._topics = topics
        self._release = release or _unreleased
        self._rate = rate
        self._topic_rates = topic_rates
        #: receives that failed in a row (any loop), for the backoff
        self.failures = 0
        #: the last receive came back full (the extra loops receive), and its change
        self.behind = False
        self._behind_set = Signal()

    async def run(self, only: str | None = None, *, extra: bool = False) -> None:
        """One receive loop, until cancelled; ``only``: a topic of ``topic_max_rate``,
        the only one this loop asks (the others leave it alone); ``extra``: one that
        receives only while the consumer is ``behind`` (parked, holding nothing, else)."""
        pauses, topics = self._pauses, self._topics
        bucket = None
        if only is not None and self._topic_rates is not None:
            topics = (only,)
            bucket = self._topic_rates.of(only)
            self._topic_rates.enter_loop(only)  # the sources' topic filter reads it
        while True:
            if extra and not self.behind:
                await self._behind_set.wait()
                continue
            if pauses.any and pauses.idle(topics):
                await pauses.wait_changed()  # all paused (Consumer.pause): until a change
                continue
            await self._budget.wait_room()
            if self._rate is not None:
                await self._rate.ready()  # max_rate
            if bucket is not None:
                await bucket.ready()  # topic_max_rate
            connection = self._source.connection
            arrivals = _Arrivals(self)
            try:
                received = await self._source.receive(self._batch_size, self._invisible, arrivals)
            except BaseException as exc:
                if arrivals.later:  # failed or cancelled mid-stream: nobody will get them
                    await self._release(arrivals.later)
                if not isinstance(exc, RocketMQError):
                    raise
                await self._failed(exc, connection)
                continue
            self.failures = 0
            self._filled(len(received))
            if received and self._rate is not None:
                self._rate.take(len(received))
            if received and self._topic_rates is not None:
                self._topic_rates.take(received)
            rest = arrivals.rest(received)
            if rest and pauses.any:
                # Paused while the receive was in flight: its messages of paused topics
                # are made visible again at once, not handed on (one whose release
                # fails comes back after its invisible time).
                held = [m for m in rest if pauses.topic_paused(m.topic)]
                if held:
                    rest = [m for m in rest if not pauses.topic_paused(m.topic)]
                    if rest:
                        self.hand_on(rest, time.monotonic())
                    await self._release(held)
                    continue
            if rest:
                self.hand_on(rest, time.monotonic())

    def _filled(self, n: int) -> None:
        """A receive brought ``n`` messages: full means more were waiting (behind);
        less than half a batch, caught up (between the two, as it was: the extra loops
        do not start and stop at every other receive near the edge)."""
        if n >= self._batch_size:
            behind = True
        elif 2 * n < self._batch_size:
            behind = False
        else:
            return
        if behind != self.behind:
            self.behind = behind
            if behind:  # wakes the parked extra loops
                self._behind_set.notify()

    async def _failed(self, err: RocketMQError, connection: int) -> None:
        """Back off after a receive that failed on the source's ``connection``; a new
        connection (a Proxy back after a restart) ends the backoff and starts it again
        from the first delay: failures on the old one say nothing of the new one."""
        self.failures += 1
        self._log.warning("receive_failed", error=str(err), failures=self.failures)
        with anyio.move_on_after(receive_backoff(self.failures)):
            await self._source.new_connection(connection)
            self.failures = 0
            self._log.info("receive_backoff_reset", reason="new connection")

    def hand_on(self, messages: list[PopMessage], received_at: float) -> None:
        """Hold, count and deliver one receive's messages (synchronous: nothing is lost
        to a cancellation between the receive's answer and the hand-over)."""
        # Held whoever renews: the close releases what is still unsettled.
        self._renewer.renews = not self._source.server_renews
        self._renewer.hold(messages, received_at)
        settler = self._settler
        admit = self._in_hand.admit
        split: dict[int, tuple[PopQueue, bool, list[PopMessage], list[PopMessage]]] = {}
        handled: list[PopMessage] = []
        try:
            for msg in messages:
                msg._settler = settler
                verdict = admit(msg)
                if verdict == HANDLED:
                    handled.append(msg)  # in no queue: acked below, never delivered
                    continue
                pq, new = self._queues.queue_of(msg)
                msg._pq = pq
                entry = split.get(id(pq))
                if entry is None:
                    entry = split[id(pq)] = (pq, new, [], [])
                # A copy of a message in hand is counted and held, not dispatched (in_hand).
                (entry[2] if verdict == DISPATCH else entry[3]).append(msg)
        finally:
            self._in_hand.handed_on()
        delivery = self._delivery
        for pq, new, msgs, copies in split.values():
            pq.on_received(msgs + copies if copies else msgs)
            if new:
                delivery.start_queue(pq)
            if copies:
                self._log.info("redelivered_in_hand", topic=pq.mq.topic, n=len(copies),
                               msg_ids=[m.message_id for m in copies][:8])  # fmt: skip
            if msgs:
                delivery.deliver(pq, list[ConsumerMessage](msgs))
        if handled:
            # Copies of handled messages whose ack is owed (a release freed them): the
            # application had them, so each copy's handle (the live one) is acked now;
            # held by the renewer until that ack is done with, like any owed ack.
            for msg in handled:
                settler.finish(msg)
            self._log.info("redelivered_after_handling", n=len(handled),
                           msg_ids=[m.message_id for m in handled][:8])  # fmt: skip


class _Arrivals:
    """One receive's messages that its source handed on before the receive's end
    (``PopSource.receive``'s ``early``: a gRPC stream's, as they are read): handed on
    at once while nothing is paused; else kept for the receive's end (``later``),
    with every message after them, so one queue's messages stay in order."""

    __slots__ = ("_receiver", "given", "later")

    def __init__(self, receiver: Receiver) -> None:
        self._receiver = receiver
        #: messages given so far (the first of the receive's answer)
        self.given = 0
        self.later: list[PopMessage] = []

    def __call__(self, chunk: list[PopMessage]) -> None:
        self.given += len(chunk)
        receiver = self._receiver
        if self.later or receiver._pauses.any:
            self.later.extend(chunk)
        else:
            receiver.hand_on(chunk, time.monotonic())

    def rest(self, received: list[PopMessage]) -> list[PopMessage]:
        """What of the receive's answer is still to hand on."""
        if not self.given:
            return received
        return self.later + received[self.given :]


async def _unreleased(messages: list[PopMessage]) -> None:
    """No release given: the messages come back after their invisible time."""
