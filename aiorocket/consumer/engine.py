"""The consumer engine: builds the parts, owns their tasks, starts and stops them.

Everything runs in one task group the engine owns (entered by ``start``, left by
``close``):

* a heartbeat loop (every 30 s), a rebalance loop (every 20 s, at once when a broker
  says the group changed, and after the heartbeat on a new connection to a broker), an
  offset flusher (every 5 s) and, when orderly, the lock keeper: each stops when the
  engine closes;
* one pull task per assigned queue (ProcessQueue), each in its own cancel scope so a
  rebalance can stop exactly that queue;
* the delivery strategy's tasks (worker pool, orderly loops; see
  [`aiorocket.consumer.delivery`][]).

The parts share one [`ConsumerState`][aiorocket.consumer.state.ConsumerState] and are built with
exactly what they use; none of them knows the engine or the user-facing consumer.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Iterable, Sequence
from contextlib import AsyncExitStack
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Protocol

import anyio
import anyio.abc

from aiorocket._tasks import BackgroundTasks, close_bound
from aiorocket.client.instance import ClientInstance
from aiorocket.client.trace import RemotingTraceSender
from aiorocket.consumer.allocation import AllocateStrategy
from aiorocket.consumer.brokers import BrokerFinder
from aiorocket.consumer.committer import AutoCommit, OffsetCommitter
from aiorocket.consumer.config import MessageModel
from aiorocket.consumer.delivery import Delivery, DeliveryFactory, DeliveryParts
from aiorocket.consumer.filters import check_filters
from aiorocket.consumer.local_offsets import LocalFileOffsetStore, default_offset_dir
from aiorocket.consumer.locks import QueueLocks
from aiorocket.consumer.membership import Membership
from aiorocket.consumer.offset_store import OffsetStore, RemoteOffsetStore
from aiorocket.consumer.operator_requests import OperatorRequests
from aiorocket.consumer.puller import Puller
from aiorocket.consumer.rebalance import Rebalancer
from aiorocket.consumer.settle import RemotingSettler
from aiorocket.errors import ClientClosedError, NameServerUnavailableError
from aiorocket.message import MessageQueue, retry_topic
from aiorocket.namespace import unwrap_queue
from aiorocket.protocol.codes import RequestCode
from aiorocket.protocol.subscription import Subscription

if TYPE_CHECKING:
    from aiorocket.consumer.handler import Handler
    from aiorocket.consumer.process_queue import ProcessQueue
    from aiorocket.consumer.state import ConsumerState
    from aiorocket.protocol.command import RemotingCommand
    from aiorocket.received import ConsumerMessage
    from aiorocket.remoting.connection import Connection

__all__ = ["Engine", "RebalanceListener"]


class RebalanceListener(Protocol):
    """Awaited around queue ownership changes (like aiokafka's ConsumerRebalanceListener).

    ``on_queues_revoked`` runs before a dropped queue's offset is flushed (and, when
    orderly, before its lock is released); ``on_queues_assigned`` after new queues
    started pulling. Each is awaited at most once per rebalance pass, with the queues of
    every topic that changed in it (as aiokafka does per rebalance).
    """

    async def on_queues_revoked(self, queues: list[MessageQueue]) -> None: ...

    async def on_queues_assigned(self, queues: list[MessageQueue]) -> None: ...


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


class Engine:
    """Runs one consumer: its client, rebalance, pulls, delivery and offsets.

    Parameters
    ----------
    state:
        The consumer's shared state (subscriptions and mode set before ``start``).
    namesrv:
        NameServer addresses.
    delivery:
        Builds the delivery strategy from the engine's parts, once, at start.
    handler:
        The application's handler, if any (operators' CONSUME_MESSAGE_DIRECTLY runs it).
    allocate:
        The queue allocation strategy.
    listener:
        Awaited around queue ownership changes.
    client_id:
        This client's id (default: made by the client).
    instance_name:
        The instance name: names a broadcasting consumer's offset file.
    """

    def __init__(
        self,
        state: ConsumerState,
        namesrv: Sequence[str],
        *,
        delivery: DeliveryFactory,
        handler: Handler | None = None,
        allocate: AllocateStrategy,
        listener: RebalanceListener | None = None,
        client_id: str | None = None,
        instance_name: str | None = None,
    ) -> None:
        self.state = state
        self._namesrv = list(namesrv)
        self._make_delivery = delivery
        self._handler = handler
        self._allocate = allocate
        self.listener = listener
        self._client_id = client_id
        self._instance_name = instance_name
        self._client: ClientInstance | None = None
        self._tg: anyio.abc.TaskGroup | None = None
        self._loops_scope: anyio.CancelScope | None = None
        #: the started engine's parts, unwound by the close (aiorocket._tasks)
        self._stack: AsyncExitStack | None = None
        #: the close lets running handlers finish (a failed start does not)
        self._graceful = False
        self._closed = False
        # Built in start(): they need the client.
        self.delivery: Delivery
        self.rebalancer: Rebalancer
        self.commits: AutoCommit
        self.offset_store: OffsetStore
        self.finder: BrokerFinder
        self._membership: Membership
        self._locks: QueueLocks | None = None
        self._puller: Puller
        self._settler: RemotingSettler
        self._operator_requests: OperatorRequests

    @property
    def client(self) -> ClientInstance:
        if self._client is None:
            raise ClientClosedError("consumer is not started")
        return self._client

    @property
    def started(self) -> bool:
        return self._client is not None

    # -- lifecycle -----------------------------------------------------------------

    async def start(self) -> None:
        """Connect, join the group, take the first assignment and start consuming."""
        if self._client is not None or self._closed:
            raise ClientClosedError("a consumer can be started once")
        state = self.state
        cfg = state.config
        if cfg.message_model is MessageModel.CLUSTERING and not state.pull_mode:
            retry = retry_topic(state.group)
            state.subscriptions.setdefault(retry, Subscription(retry))
        state.started_at_ms = time.time_ns() // 1_000_000
        client = ClientInstance(
            self._namesrv,
            client_id=self._client_id,
            request_timeout=cfg.request_timeout,
            route_refresh_interval=cfg.route_refresh_interval,
            credentials=cfg.credentials,
            tls=cfg.tls,
            address_map=cfg.address_map,
        )
        # One stack (aiorocket._tasks): the client, the background tasks, the close's
        # steps; a failed start unwinds it here, the close later, in reverse order.
        try:
            async with AsyncExitStack() as stack:
                await stack.enter_async_context(client)
                if state.tracer is not None:  # flushed after the handlers end, before the client
                    sender = RemotingTraceSender(client, state.group)
                    await stack.enter_async_context(state.tracer.running(sender))
                await _require_namesrv(client, state.subscriptions)
                await check_filters(client, state.group, list(state.subscriptions.values()))
                await self._build(client)
                self._client = client
                tg = self._tg = await stack.enter_async_context(BackgroundTasks())
                self._loops_scope = anyio.CancelScope()
                stack.push_async_callback(self._wind_down)
                await self._membership.send_heartbeats(starting=True)
                # Later connections (a broker restarted, a connection lost and re-opened)
                # get a heartbeat as soon as they are up.
                client.pool.add_connect_listener(self._on_connected)
                client.pool.add_disconnect_listener(self._on_disconnected)
                await self.delivery.start(tg)
                await self.rebalancer.rebalance()
                tg.start_soon(self._run_loops)
                self._stack = stack.pop_all()
        except BaseException:
            if self._client is not None:  # past the connection: not to be started again
                self._closed = True
                self._tg = None
                state.log.info("consumer_closed", graceful=False)
            raise
        state.log.info("consumer_started", topics=sorted(state.subscriptions))

    async def _build(self, client: ClientInstance) -> None:
        """Make the parts, each with what it uses."""
        state = self.state
        cfg = state.config
        state.log = state.log.bind(client_id=client.client_id)
        if cfg.message_model is MessageModel.BROADCASTING:
            directory = Path(cfg.offset_store_dir) if cfg.offset_store_dir else default_offset_dir()
            local = LocalFileOffsetStore(directory, self._instance_name or "DEFAULT", state.group)
            await local.load()
            self.offset_store = local
        else:
            self.offset_store = RemoteOffsetStore(client, state.group)
        self.finder = BrokerFinder(client.namesrv)
        if cfg.orderly:
            self._locks = QueueLocks(state, client.broker, self.finder, client.client_id)
        committer = OffsetCommitter(
            self.offset_store,
            state.log,
            bound=close_bound(cfg.request_timeout),
            lock_held=self._locks.valid if self._locks is not None else None,
        )
        self.commits = AutoCommit(state, committer, self.offset_store)
        self._membership = Membership(state, client.client_id, client.broker, client.namesrv)
        settler = self._settler = RemotingSettler(
            state, client.broker, self.finder, self._retry_later
        )
        self.delivery = self._make_delivery(
            DeliveryParts(
                state=state,
                settler=settler,
                ordered=cfg.orderly,
                commits=self.commits,
                locks=self._locks,
            )
        )
        self._puller = Puller(
            state,
            client.broker,
            self.finder,
            self._membership,
            settler,
            self.delivery.deliver,
            self.commits,
            needs_lock=self._locks is not None,
        )
        self.rebalancer = Rebalancer(
            state,
            client.client_id,
            client.broker,
            client.namesrv,
            client.pool,
            self._membership,
            self.finder,
            self.offset_store,
            self._allocate,
            self,
            self._locks,
        )
        client.dispatcher.register(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, self._on_ids_changed)
        self._operator_requests = OperatorRequests(
            state, client.namesrv.addrs, self._handler, self.commits
        )
        self._operator_requests.register(client.dispatcher)

    async def close(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
        *,
        graceful: bool,
    ) -> None:
        """Stop pulling, drain delivery (bounded), flush offsets, unregister, stop tasks.

        What was queued and never started stays uncommitted; running handlers finish
        within ``shutdown_timeout``; the cut ones are handed back (``hand_back``); the
        offsets are committed before unregistering (and unlocking), so the members that
        take the queues next start after what this one finished."""
        self._closed = True
        self._graceful = graceful
        self._stop_taking()
        stack, self._stack = self._stack, None
        try:
            if stack is not None:
                await stack.aclose()  # body errors propagate unwrapped
        finally:
            self._tg = None
            self.state.log.info("consumer_closed", graceful=graceful)

    def _stop_taking(self) -> None:
        """Stop the loops and every pull: nothing new is received from now on."""
        state = self.state
        state.closing = True
        if self._loops_scope is not None:
            self._loops_scope.cancel()
        for pq in state.process_queues.values():
            if pq.pull_scope is not None:
                pq.pull_scope.cancel()

    async def _wind_down(self) -> None:
        """The close's steps before the background tasks stop (``close``'s docstring)."""
        state = self.state
        self._stop_taking()
        # What was never handed out stays uncommitted: the next owner delivers it.
        self.delivery.stop()
        cfg = state.config
        with anyio.CancelScope(shield=True):
            cut = await self.delivery.drain(graceful=self._graceful)
            if cut:  # before the commit: it may move past them
                await self._settler.hand_back(cut, close_bound(cfg.request_timeout))
            # Before unregistering: the members that take our queues when the broker
            # tells them we left read these offsets.
            await self.commits.commit_all()  # bounded per broker
            with anyio.move_on_after(close_bound(cfg.request_timeout)):
                if self._locks is not None:
                    await self._locks.unlock_at_close([*state.process_queues, *state.releasing])
                await self._membership.unregister()

    async def _run_loops(self) -> None:
        assert self._loops_scope is not None
        with self._loops_scope:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._heartbeat_loop)
                tg.start_soon(self.rebalancer.run)
                tg.start_soon(self.commits.run)
                if self._locks is not None:
                    tg.start_soon(self._locks.keep)

    async def _heartbeat_loop(self) -> None:
        interval = self.state.config.heartbeat_interval
        while True:
            await anyio.sleep(interval)
            await self._membership.send_heartbeats()

    def _on_connected(self, address: str) -> None:
        # A broker just (re)connected to may have restarted: its member list is asked
        # last for a while (see rebalance._MemberLists).
        self.rebalancer.memory.connected_at[address] = anyio.current_time()
        if self._tg is not None and not self.state.closing:
            self._tg.start_soon(self._rejoin, address)

    async def _rejoin(self, address: str) -> None:
        """Heartbeat on a new connection to a broker, then rebalance at once if it took
        the heartbeat. The group's change notices (NOTIFY_CONSUMER_IDS_CHANGED) go to the
        channels the broker holds for us; while ours was silent (half-open, reset) they
        went nowhere, and a member that missed one keeps queues another member took
        until its next pass (``rebalance_interval``, 20 s): both consume them, and its
        commits move the newcomer's offset back. The Java client does the same (5.x
        MQClientInstance's channel listener: a heartbeat on an active channel, then
        ``rebalanceImmediately``)."""
        if await self._membership.heartbeat_to(address) and not self.state.closing:
            self.state.request_rebalance()

    def _on_disconnected(self, address: str) -> None:
        """The broker at ``address`` unregistered us with that connection: the queues it
        hosts may have had another owner since, so their offsets are checked before they
        are committed again (see ProcessQueue.offset_unverified)."""
        state = self.state
        if state.config.message_model is not MessageModel.CLUSTERING:
            return  # offsets of our own, in a local file
        namesrv = self._client.namesrv if self._client is not None else None
        for pq in [*state.process_queues.values(), *state.releasing.values()]:
            route = namesrv.cached_route(pq.mq.topic) if namesrv is not None else None
            data = route.brokers.get(pq.mq.broker_name) if route is not None else None
            if data is None or address in data.broker_addrs.values():
                pq.mark_unverified()

    async def _on_ids_changed(self, conn: Connection, cmd: RemotingCommand) -> None:
        if cmd.ext_fields.get("consumerGroup") == self.state.group:
            self.state.log.debug("consumer_ids_changed", broker=conn.address)
            self.state.request_rebalance()
        return None

    # -- QueueControl (the rebalancer's view of the engine) ------------------------------

    async def start_queue(self, pq: ProcessQueue, sub: Subscription) -> None:
        """Start pulling a newly owned queue (and its delivery, e.g. an orderly loop)."""
        assert self._tg is not None
        await self._tg.start(functools.partial(self._puller.run, pq, sub))
        self.delivery.start_queue(pq)

    async def revoke(self, pqs: list[ProcessQueue]) -> None:
        """Drop queues: stop pulling, let delivery quiesce (bounded), commit, forget."""
        state = self.state
        await self._notify_listener("on_queues_revoked", [pq.mq for pq in pqs])
        for pq in pqs:
            pq.drop()
        await self.delivery.quiesce(pqs)
        await self.commits.commit_queues(pqs)
        for pq in pqs:
            if state.process_queues.get(pq.mq) is pq:
                del state.process_queues[pq.mq]
        await self.delivery.release(pqs)

    async def assigned(self, mqs: list[MessageQueue]) -> None:
        await self._notify_listener("on_queues_assigned", mqs)

    async def _notify_listener(self, callback: str, mqs: list[MessageQueue]) -> None:
        """Await the listener's ``callback``; an exception it raises is logged, and the
        rebalance goes on (as aiokafka does): a listener bug must not stop consuming."""
        if self.listener is None:
            return
        namespace = self.state.config.namespace
        if namespace:  # the application's names
            mqs = [unwrap_queue(namespace, mq) for mq in mqs]
        try:
            await getattr(self.listener, callback)(mqs)
        except Exception as exc:
            self.state.log.error(
                "rebalance_listener_failed",
                callback=callback,
                topics=sorted({mq.topic for mq in mqs}),
                queues=[str(mq) for mq in mqs],
                error=repr(exc),
                exc_info=exc,
            )

    # -- local retries -------------------------------------------------------------------

    def _retry_later(self, msg: ConsumerMessage, after: float) -> None:
        if self._tg is None or self.state.closing:
            return
        self._tg.start_soon(self._redeliver_later, msg, after)

    async def _redeliver_later(self, msg: ConsumerMessage, after: float) -> None:
        await anyio.sleep(after)
        pq = msg._pq
        if pq is not None and not pq.dropped:
            self.delivery.deliver(pq, [msg])
