"""The push consumer: subscriptions, lifecycle, heartbeats, rebalance, dispatch, offsets.

Everything runs in one task group owned by the consumer (entered by ``async with``):

* a heartbeat loop (every 30 s) and a rebalance loop (every 20 s and at once when a
  broker says the group changed);
* one pull task per assigned queue (ProcessQueue), each in its own cancel scope so a
  rebalance can stop exactly that queue;
* ``consume_concurrency`` worker tasks running the handler (this replaces the Java
  consume thread pool), or, without a handler, the ``async for`` iterator;
* an offset flusher (every 5 s) committing, per queue, the lowest unfinished offset.
"""

from __future__ import annotations

import functools
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol

import anyio
import anyio.abc
import anyio.lowlevel

from aiorocket._log import get_logger
from aiorocket._settings import apply_settings, check_group
from aiorocket._signal import Signal
from aiorocket.client.instance import ClientInstance, make_client_id
from aiorocket.client.namesrv import namesrv_addrs
from aiorocket.consumer import dispatch, iterate, locks, membership, orderly
from aiorocket.consumer import rebalance as _rebalance
from aiorocket.consumer.allocation import AllocateStrategy, allocate_averagely
from aiorocket.consumer.committer import OffsetCommitter
from aiorocket.consumer.config import ConsumerConfig, MessageModel
from aiorocket.consumer.dispatch import is_async_callable
from aiorocket.consumer.local_offsets import LocalFileOffsetStore, default_offset_dir
from aiorocket.consumer.message import ConsumerMessage
from aiorocket.consumer.offset_store import OffsetStore, RemoteOffsetStore
from aiorocket.consumer.operator_requests import OperatorRequests
from aiorocket.consumer.process_queue import CacheBudget, ProcessQueue
from aiorocket.consumer.puller import pull_loop
from aiorocket.consumer.results import HandlerResult
from aiorocket.consumer.stats import QueueStats, Snapshot, queue_stats
from aiorocket.consumer.threads import HandlerThreads
from aiorocket.consumer.work_queue import WorkQueue
from aiorocket.errors import (
    BrokerResponseError,
    ClientClosedError,
    ConfigError,
    ConnectionClosedError,
    NameServerUnavailableError,
    RocketMQError,
)
from aiorocket.message import MessageQueue
from aiorocket.protocol.codes import RequestCode
from aiorocket.protocol.command import RemotingCommand
from aiorocket.protocol.route import MASTER_ID
from aiorocket.protocol.subscription import EXPRESSION_SQL92, EXPRESSION_TAG, Subscription
from aiorocket.remoting.connection import Connection

MessageHandler = Callable[[ConsumerMessage], Awaitable[HandlerResult] | HandlerResult]
BatchHandler = Callable[[list[ConsumerMessage]], Awaitable[HandlerResult] | HandlerResult]


#: ``observer(queue, seconds, messages)``: see :meth:`Consumer.observe_pulls`.
PullObserver = Callable[[MessageQueue, float, int], None]


class RebalanceListener(Protocol):
    """Awaited around queue ownership changes (like aiokafka's ConsumerRebalanceListener).

    ``on_queues_revoked`` runs before a dropped queue's offset is flushed (and, when
    orderly, before its lock is released); ``on_queues_assigned`` after new queues
    started pulling. Each is awaited at most once per rebalance pass, with the queues of
    every topic that changed in it (as aiokafka does per rebalance).
    """

    async def on_queues_revoked(self, queues: list[MessageQueue]) -> None: ...

    async def on_queues_assigned(self, queues: list[MessageQueue]) -> None: ...


_ORDERLY_NEEDS_HANDLER = (
    "orderly=True needs a handler (handler= or batch_handler=): orderly consumption runs "
    "one handler call at a time per locked queue; async for cannot consume orderly"
)


def retry_topic(group: str) -> str:
    return f"%RETRY%{group}"


def dlq_topic(group: str) -> str:
    return f"%DLQ%{group}"


def _close_bound(cfg: ConsumerConfig) -> float:
    """How long one broker's offset commits (and the unregistering) may take at close."""
    return max(cfg.request_timeout * 2, 5.0)


async def _require_namesrv(client: ClientInstance, topics: Iterable[str]) -> None:
    """Fetch the routes of ``topics``; raise if no NameServer answered for any of them.

    A consumer that cannot reach a NameServer at start has nothing to consume and would
    only log warnings forever, so starting fails (as the Java consumer's ``start()``
    does). One that loses its NameServers later keeps running on the cached routes.
    """
    topics = list(topics)
    failures = await client.namesrv.prefetch(topics)
    unavailable = [e for e in failures.values() if isinstance(e, NameServerUnavailableError)]
    if unavailable and len(unavailable) == len(topics):
        raise unavailable[0]


class Consumer:
    """A push consumer for one group.

    >>> consumer = Consumer("my-group", namesrv="127.0.0.1:9876")
    >>> consumer.subscribe("orders", "paid || refunded")
    >>> async with consumer:
    ...     async for msg in consumer:
    ...         print(msg.body)

    or with a handler (run concurrently, up to ``consume_concurrency`` at a time)::

        async def handle(msg: ConsumerMessage) -> None: ...
        async with Consumer("my-group", namesrv=..., handler=handle) as consumer: ...

    Parameters
    ----------
    group:
        The consumer group: the members of a group share its topics' queues
        (clustering) or each get every message (broadcasting).
    namesrv:
        NameServer addresses (``"host:9876"``, ``"a:9876;b:9876"`` or a sequence);
        default: ``$AIOROCKET_NAMESRV_ADDR``.
    handler:
        Called with each message (``async def`` or a plain function, run in a worker
        thread); returning normally settles it, raising, ``False`` or
        :class:`~aiorocket.consumer.Reconsume` sends it back for a retry. Without a
        handler, consume with ``async for``.
    batch_handler:
        Like ``handler``, with a list of up to ``consume_batch_size`` messages of one
        queue, settled together.
    config:
        A :class:`~aiorocket.consumer.ConsumerConfig`; keyword ``settings`` override
        its fields.
    allocate:
        The queue allocation strategy (default: averagely, as in Java).
    listener:
        A :class:`RebalanceListener` awaited around queue ownership changes.
    client_id:
        This client's id in the group (default ``<ip>@<pid>#<random>``).
    instance_name:
        A stable instance name (the client id becomes ``<ip>@<instance_name>``); a
        broadcasting consumer finds its offset file again by it after a restart.
    settings:
        :class:`~aiorocket.consumer.ConsumerConfig` fields, e.g. ``consume_concurrency=50``.
    """

    def __init__(
        self,
        group: str,
        namesrv: str | Sequence[str] | None = None,
        *,
        handler: MessageHandler | None = None,
        batch_handler: BatchHandler | None = None,
        config: ConsumerConfig | None = None,
        allocate: AllocateStrategy = allocate_averagely,
        listener: RebalanceListener | None = None,
        client_id: str | None = None,
        instance_name: str | None = None,
        **settings: Any,
    ) -> None:
        check_group(group, "consumer")
        if handler is not None and batch_handler is not None:
            raise ConfigError("pass either handler or batch_handler, not both")
        cfg = apply_settings(config or ConsumerConfig(), settings, "consumer")
        self.group = group
        self.config = cfg
        self.allocate = allocate
        self.listener = listener
        self._namesrv = namesrv_addrs(namesrv)
        if instance_name is not None and (not instance_name or "@" in instance_name):
            raise ConfigError(f"invalid instance name {instance_name!r}")
        self.instance_name = instance_name
        self._client_id = client_id or (make_client_id(instance_name) if instance_name else None)
        #: pull-consumer mode: messages wait in per-queue buffers for getmany().
        self.pull_mode = False
        self.auto_commit = True
        self.manual_assignment: set[MessageQueue] | None = None
        self._available = Signal()
        self.pending_locks = False
        #: notified when a queue's lock is refused at renewal (see locks.keep_locks)
        self.lock_lost = Signal()
        self._rejoin_soon = False
        self.handler_fn: Callable[..., Any] | None = handler or batch_handler
        self.batch_mode = batch_handler is not None
        self.handler_is_async = is_async_callable(self.handler_fn)
        self.subscriptions: dict[str, Subscription] = {}
        self.process_queues: dict[MessageQueue, ProcessQueue] = {}
        #: called after each pull that returned messages (see observe_pulls).
        self.pull_observers: list[PullObserver] = []
        #: orderly queues revoked while a handler ran: their broker locks are kept (and
        #: renewed) until it has finished, and a re-assignment waits for that.
        self.releasing: dict[MessageQueue, ProcessQueue] = {}
        #: queues of ``releasing`` assigned to us again meanwhile: rebalance at release.
        self.wanted_back: set[MessageQueue] = set()
        self.log = get_logger("consumer", group=group)
        self._client: ClientInstance | None = None
        self._tg: anyio.abc.TaskGroup | None = None
        self.workers_scope: anyio.CancelScope | None = None
        # Loop-bound objects (cancel scopes, events, limiters) are made in __aenter__:
        # constructing a consumer needs no running event loop.
        self._loops_scope: anyio.CancelScope | None = None
        self.work_queue: WorkQueue[dispatch.WorkItem] | None = None
        self._rebalance_signal = Signal()
        #: the rebalance's memory between passes (routes, member lists, counters)
        self.rebalance_state = _rebalance.RebalanceState()
        self._rebalance_requested = False
        limit = cfg.pull_threshold_for_all
        #: the cap on all queues' cached messages, shared by their ProcessQueues.
        self.cache_budget = CacheBudget(limit) if limit is not None else None
        self.workers_done: anyio.Event | None = None
        self._closing = False
        self._closed = False
        #: synchronous handlers' threads (see aiorocket.consumer.threads)
        self.handler_threads: HandlerThreads | None = None
        self._last_stats: Snapshot | None = None
        self.offset_store: OffsetStore
        self._committer: OffsetCommitter
        self.started_at_ms = 0
        self.dropped_messages = 0
        #: records that could not be decoded (see aiorocket.consumer.undecodable)
        self.undecodable_messages = 0
        self._assigned = False
        self._assigned_signal = Signal()

    # -- configuration -------------------------------------------------------------

    def subscribe(self, topic: str, expression: str = "*", *, sql: str | None = None) -> None:
        """Subscribe to ``topic`` with a tag expression (``"a || b"``) or an SQL92 ``sql``."""
        if self._client is not None:
            raise ConfigError("subscribe before starting the consumer")
        if sql is not None:
            sub = Subscription(topic, sql, EXPRESSION_SQL92)
        else:
            sub = Subscription(topic, expression, EXPRESSION_TAG)
        self.subscriptions[topic] = sub

    def handler(self, fn: MessageHandler) -> MessageHandler:
        """Decorator form of ``handler=``."""
        if self._client is not None:
            raise ConfigError("set the handler before starting the consumer")
        self.handler_fn, self.batch_mode = fn, False
        self.handler_is_async = is_async_callable(fn)
        return fn

    @property
    def client(self) -> ClientInstance:
        if self._client is None:
            raise ClientClosedError("consumer is not started")
        return self._client

    @property
    def started(self) -> bool:
        return self._client is not None

    @property
    def client_id(self) -> str:
        return self.client.client_id

    # -- lifecycle -----------------------------------------------------------------

    async def __aenter__(self) -> Consumer:
        if self._client is not None or self._closed:
            raise ClientClosedError("a consumer can be started once")
        if not self.subscriptions:
            raise ConfigError("subscribe to at least one topic before starting")
        cfg = self.config
        if cfg.orderly and self.handler_fn is None and not self.pull_mode:
            raise ConfigError(_ORDERLY_NEEDS_HANDLER)
        if cfg.message_model is MessageModel.CLUSTERING and not self.pull_mode:
            retry = retry_topic(self.group)
            self.subscriptions.setdefault(retry, Subscription(retry))
        self.started_at_ms = time.time_ns() // 1_000_000
        client = ClientInstance(
            self._namesrv,
            client_id=self._client_id,
            request_timeout=cfg.request_timeout,
            route_refresh_interval=cfg.route_refresh_interval,
            credentials=cfg.credentials,
            tls=cfg.tls,
            address_map=cfg.address_map,
        )
        await client.__aenter__()
        try:
            await _require_namesrv(client, self.subscriptions)
        except BaseException:
            await client.__aexit__(None, None, None)
            raise
        self._client = client
        self.log = self.log.bind(client_id=client.client_id)
        if cfg.message_model is MessageModel.BROADCASTING:
            directory = Path(cfg.offset_store_dir) if cfg.offset_store_dir else default_offset_dir()
            local = LocalFileOffsetStore(directory, self.instance_name or "DEFAULT", self.group)
            await local.load()
            self.offset_store = local
        else:
            self.offset_store = RemoteOffsetStore(client, self.group)
        self._committer = OffsetCommitter(self.offset_store, self.log, bound=_close_bound(cfg))
        client.dispatcher.register(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, self._on_ids_changed)
        OperatorRequests(self).register(client.dispatcher)  # running info, reset, consume
        self.work_queue = WorkQueue()
        self.orderly_slots = anyio.Semaphore(cfg.consume_concurrency)
        tg = anyio.create_task_group()
        await tg.__aenter__()
        self._tg = tg
        self.handler_threads = HandlerThreads(
            concurrency=cfg.consume_concurrency,
            max_abandoned=cfg.max_abandoned_threads,
            log=self.log,
        )
        self._loops_scope = anyio.CancelScope()
        try:
            await membership.send_heartbeats(self, starting=True)
            # Later connections (a broker restarted, a connection lost and re-opened)
            # get a heartbeat as soon as they are up.
            client.pool.add_connect_listener(self._on_connected)
            await _rebalance.rebalance(self)
            tg.start_soon(self._run_loops)
            if self.handler_fn is not None and not cfg.orderly:
                self.workers_done = anyio.Event()
                await tg.start(dispatch.run_workers, self)
        except BaseException as exc:
            await self._teardown(type(exc), exc, exc.__traceback__, graceful=False)
            raise
        self.log.info("consumer_started", topics=sorted(self.subscriptions))
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        graceful = (
            exc_type is None
            or not issubclass(exc_type, BaseException)
            or issubclass(exc_type, Exception)
        )
        await self._teardown(exc_type, exc, tb, graceful=graceful)
        return None

    async def run(self) -> None:
        """Start, consume until cancelled, then close (draining what was in flight)."""
        async with self:
            await anyio.sleep_forever()

    async def _teardown(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
        *,
        graceful: bool,
    ) -> None:
        """Stop pulling, drain handlers (bounded), flush offsets, unregister, stop tasks."""
        self._closing = True
        self._closed = True
        if self._loops_scope is not None:
            self._loops_scope.cancel()
        for pq in self.process_queues.values():
            if pq.pull_scope is not None:
                pq.pull_scope.cancel()
        if self.work_queue is not None:
            self.work_queue.close()
        cfg = self.config
        with anyio.CancelScope(shield=True):
            if graceful and self.workers_done is not None:
                with anyio.move_on_after(cfg.shutdown_timeout) as drain:
                    await self.workers_done.wait()
                if drain.cancelled_caught:
                    self.log.warning("shutdown_timeout", timeout=cfg.shutdown_timeout)
            if cfg.orderly:
                # Every handler has returned (or was cancelled) before its queue is
                # unlocked below, revoked queues still finishing included.
                pqs = [*self.process_queues.values(), *self.releasing.values()]
                await orderly.stop_loops(self, pqs, wait=cfg.shutdown_timeout if graceful else 0)
            elif graceful and self.pull_mode:
                with anyio.move_on_after(cfg.shutdown_timeout):
                    for pq in list(self.process_queues.values()):
                        while pq.running:
                            await pq.wait_changed()
            if self.workers_scope is not None:
                self.workers_scope.cancel()
            await self.persist_all()  # bounded per broker
            with anyio.move_on_after(_close_bound(cfg)):
                if cfg.orderly and self._client is not None:
                    await locks.unlock_queues(self, [*self.process_queues, *self.releasing])
                await membership.unregister(self)
        # Every scope we entered is exited, innermost first, even when one of the exits
        # raises (e.g. Cancelled under an outer cancel scope): trio requires it.
        try:
            if self._tg is not None:
                self._tg.cancel_scope.cancel()
                await self._tg.__aexit__(None, None, None)  # body errors propagate unwrapped
        finally:
            self._tg = None
            if self._client is not None:
                await self._client.__aexit__(None, None, None)
            self.log.info("consumer_closed", graceful=graceful)

    async def _run_loops(self) -> None:
        assert self._loops_scope is not None
        with self._loops_scope:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._heartbeat_loop)
                tg.start_soon(self._rebalance_loop)
                tg.start_soon(self._flush_loop)
                if self.config.orderly:
                    tg.start_soon(locks.keep_locks, self)

    async def _heartbeat_loop(self) -> None:
        while True:
            await anyio.sleep(self.config.heartbeat_interval)
            await membership.send_heartbeats(self)

    async def _rebalance_loop(self) -> None:
        while True:
            if not self._rebalance_requested:
                # Allocated queues another member still had locked are retried soon.
                soon = self.pending_locks or self._rejoin_soon
                wait = 1.0 if soon else self.config.rebalance_interval
                with anyio.move_on_after(wait):
                    await self._rebalance_signal.wait()
            self._rebalance_requested = False
            self._rejoin_soon = False
            await _rebalance.rebalance(self)

    async def _flush_loop(self) -> None:
        while True:
            await anyio.sleep(self.config.persist_offset_interval)
            if self.auto_commit:
                await self.persist_all()

    async def rejoin(self) -> None:
        """The group's member list lacks us: heartbeat now and rebalance again soon
        (in 1 s, not ``rebalance_interval``) to take our share back."""
        await membership.send_heartbeats(self)
        self._rejoin_soon = True

    def _on_connected(self, address: str) -> None:
        if self._tg is not None and not self._closing:
            self._tg.start_soon(membership.heartbeat_to, self, address)

    def request_rebalance(self) -> None:
        self._rebalance_requested = True
        self._rebalance_signal.notify()

    async def _on_ids_changed(self, conn: Connection, cmd: RemotingCommand) -> None:
        if cmd.ext_fields.get("consumerGroup") == self.group:
            self.log.debug("consumer_ids_changed", broker=conn.address)
            self.request_rebalance()
        return None

    # -- brokers -------------------------------------------------------------------

    async def broker_addr(self, mq: MessageQueue) -> str | None:
        """The master of ``mq``'s broker group (locks and send-back need the master)."""
        found = await self.find_broker(mq, only_this=True)
        return found[0] if found else None

    async def read_addr(self, mq: MessageQueue) -> str | None:
        """A broker that serves reads of ``mq``: its master, else a slave."""
        found = await self.find_broker(mq)
        return found[0] if found else None

    async def find_broker(
        self, mq: MessageQueue, broker_id: int = MASTER_ID, *, only_this: bool = False
    ) -> tuple[str, int] | None:
        """Address and id of a broker of ``mq``'s group (see ``TopicRoute.find_addr``);
        the route is queried again when the cached one has none."""
        route = self.client.namesrv.cached_route(mq.topic)
        found = route.find_addr(mq.broker_name, broker_id, only_this=only_this) if route else None
        if found is None:
            try:
                route = await self.client.namesrv.query_route(mq.topic)
            except RocketMQError:
                return None
            found = route.find_addr(mq.broker_name, broker_id, only_this=only_this)
        return found

    # -- queues ----------------------------------------------------------------------

    async def start_pulling(self, pq: ProcessQueue, sub: Subscription) -> None:
        assert self._tg is not None
        await self._tg.start(functools.partial(pull_loop, self, pq, sub))
        if self.config.orderly and self.handler_fn is not None:
            self._tg.start_soon(orderly.orderly_consume_loop, self, pq)

    async def revoke(self, pqs: list[ProcessQueue]) -> None:
        """Drop queues: stop pulling, await running handlers (bounded), persist, forget.

        Orderly queues whose handler is still running are not waited for here (that
        can take up to ``consume_timeout``): they keep their broker lock, renewed, and
        are unlocked as soon as the handler has finished (:func:`orderly.release_when_idle`).
        """
        await self._notify_listener("on_queues_revoked", [pq.mq for pq in pqs])
        for pq in pqs:
            pq.drop()
        if not self.config.orderly:
            with anyio.move_on_after(self.config.shutdown_timeout):
                for pq in pqs:
                    while pq.running:
                        await pq.wait_changed()
        if self.auto_commit:
            await self._committer.commit_all(pqs)
        for pq in pqs:
            if self.process_queues.get(pq.mq) is pq:
                del self.process_queues[pq.mq]
        if self.config.orderly:
            idle = []
            for pq in pqs:
                if orderly.busy(pq) and self._tg is not None:
                    self.releasing[pq.mq] = pq
                    self._tg.start_soon(orderly.release_when_idle, self, pq)
                else:
                    idle.append(pq.mq)
            await locks.unlock_queues(self, idle)

    async def on_assigned(self, mqs: list[MessageQueue]) -> None:
        if mqs:
            await self._notify_listener("on_queues_assigned", mqs)

    async def _notify_listener(self, callback: str, mqs: list[MessageQueue]) -> None:
        """Await the listener's ``callback``; an exception it raises is logged, and the
        rebalance goes on (as aiokafka does): a listener bug must not stop consuming."""
        if self.listener is None:
            return
        try:
            await getattr(self.listener, callback)(mqs)
        except Exception as exc:
            self.log.error(
                "rebalance_listener_failed",
                callback=callback,
                topics=sorted({mq.topic for mq in mqs}),
                queues=[str(mq) for mq in mqs],
                error=repr(exc),
                exc_info=exc,
            )

    async def wait_locked(self, pq: ProcessQueue) -> None:
        await pq.wait_changed()

    def has_global_capacity(self) -> bool:
        return self.cache_budget is None or self.cache_budget.has_room()

    async def wait_capacity(self, pq: ProcessQueue) -> None:
        if not pq.has_capacity(self.config):
            await pq.wait_room(self.config)
        elif self.cache_budget is not None:
            await self.cache_budget.wait_room()

    # -- offsets ---------------------------------------------------------------------

    async def persist_offset(self, pq: ProcessQueue) -> None:
        """Commit ``pq``'s offset if it changed; with ``auto_commit=False`` only the
        application's ``commit()`` stores offsets, so this does nothing."""
        if self.auto_commit:
            await self._committer.commit(pq)

    async def persist_all(self) -> None:
        """Commit every changed queue (concurrently per broker, each bounded)."""
        if not self.auto_commit:
            return
        await self._committer.commit_all([*self.process_queues.values(), *self.releasing.values()])
        try:
            await self.offset_store.flush()
        except OSError as exc:
            self.log.warning("offset_flush_failed", error=str(exc))

    # -- dispatch ----------------------------------------------------------------------

    def dispatch(self, pq: ProcessQueue, messages: list[ConsumerMessage]) -> None:
        if self._closing:
            return  # unsettled: never committed, so redelivered
        if self.config.orderly or self.pull_mode:
            pq.buffer.extend(messages)
            pq.notify()
            self._available.notify()
            return
        queue = self.work_queue
        if queue is None or queue.closed:
            return
        size = self.config.consume_batch_size if self.batch_mode else 1
        if size == 1:
            queue.put_many(messages)  # unwrapped: most handlers take one message
        else:
            queue.put_many(messages[i : i + size] for i in range(0, len(messages), size))

    async def settle(self, msg: ConsumerMessage, delay_level: int | None) -> None:
        """Finish a message: success commits past it; failure sends it back first."""
        if delay_level is None:
            self.finish(msg)
            return
        if msg._settled:
            return
        msg._settled = True
        pq = msg._pq
        if pq is None:
            return
        if self.config.message_model is MessageModel.BROADCASTING:
            # No shared retry topic in broadcasting: retry here, a bounded number of times.
            if msg.reconsume_times < self.config.broadcast_max_retries:
                msg.reconsume_times += 1
                msg._settled = False
                self._retry_locally(msg)
                return
            self.dropped_messages += 1
            self.log.warning(
                "broadcast_message_dropped",
                topic=msg.topic,
                queue=pq.mq.queue_id,
                offset=msg.queue_offset,
                attempts=msg.reconsume_times + 1,
            )
        else:
            try:
                sent = await self._send_back(pq, msg, delay_level)
            except BaseException:
                msg._settled = False  # interrupted: still unsettled, never committed
                raise
            if not sent:
                msg._settled = False
                self._retry_locally(msg)
                return
        pq.on_done(msg, msg._generation)

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

    async def _send_back(
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
        addr = await self.broker_addr(pq.mq)
        if addr is None:
            if raise_unreachable:
                raise ConnectionClosedError(f"no master broker of {pq.mq.broker_name} to send to")
            return False
        try:
            await self.client.broker.send_back(
                addr,
                msg,
                self.group,
                delay_level=delay_level,
                max_reconsume_times=self.config.reconsume_limit(),
            )
            return True
        except (RocketMQError, ClientClosedError) as exc:
            self.log.warning(
                "send_back_failed", topic=msg.topic, offset=msg.queue_offset, error=str(exc)
            )
            if raise_unreachable and not isinstance(exc, BrokerResponseError):
                raise
            return False

    async def send_to_dead_letter(
        self, pq: ProcessQueue, msg: ConsumerMessage, *, raise_unreachable: bool = False
    ) -> bool:
        """Send ``msg`` to the group's DLQ; False when it failed (see :meth:`_send_back`)."""
        return await self._send_back(pq, msg, -1, raise_unreachable=raise_unreachable)

    @property
    def closing(self) -> bool:
        return self._closing

    def _retry_locally(self, msg: ConsumerMessage) -> None:
        if self._tg is None or self._closing:
            return
        self._tg.start_soon(self._redeliver_later, msg)

    async def _redeliver_later(self, msg: ConsumerMessage) -> None:
        await anyio.sleep(self.config.local_retry_delay)
        pq = msg._pq
        if pq is not None and not pq.dropped:
            self.dispatch(pq, [msg])

    # -- iteration -------------------------------------------------------------------

    def __aiter__(self) -> AsyncIterator[ConsumerMessage]:
        return self.messages()

    def messages(self) -> AsyncGenerator[ConsumerMessage, None]:
        """Yield messages one by one (see :func:`aiorocket.consumer.iterate.messages`).

        A yielded message is acked when you ask for the next one (the loop body finished
        without raising). Take manual control with ``async with msg:``, ``msg.hold()``,
        ``await msg.ack()`` or ``await msg.nack()``. A message you leave unsettled (you
        broke out of the loop, or the body raised or was cancelled) is released when the
        iterator closes: the next iteration yields it again. It is never committed past
        before it is settled, so a restart or rebalance redelivers it.
        """
        if self.handler_fn is not None:
            raise ConfigError("this consumer has a handler; iterate a consumer without one")
        if self.config.orderly:
            raise ConfigError(_ORDERLY_NEEDS_HANDLER)
        if self.work_queue is None:
            raise ClientClosedError("start the consumer (async with) before iterating")
        return iterate.messages(self, self.work_queue)

    # -- introspection -----------------------------------------------------------------

    @property
    def abandoned_threads(self) -> int:
        """Synchronous handler threads given up by a timeout that are still running."""
        return self.handler_threads.abandoned if self.handler_threads else 0

    @property
    def abandoned_threads_total(self) -> int:
        """Synchronous handler threads given up by a timeout since the start."""
        return self.handler_threads.abandoned_total if self.handler_threads else 0

    def assignment(self) -> set[MessageQueue]:
        return {mq for mq, pq in self.process_queues.items() if not pq.dropped}

    @property
    def has_joined(self) -> bool:
        """True once a rebalance pass found this client among the group's members and
        computed its share of every subscribed topic (its first assignment, possibly
        empty when the group has more members than queues). Readiness checks use it."""
        return self._assigned

    async def wait_joined(self) -> None:
        """Wait until :attr:`has_joined` is true."""
        while not self._assigned:
            await self._assigned_signal.wait()

    def note_assigned(self) -> None:
        """Called by the rebalance after a pass that joined the group (see has_joined)."""
        if not self._assigned:
            self._assigned = True
            self._assigned_signal.notify()

    def observe_pulls(self, observer: PullObserver) -> None:
        """Call ``observer(queue, seconds, messages)`` after each pull that returned
        messages: the time from sending the pull request to its answer, and how many
        messages it brought (metrics use it: pull latency). Pulls that found nothing are
        left out: a long poll held by the broker measures the wait, not the broker.
        ``observer`` runs on the pull path: it must be quick and must not raise."""
        self.pull_observers.append(observer)

    def stats(self, *, advance: bool = True) -> list[QueueStats]:
        """Per-queue cache, running handlers, offsets, and rates since the previous call.

        ``advance=False`` reads the figures without starting a new rate interval, so a
        health endpoint polling them does not disturb the application's own rates.
        """
        stats, snapshot = queue_stats(self.process_queues, self._last_stats)
        if advance or self._last_stats is None:
            self._last_stats = snapshot
        return stats
