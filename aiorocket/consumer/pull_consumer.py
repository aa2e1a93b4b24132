"""The pull consumer: you ask for messages; it keeps queues pulled ahead of you.

It is the push consumer's engine in another mode: the same ProcessQueue pull tasks,
flow-control limits, rebalance and offset flusher, but messages wait in per-queue
buffers until ``PullConsumer.getmany`` hands them out. That makes per-queue
``pause``/``resume`` and ``seek`` cheap: they act on one queue's buffer and pull task.

Offsets follow aiokafka's *position* model: a message counts as consumed once it was
returned to you, and auto-commit (on by default) commits positions every
``persist_offset_interval``. Turn it off and call ``commit`` after processing for
at-least-once delivery of every returned batch.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any

import anyio

from aiorocket._log import get_logger
from aiorocket._settings import apply_settings, check_group
from aiorocket.client.namesrv import namesrv_addrs
from aiorocket.consumer.allocation import AllocateStrategy, allocate_averagely
from aiorocket.consumer.buffered import Buffered
from aiorocket.consumer.committer import check_commit
from aiorocket.consumer.config import ConsumerConfig
from aiorocket.consumer.delivery import Delivery, DeliveryParts
from aiorocket.consumer.engine import Engine, RebalanceListener
from aiorocket.consumer.process_queue import ProcessQueue
from aiorocket.consumer.state import ConsumerState
from aiorocket.errors import ClientClosedError, CommitFailedError, ConfigError, RocketMQError
from aiorocket.message import MessageQueue
from aiorocket.namespace import unwrap_queue, wrap, wrap_queue
from aiorocket.protocol.subscription import EXPRESSION_SQL92, EXPRESSION_TAG, Subscription
from aiorocket.received import ConsumerMessage

__all__ = ["PullConsumer"]


class PullConsumer:
    """A consumer you pull from: ``getmany()``, ``getone()`` or ``async for``.

    ```python
    consumer = PullConsumer("my-group", namesrv="127.0.0.1:9876", auto_commit=False)
    consumer.subscribe("orders")
    async with consumer:
        batch = await consumer.getmany(timeout=1.0)
        await consumer.commit()
    ```

    Parameters
    ----------
    group:
        The consumer group (its members share the subscribed topics' queues).
    namesrv:
        NameServer addresses; default: ``$AIOROCKET_NAMESRV_ADDR``.
    auto_commit:
        Commit the positions of returned messages every ``persist_offset_interval``;
        with ``False``, only ``commit`` stores offsets.
    listener:
        A [`RebalanceListener`][aiorocket.consumer.RebalanceListener] awaited around queue
        ownership changes.
    config:
        A [`ConsumerConfig`][aiorocket.consumer.ConsumerConfig]; keyword ``settings`` override
        its fields.
    allocate:
        The queue allocation strategy (default: averagely, as in Java).
    client_id:
        This client's id in the group (default ``<ip>@<pid>#<random>``).
    settings:
        [`ConsumerConfig`][aiorocket.consumer.ConsumerConfig] fields.
    """

    def __init__(
        self,
        group: str,
        namesrv: str | Sequence[str] | None = None,
        *,
        auto_commit: bool = True,
        listener: RebalanceListener | None = None,
        config: ConsumerConfig | None = None,
        allocate: AllocateStrategy = allocate_averagely,
        client_id: str | None = None,
        **settings: Any,
    ) -> None:
        check_group(group, "consumer")
        cfg = apply_settings(config or ConsumerConfig(), settings, "consumer")
        if cfg.dedup is not None:  # poll() hands messages over with no handler call to wrap
            raise ConfigError("dedup= is a Consumer's (around its handler); not a PullConsumer's")
        self._group = group
        self._namespace = namespace = cfg.namespace
        # The engine works with the broker's names: the group and topics in the namespace.
        wire_group = wrap(namespace, group)
        state = ConsumerState(
            wire_group, cfg, get_logger("consumer", group=wire_group), pull_mode=True
        )
        state.auto_commit = auto_commit
        self._state = state
        self._buffered: Buffered | None = None
        self._engine = Engine(
            state,
            namesrv_addrs(namesrv),
            delivery=self._buffers,
            allocate=allocate,
            listener=listener,
            client_id=client_id,
        )

    def _buffers(self, parts: DeliveryParts) -> Delivery:
        self._buffered = Buffered(parts.state, parts.locks)
        return self._buffered

    @property
    def group(self) -> str:
        return self._group

    def _wire(self, mq: MessageQueue) -> MessageQueue:
        """The broker's name of the application's queue ``mq``."""
        return wrap_queue(self._namespace, mq)

    def _app(self, mq: MessageQueue) -> MessageQueue:
        """The application's name of the broker's queue ``mq``."""
        return unwrap_queue(self._namespace, mq)

    @property
    def config(self) -> ConsumerConfig:
        return self._state.config

    # -- assignment ------------------------------------------------------------------

    def subscribe(self, topic: str, expression: str = "*", *, sql: str | None = None) -> None:
        """Join the group's rebalance for ``topic`` (exclusive with ``assign``)."""
        state = self._state
        if state.manual_assignment is not None:
            raise ConfigError("assign() and subscribe() cannot be combined")
        if self._engine.started:
            raise ConfigError("subscribe before starting the consumer")
        topic = wrap(self._namespace, topic)
        state.subscriptions[topic] = (
            Subscription(topic, sql, EXPRESSION_SQL92)
            if sql is not None
            else Subscription(topic, expression, EXPRESSION_TAG)
        )

    def assign(
        self, queues: Iterable[MessageQueue], expression: str = "*", *, sql: str | None = None
    ) -> None:
        """Consume exactly these queues, outside any group rebalance, filtered by a tag
        ``expression`` or an SQL92 ``sql`` (for topics not assigned before)."""
        queues = {self._wire(mq) for mq in queues}
        state = self._state
        if state.manual_assignment is None and state.subscriptions:
            raise ConfigError("assign() and subscribe() cannot be combined")
        state.manual_assignment = queues
        for mq in queues:
            if mq.topic not in state.subscriptions:
                state.subscriptions[mq.topic] = (
                    Subscription(mq.topic, sql, EXPRESSION_SQL92)
                    if sql is not None
                    else Subscription(mq.topic, expression)
                )
        if self._engine.started:
            state.request_rebalance()

    def assignment(self) -> set[MessageQueue]:
        return {self._app(mq) for mq in self._state.assignment()}

    # -- lifecycle ---------------------------------------------------------------------

    async def __aenter__(self) -> PullConsumer:
        if not self._state.subscriptions:
            raise ConfigError("subscribe to at least one topic before starting")
        await self._engine.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        graceful = exc_type is None or issubclass(exc_type, Exception)
        await self._engine.close(exc_type, exc, tb, graceful=graceful)
        return None

    # -- fetching ----------------------------------------------------------------------

    def _buffers_of_started(self) -> Buffered:
        if self._buffered is None:
            raise ClientClosedError("start the consumer (async with) before fetching")
        return self._buffered

    async def getmany(
        self, timeout: float = 0.0, max_records: int | None = None
    ) -> dict[MessageQueue, list[ConsumerMessage]]:
        """Messages ready now, waiting up to ``timeout`` seconds for the first ones."""
        limit = max_records if max_records is not None else self._state.config.pull_batch_size
        if limit <= 0:
            raise ConfigError("max_records must be positive")
        buffered = self._buffers_of_started()
        with anyio.move_on_after(timeout):
            while True:
                batch = buffered.take(limit)
                if batch:
                    return self._app_keys(batch)
                await buffered.available.wait()
        return self._app_keys(buffered.take(limit))

    def _app_keys(
        self, by_queue: dict[MessageQueue, list[ConsumerMessage]]
    ) -> dict[MessageQueue, list[ConsumerMessage]]:
        if not self._namespace:
            return by_queue
        return {self._app(mq): value for mq, value in by_queue.items()}

    async def getone(self) -> ConsumerMessage:
        """The next message, waiting as long as it takes."""
        while True:
            batch = await self.getmany(timeout=3600.0, max_records=1)
            for msgs in batch.values():
                return msgs[0]

    def __aiter__(self) -> AsyncIterator[ConsumerMessage]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[ConsumerMessage]:
        while True:
            yield await self.getone()

    # -- positions -----------------------------------------------------------------------

    def _pq(self, mq: MessageQueue) -> ProcessQueue:
        pq = self._state.process_queues.get(self._wire(mq))
        if pq is None or pq.dropped:
            raise ConfigError(f"{mq} is not assigned to this consumer")
        return pq

    def position(self, mq: MessageQueue) -> int:
        """The offset of the next message ``getmany`` will return for ``mq``."""
        pq = self._pq(mq)
        return int(pq.buffer[0].queue_offset) if pq.buffer else int(pq.tracker.committable())

    def seek(self, mq: MessageQueue, offset: int) -> None:
        """Continue ``mq`` from ``offset``; buffered messages and a pull in flight are dropped."""
        if offset < 0:
            raise ConfigError("offset must be >= 0")
        pq = self._pq(mq)
        pq.reset(offset)
        pq.tracker.mark_dirty()

    async def seek_to_beginning(self, *mqs: MessageQueue) -> None:
        for mq, offset in (await self.beginning_offsets(mqs or self.assignment())).items():
            self.seek(mq, offset)

    async def seek_to_end(self, *mqs: MessageQueue) -> None:
        for mq, offset in (await self.end_offsets(mqs or self.assignment())).items():
            self.seek(mq, offset)

    async def _addr(self, mq: MessageQueue) -> str:
        addr = await self._engine.finder.reader(self._wire(mq))
        if addr is None:
            raise RocketMQError(f"no broker for {mq}")
        return addr

    async def beginning_offsets(self, mqs: Iterable[MessageQueue]) -> dict[MessageQueue, int]:
        broker = self._engine.client.broker
        return {mq: await broker.get_min_offset(await self._addr(mq), self._wire(mq)) for mq in mqs}

    async def end_offsets(self, mqs: Iterable[MessageQueue]) -> dict[MessageQueue, int]:
        broker = self._engine.client.broker
        return {mq: await broker.get_max_offset(await self._addr(mq), self._wire(mq)) for mq in mqs}

    async def offsets_for_times(
        self, timestamps: Mapping[MessageQueue, int]
    ) -> dict[MessageQueue, int]:
        """For each queue, the first offset stored at or after the epoch-ms timestamp."""
        broker = self._engine.client.broker
        return {
            mq: await broker.search_offset(await self._addr(mq), self._wire(mq), ts)
            for mq, ts in timestamps.items()
        }

    def pause(self, *mqs: MessageQueue) -> None:
        """Stop pulling these queues and stop returning their buffered messages."""
        for mq in mqs:
            self._pq(mq).pause()

    def resume(self, *mqs: MessageQueue) -> None:
        for mq in mqs:
            self._pq(mq).resume()
        if self._buffered is not None:
            self._buffered.available.notify()

    def paused(self) -> set[MessageQueue]:
        return {self._app(mq) for mq, pq in self._state.process_queues.items() if pq.paused}

    async def commit(self, offsets: Mapping[MessageQueue, int] | None = None) -> None:
        """Commit ``offsets`` (per queue, the next offset to consume), or the current
        position of every queue this consumer owns.

        All queues are checked before anything is stored, as Kafka's commit after a
        rebalance is refused: storing an offset the group has moved past would make the
        messages in between be consumed again.

        Raises
        ------
        CommitFailedError
            Nothing of that queue was stored (nor of the others, unless its connection
            was lost during the commit: those before it were): a queue in ``offsets`` is
            not assigned to this consumer
            (any more: a rebalance gave it to another member), or an offset is behind the
            group's stored offset found after the connection to the queue's broker was
            lost (another member consumed the queue meanwhile; this consumer continues
            from the group's offset). What was processed since the last commit may be
            processed by that member too.
        ConfigError
            A negative offset.
        ClientClosedError
            The consumer is not running (commit inside ``async with``).
        """
        if not self._engine.started or self._state.closing:
            raise ClientClosedError("commit() needs a running consumer (inside async with)")
        store = self._engine.offset_store
        if offsets is None:
            # A queue revoked meanwhile is not ours to commit: its new owner continues
            # from its last commit.
            plan = [
                (pq, pq.tracker.committable())
                for pq in self._state.process_queues.values()
                if not pq.dropped
            ]
        else:
            plan = [(self._owned(mq, offset), offset) for mq, offset in offsets.items()]
        for pq, offset in plan:
            await check_commit(store, pq, offset)
        for pq, offset in plan:
            # Checked again (no query unless its connection was lost since): the stores
            # before this one awaited their brokers, and meanwhile this queue's broker may
            # have dropped us and another member committed past it (pull_remoting 44028),
            # or a rebalance revoked it (its new owner's commits are not ours to pass).
            # Nothing is awaited between this check and the store's request.
            await check_commit(store, pq, offset)
            await store.persist(pq.mq, offset)
            pq.tracker.mark_committed(offset)
        await store.flush()

    def _owned(self, mq: MessageQueue, offset: int) -> ProcessQueue:
        """``mq``'s ProcessQueue for a commit of ``offset``."""
        if offset < 0:
            raise ConfigError(f"offset must be >= 0, got {offset} for {mq}")
        pq = self._state.process_queues.get(self._wire(mq))
        if pq is None or pq.dropped:
            raise CommitFailedError(
                f"{mq} is not assigned to this consumer (a rebalance gave it to another "
                "member, or it never was): nothing was committed"
            )
        return pq

    async def committed(self, mq: MessageQueue) -> int | None:
        return await self._engine.offset_store.read(self._wire(mq))
