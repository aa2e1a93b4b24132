"""The pull consumer: you ask for messages; it keeps queues pulled ahead of you.

It is the push consumer's engine in another mode: the same ProcessQueue pull tasks,
flow-control limits, rebalance and offset flusher, but messages wait in per-queue
buffers until :meth:`PullConsumer.getmany` hands them out. That makes per-queue
``pause``/``resume`` and ``seek`` cheap: they act on one queue's buffer and pull task.

Offsets follow aiokafka's *position* model: a message counts as consumed once it was
returned to you, and auto-commit (on by default) commits positions every
``persist_offset_interval``. Turn it off and call :meth:`commit` after processing for
at-least-once delivery of every returned batch.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any

import anyio

from aiorocket.consumer.consumer import Consumer, RebalanceListener
from aiorocket.consumer.message import ConsumerMessage
from aiorocket.errors import ConfigError, RocketMQError
from aiorocket.message import MessageQueue
from aiorocket.protocol.subscription import EXPRESSION_SQL92, Subscription


class PullConsumer:
    """A consumer you pull from: ``getmany()``, ``getone()`` or ``async for``.

    >>> consumer = PullConsumer("my-group", namesrv="127.0.0.1:9876", auto_commit=False)
    >>> consumer.subscribe("orders")
    >>> async with consumer:
    ...     batch = await consumer.getmany(timeout=1.0)
    ...     await consumer.commit()

    Parameters
    ----------
    group:
        The consumer group (its members share the subscribed topics' queues).
    namesrv:
        NameServer addresses; default: ``$AIOROCKET_NAMESRV_ADDR``.
    auto_commit:
        Commit the positions of returned messages every ``persist_offset_interval``;
        with ``False``, only :meth:`commit` stores offsets.
    listener:
        A :class:`~aiorocket.consumer.RebalanceListener` awaited around queue
        ownership changes.
    settings:
        :class:`~aiorocket.consumer.ConsumerConfig` fields.
    """

    def __init__(
        self,
        group: str,
        namesrv: str | Sequence[str] | None = None,
        *,
        auto_commit: bool = True,
        listener: RebalanceListener | None = None,
        **settings: Any,
    ) -> None:
        self._engine = Consumer(group, namesrv, listener=listener, **settings)
        self._engine.pull_mode = True
        self._engine.auto_commit = auto_commit
        self._next_queue = 0

    # -- assignment ------------------------------------------------------------------

    def subscribe(self, topic: str, expression: str = "*", *, sql: str | None = None) -> None:
        """Join the group's rebalance for ``topic`` (exclusive with :meth:`assign`)."""
        if self._engine.manual_assignment is not None:
            raise ConfigError("assign() and subscribe() cannot be combined")
        self._engine.subscribe(topic, expression, sql=sql)

    def assign(
        self, queues: Iterable[MessageQueue], expression: str = "*", *, sql: str | None = None
    ) -> None:
        """Consume exactly these queues, outside any group rebalance, filtered by a tag
        ``expression`` or an SQL92 ``sql`` (for topics not assigned before)."""
        queues = set(queues)
        engine = self._engine
        if engine.manual_assignment is None and engine.subscriptions:
            raise ConfigError("assign() and subscribe() cannot be combined")
        engine.manual_assignment = queues
        for mq in queues:
            if mq.topic not in engine.subscriptions:
                engine.subscriptions[mq.topic] = (
                    Subscription(mq.topic, sql, EXPRESSION_SQL92)
                    if sql is not None
                    else Subscription(mq.topic, expression)
                )
        if engine._tg is not None:
            engine.request_rebalance()

    def assignment(self) -> set[MessageQueue]:
        return self._engine.assignment()

    # -- lifecycle ---------------------------------------------------------------------

    async def __aenter__(self) -> PullConsumer:
        await self._engine.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        return await self._engine.__aexit__(exc_type, exc, tb)

    # -- fetching ----------------------------------------------------------------------

    def _take(self, max_records: int) -> dict[MessageQueue, list[ConsumerMessage]]:
        pqs = [
            pq for pq in self._engine.process_queues.values() if not pq.dropped and not pq.paused
        ]
        out: dict[MessageQueue, list[ConsumerMessage]] = {}
        if not pqs:
            return out
        taken = 0
        start = self._next_queue % len(pqs)
        self._next_queue += 1
        for pq in pqs[start:] + pqs[:start]:  # rotate so no queue starves the others
            batch: list[ConsumerMessage] = []
            while pq.buffer and taken < max_records:
                msg: ConsumerMessage = pq.buffer.popleft()
                if msg._generation != pq.tracker.generation:
                    continue
                msg._settled = True
                pq.on_done(msg, msg._generation)  # returned = consumed (position model)
                batch.append(msg)
                taken += 1
            if batch:
                out[pq.mq] = batch
            if taken >= max_records:
                break
        return out

    async def getmany(
        self, timeout: float = 0.0, max_records: int | None = None
    ) -> dict[MessageQueue, list[ConsumerMessage]]:
        """Messages ready now, waiting up to ``timeout`` seconds for the first ones."""
        limit = max_records if max_records is not None else self._engine.config.pull_batch_size
        if limit <= 0:
            raise ConfigError("max_records must be positive")
        with anyio.move_on_after(timeout):
            while True:
                batch = self._take(limit)
                if batch:
                    return batch
                await self._engine._available.wait()
        return self._take(limit)

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

    def _pq(self, mq: MessageQueue) -> Any:
        pq = self._engine.process_queues.get(mq)
        if pq is None or pq.dropped:
            raise ConfigError(f"{mq} is not assigned to this consumer")
        return pq

    def position(self, mq: MessageQueue) -> int:
        """The offset of the next message :meth:`getmany` will return for ``mq``."""
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
        addr = await self._engine.read_addr(mq)
        if addr is None:
            raise RocketMQError(f"no broker for {mq}")
        return addr

    async def beginning_offsets(self, mqs: Iterable[MessageQueue]) -> dict[MessageQueue, int]:
        broker = self._engine.client.broker
        return {mq: await broker.get_min_offset(await self._addr(mq), mq) for mq in mqs}

    async def end_offsets(self, mqs: Iterable[MessageQueue]) -> dict[MessageQueue, int]:
        broker = self._engine.client.broker
        return {mq: await broker.get_max_offset(await self._addr(mq), mq) for mq in mqs}

    async def offsets_for_times(
        self, timestamps: Mapping[MessageQueue, int]
    ) -> dict[MessageQueue, int]:
        """For each queue, the first offset stored at or after the epoch-ms timestamp."""
        broker = self._engine.client.broker
        return {
            mq: await broker.search_offset(await self._addr(mq), mq, ts)
            for mq, ts in timestamps.items()
        }

    def pause(self, *mqs: MessageQueue) -> None:
        """Stop pulling these queues and stop returning their buffered messages."""
        for mq in mqs:
            self._pq(mq).pause()

    def resume(self, *mqs: MessageQueue) -> None:
        for mq in mqs:
            self._pq(mq).resume()
        self._engine._available.notify()

    def paused(self) -> set[MessageQueue]:
        return {mq for mq, pq in self._engine.process_queues.items() if pq.paused}

    async def commit(self, offsets: Mapping[MessageQueue, int] | None = None) -> None:
        """Commit ``offsets`` (next offset to consume), or every queue's current position."""
        engine = self._engine
        if offsets is None:
            for pq in list(engine.process_queues.values()):
                offset = pq.tracker.committable()
                await engine.offset_store.persist(pq.mq, offset)
                pq.tracker.mark_committed(offset)
        else:
            for mq, offset in offsets.items():
                await engine.offset_store.persist(mq, offset)
                owned = engine.process_queues.get(mq)
                if owned is not None:
                    owned.tracker.mark_committed(offset)
        await engine.offset_store.flush()

    async def committed(self, mq: MessageQueue) -> int | None:
        return await self._engine.offset_store.read(mq)
