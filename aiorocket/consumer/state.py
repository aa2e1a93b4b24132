"""The state a consumer's parts share: one object, no back-reference to the consumer.

Like aiokafka's ``SubscriptionState``, ``ConsumerState`` is what the rebalancer,
the pullers, the delivery strategy and the operator requests read and change: the
subscriptions, the owned process queues, the assignment mode and the cache budget.
Each part is built with this object and the few other things it uses (a broker
client, the NameServer client, the settler), so none of them reaches into another.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from aiorocket._signal import Signal
from aiorocket.consumer.offsets import ResumeFloors
from aiorocket.consumer.pauses import Pauses
from aiorocket.consumer.process_queue import CacheBudget, ProcessQueue
from aiorocket.consumer.rate import RateLimit, TopicRates
from aiorocket.message import MessageQueue
from aiorocket.namespace import unwrap
from aiorocket.protocol.subscription import Subscription

if TYPE_CHECKING:
    from aiorocket._log import Logger
    from aiorocket._trace import Tracer
    from aiorocket.consumer.config import ConsumerConfig
    from aiorocket.consumer.pop.lite import LiteSubscriptions
    from aiorocket.consumer.trace import HandlerTrace

__all__ = ["ConsumerState", "PullObserver"]
#: ``observer(queue, seconds, messages)``: see ``Consumer.observe_pulls``.
PullObserver = Callable[[MessageQueue, float, int], None]


class ConsumerState:
    """What the parts of one consumer share.

    Parameters
    ----------
    group:
        The consumer group.
    config:
        The consumer's validated configuration (never changed after construction).
    log:
        The consumer's logger (bound to the group, later to the client id).
    pull_mode:
        A pull consumer (``CONSUME_ACTIVELY``): messages wait in per-queue buffers, the
        broker needs the subscription with every pull, and there is no retry topic.
    """

    def __init__(
        self, group: str, config: ConsumerConfig, log: Logger, *, pull_mode: bool = False
    ) -> None:
        self.group = group
        self.config = config
        self.log = log
        self.pull_mode = pull_mode
        #: the message trace (``trace=True``), run by the backend over its connection
        self.tracer: Tracer | None = None
        #: records the handler calls into ``tracer``
        self.trace: HandlerTrace | None = None
        #: a remoting consumer in POP mode (heartbeats say ``CONSUME_POP``)
        self.pop_mode = False
        self.subscriptions: dict[str, Subscription] = {}
        #: a lite consumer's lite subscriptions (its bind topic), else None
        self.lite: LiteSubscriptions | None = None
        #: queues chosen by the application (PullConsumer.assign): no group rebalance.
        self.manual_assignment: set[MessageQueue] | None = None
        #: with False only the application's commit() stores offsets.
        self.auto_commit = True
        self.process_queues: dict[MessageQueue, ProcessQueue] = {}
        #: the resume floors of queues that left the route while ours (their broker
        #: died), until they are assigned again (see aiorocket.consumer.offsets).
        self.resume_floors = ResumeFloors()
        #: orderly queues revoked while a handler ran, or whose offset the revoke did
        #: not commit: their broker locks are kept (and renewed) until the handler has
        #: finished and the offset is committed, and a re-assignment waits for that.
        self.releasing: dict[MessageQueue, ProcessQueue] = {}
        #: queues revoked while their handlers ran (concurrent consumption, no lock):
        #: a re-assignment waits for those handlers, so that this member does not pull
        #: and handle a message again while its first call still runs.
        self.finishing: dict[MessageQueue, ProcessQueue] = {}
        #: queues of ``releasing`` or ``finishing`` assigned to us again meanwhile:
        #: rebalance at release.
        self.wanted_back: set[MessageQueue] = set()
        limit = config.pull_threshold_for_all
        #: the cap on all queues' cached messages, shared by their ProcessQueues.
        self.cache_budget = CacheBudget(limit) if limit is not None else None
        #: called after each pull that returned messages (see Consumer.observe_pulls).
        self.pull_observers: list[PullObserver] = []
        self.closing = False
        self.started_at_ms = 0
        #: broadcasting messages given up after their local retries.
        self.dropped_messages = 0
        #: records that could not be decoded (see aiorocket.consumer.undecodable)
        self.undecodable_messages = 0
        self._joined = False
        self._joined_signal = Signal()
        #: subscribed topics without a route (they do not exist): why a consumer that
        #: has not joined waits (``Consumer.not_ready_reason``)
        self.missing_topics: set[str] = set()
        self.rebalance_requested = False
        #: notified by request_rebalance(): the rebalance loop runs a pass at once.
        self.rebalance_wanted = Signal()
        namespace = config.namespace
        #: what the application paused (``Consumer.pause``); a change wakes every pull
        #: task, which then asks it again
        self.pauses = Pauses(lambda topic: unwrap(namespace, topic))
        self.pauses.on_change.append(self._wake_queues)
        #: the consume rate limit (``max_rate``), shared by every receive loop
        self.rate = None if config.max_rate is None else RateLimit(config.max_rate)
        #: the per-topic limits (``topic_max_rate``), None without any
        self.topic_rates = (
            TopicRates(config.topic_max_rate, lambda topic: unwrap(namespace, topic))
            if config.topic_max_rate else None
        )  # fmt: skip

    def _wake_queues(self) -> None:
        """A pause or resume: each pull task asks again. A pull in flight for a queue
        now paused is cancelled (its answer would be delivered after the pause): the
        queue's position did not move, so nothing is skipped; the resume pulls it."""
        paused = self.pauses.queue_paused
        for mq, pq in self.process_queues.items():
            if pq.request_scope is not None and paused(mq):
                pq.request_scope.cancel()
            pq.notify()

    # -- assignment ------------------------------------------------------------------

    def assignment(self) -> set[MessageQueue]:
        return {mq for mq, pq in self.process_queues.items() if not pq.dropped}

    def request_rebalance(self) -> None:
        self.rebalance_requested = True
        self.rebalance_wanted.notify()

    @property
    def joined(self) -> bool:
        """True once a rebalance pass found this client among the group's members and
        computed its share of every subscribed topic."""
        return self._joined

    def note_joined(self) -> None:
        if not self._joined:
            self._joined = True
            self._joined_signal.notify()

    async def wait_joined(self) -> None:
        while not self._joined:
            await self._joined_signal.wait()

    # -- flow control ------------------------------------------------------------------

    def has_room(self, pq: ProcessQueue) -> bool:
        """Whether ``pq`` may pull more: its own limits and the shared budget."""
        budget = self.cache_budget
        return pq.has_capacity(self.config) and (budget is None or budget.has_room())

    async def wait_room(self, pq: ProcessQueue) -> None:
        if not pq.has_capacity(self.config):
            await pq.wait_room(self.config)
        elif self.cache_budget is not None:
            await self.cache_budget.wait_room()

    def waits_for(self, mq: MessageQueue) -> bool:
        """Whether a revoked ``mq``'s handlers still run (orderly or concurrent)."""
        return mq in self.releasing or mq in self.finishing

    def let_go(self, held: dict[MessageQueue, ProcessQueue], pq: ProcessQueue) -> None:
        """A revoked queue's last handler ended: forget ``pq`` in ``held``
        (``releasing`` or ``finishing``); if it was assigned to us again meanwhile,
        rebalance now to start it."""
        if held.get(pq.mq) is pq:
            del held[pq.mq]
        if pq.mq in self.wanted_back:
            self.wanted_back.discard(pq.mq)
            if not self.closing:
                self.request_rebalance()

    def held_queues(self) -> list[ProcessQueue]:
        """The queues whose broker locks we keep: owned ones and revoked ones still
        finishing a handler or their commit (orderly)."""
        pqs = [pq for pq in self.process_queues.values() if not pq.dropped]
        pqs.extend(self.releasing.values())
        return pqs
