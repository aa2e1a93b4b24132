"""The remoting producer engine: a NameServer, brokers, and the remoting protocol.

``RemotingProducer`` is the ``ProducerBackend``
that ``aiorocket.producer.Producer`` uses when given NameServer addresses. It owns a
``ClientInstance`` (connections, route refresher) and a task group running the
heartbeat loop, the transaction check-back workers and the auto-batcher's requests.

However many tasks send at once, at most ``max_in_flight`` requests wait for brokers
(see ``aiorocket.producer.sender``); ``start_send`` waits for a slot *before*
spawning, so a loop feeding a task group is held back too (with the auto-batcher, for
one of ``max_in_flight`` message slots: ``aiorocket.producer.accumulate``).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Awaitable, Sequence
from contextlib import AsyncExitStack
from types import TracebackType
from typing import Any

import anyio
import anyio.abc

from aiorocket._tasks import BackgroundTasks, close_bound
from aiorocket._trace import Tracer
from aiorocket.client.instance import ClientInstance
from aiorocket.client.recall import RecallHandle, recall_message
from aiorocket.client.results import SendResult, SendStatus
from aiorocket.client.trace import RemotingTraceSender
from aiorocket.errors import (
    ClientClosedError,
    ConfigError,
    NoRouteError,
    RequestTimeoutError,
    RocketMQError,
)
from aiorocket.message import (
    PROPERTY_PRODUCER_GROUP,
    PROPERTY_SHARDING_KEY,
    PROPERTY_TRANSACTION_PREPARED,
    Message,
    MessageExt,
)
from aiorocket.namespace import wrap, wrap_queue
from aiorocket.producer.accumulate import AutoBatcher
from aiorocket.producer.backend import ResultCallback, report
from aiorocket.producer.batch import prepare_batch, split_batch_result
from aiorocket.producer.config import ProducerConfig
from aiorocket.producer.fault import LatencyFaultTolerance
from aiorocket.producer.membership import Membership
from aiorocket.producer.prepare import SYSFLAG_TRANSACTION_PREPARED, Outgoing, prepare_message
from aiorocket.producer.reply import Replies, create_reply, reply_topic, request_properties
from aiorocket.producer.routes import PublishRoutes
from aiorocket.producer.selectors import QueueSelector
from aiorocket.producer.sender import Plan, Sender
from aiorocket.producer.trace import SendTrace
from aiorocket.producer.transaction import (
    PROPERTY_CHECK_IMMUNITY,
    CheckBacks,
    LocalTransaction,
    TransactionChecker,
    TransactionResult,
    TransactionState,
    end_transaction,
)
from aiorocket.protocol.codes import RequestCode

__all__ = ["RemotingProducer"]


class RemotingProducer:
    """The remoting engine of a ``Producer`` (module docstring).

    ``fault`` is the per-broker latency record; it may be replaced before ``start``.
    """

    def __init__(
        self,
        group: str,
        namesrv: list[str],
        *,
        config: ProducerConfig,
        checker: TransactionChecker | None,
        client_id: str | None,
        topics: Sequence[str] = (),
        log: Any,
        tracer: Tracer | None = None,
    ) -> None:
        self.group = group
        self.config = config
        self.fault = LatencyFaultTolerance()
        self.log = log
        self._namesrv = namesrv
        self._client_id = client_id
        self._checker = checker
        self._topics = tuple(topics)
        self._tracer = tracer
        self._client: ClientInstance | None = None
        self._tg: anyio.abc.TaskGroup | None = None
        #: the started producer's parts, unwound by the close (aiorocket._tasks)
        self._stack: AsyncExitStack | None = None
        self._sender: Sender | None = None
        self._batcher: AutoBatcher | None = None
        self._membership: Membership | None = None
        self._checks: CheckBacks | None = None
        self._replies: Replies | None = None
        self._reply_config: ProducerConfig | None = None
        self._started = False
        self._closed = False

    # -- lifecycle -----------------------------------------------------------------

    @property
    def client(self) -> ClientInstance:
        if self._client is None:
            raise ClientClosedError("producer is not started")
        return self._client

    @property
    def in_flight(self) -> int:
        return 0 if self._sender is None else self._sender.in_flight

    @property
    def batcher(self) -> AutoBatcher | None:
        return self._batcher

    @property
    def stall_retries(self) -> int:
        """Sends abandoned on a stalled broker and retried on another (each may be
        stored twice): ``aiorocket.producer.stall``."""
        stall = None if self._sender is None else self._sender.stall
        return 0 if stall is None else stall.stalls

    @property
    def membership(self) -> Membership | None:
        return self._membership

    @property
    def checks(self) -> CheckBacks | None:
        return self._checks

    async def start(self) -> None:
        if self._started:
            raise ClientClosedError("a producer can be started once")
        self._started = True
        cfg = self.config
        client = ClientInstance(
            self._namesrv,
            client_id=self._client_id,
            request_timeout=cfg.request_timeout,
            route_refresh_interval=cfg.route_refresh_interval,
            credentials=cfg.credentials,
            tls=cfg.tls,
            address_map=cfg.address_map,
        )
        # One stack (aiorocket._tasks): a failed start unwinds it here, the close later,
        # every exit in reverse order even when one raises.
        try:
            async with AsyncExitStack() as stack:
                await stack.enter_async_context(client)
                self._client = client
                if self._tracer is not None:  # flushed after the sends end, before the client
                    sender = RemotingTraceSender(client, self.group)
                    await stack.enter_async_context(self._tracer.running(sender))
                self.log = self.log.bind(client_id=client.client_id)
                routes = PublishRoutes(
                    client.namesrv, create_topic_key=cfg.create_topic_key,
                    default_topic_queue_nums=cfg.default_topic_queue_nums,
                    borrowed_for=cfg.route_refresh_interval, log=self.log,
                )  # fmt: skip
                group = wrap(cfg.namespace, self.group)  # the broker's name of the group
                self._membership = membership = Membership(
                    client.broker, client.client_id, group, routes.broker_addrs, self.log
                )
                self._sender = Sender(
                    client.broker, routes, membership,
                    group=group, config=cfg, fault=self.fault, log=self.log,
                )  # fmt: skip
                tg = self._tg = await stack.enter_async_context(BackgroundTasks())
                # Unwound before the tasks stop: the heartbeat loop, left running, sends no
                # more (the membership is leaving), and the unregister waits for the end
                # of one under way (not cut by the loop's cancellation, it would end
                # shielded meanwhile, its loss of a connection unknown to the unregister).
                stack.push_async_callback(self._unregister)
                if cfg.auto_batch:
                    self._batcher = AutoBatcher(self._sender, cfg, self.log)
                    stack.push_async_callback(self._drain_batcher)
                    self._batcher.start(tg)
                self._checks = checks = CheckBacks(
                    client.broker, group, self._checker,
                    concurrency=cfg.check_concurrency, backlog=cfg.check_backlog, log=self.log,
                    namespace=cfg.namespace,
                )  # fmt: skip
                if self._tracer is not None:
                    checks.on_answered = SendTrace(self._tracer, self.group).checked
                code = RequestCode.CHECK_TRANSACTION_STATE
                client.dispatcher.register(code, checks.on_request)
                stack.callback(client.dispatcher.unregister, code, checks.on_request)
                self._replies = replies = Replies(self.log)
                code = RequestCode.PUSH_REPLY_MESSAGE_TO_CLIENT
                client.dispatcher.register(code, replies.on_push)
                stack.callback(client.dispatcher.unregister, code, replies.on_push)
                tg.start_soon(membership.run, cfg.heartbeat_interval)
                tg.start_soon(checks.run)
                for topic in self._topics:  # the first sends need not ask the NameServer
                    with contextlib.suppress(RocketMQError):  # a send will say what is wrong
                        await routes.get(wrap(cfg.namespace, topic))
                self._stack = stack.pop_all()
        except BaseException:
            if self._client is not None:  # past the connection: closed, not to be used
                self._closed = True
                self._tg = None
            raise

    async def close(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Stop taking checks, drain the batches (bounded), unregister the group
        (bounded), stop the background tasks, close the client."""
        self._closed = True
        stack, self._stack = self._stack, None
        try:
            if stack is not None:
                await stack.aclose()  # the body's exception propagates unwrapped
        finally:
            self._tg = None

    async def _drain_batcher(self) -> None:
        assert self._batcher is not None
        # Batches carry other callers' messages: let them finish, within bounds.
        with anyio.CancelScope(shield=True), anyio.move_on_after(self.config.shutdown_timeout):
            await self._batcher.drain()
        self._batcher.close()

    async def _unregister(self) -> None:
        assert self._membership is not None
        # The close's network step, bounded as a consumer's (``close_bound``), not by
        # ``shutdown_timeout`` (the drain's): a heartbeat under way awaited and a try on
        # a new connection, or two tries, fit in it.
        limit = close_bound(self.config.request_timeout)
        with anyio.CancelScope(shield=True), anyio.move_on_after(limit):
            await self._membership.unregister_all()

    def _open_sender(self) -> Sender:
        if self._closed:
            raise ClientClosedError("producer is closed")
        if self._sender is None:
            raise ClientClosedError("producer is not started (use 'async with')")
        return self._sender

    # -- sending -------------------------------------------------------------------

    def _plan(
        self, msg: Message, sharding_key: object, selector: QueueSelector | None, arg: object
    ) -> tuple[Sender, Outgoing, Plan]:
        sender = self._open_sender()
        plan = sender.plan(msg, sharding_key, selector, arg)
        extra = None if sharding_key is None else {PROPERTY_SHARDING_KEY: str(sharding_key)}
        return sender, prepare_message(msg, self.config, extra_properties=extra), plan

    def _batcher_for(
        self, msg: Message, sharding_key: object, selector: QueueSelector | None
    ) -> AutoBatcher | None:
        """The auto-batcher, if ``msg`` may share a request."""
        batcher = self._batcher
        if batcher is None or sharding_key is not None or selector is not None:
            return None
        return batcher if batcher.accepts(msg) else None

    def send(
        self, msg: Message, *, timeout: float | None, sharding_key: object,
        selector: QueueSelector | None, selector_arg: object,
    ) -> Awaitable[SendResult]:  # fmt: skip
        """The send's coroutine (the batcher's, or the sender's taking its own slot),
        awaited by ``Producer.send``: no coroutine of its own around it (a plain send's
        frames: benchmarks/README.md, "The plain send, round 1"); a message or option
        found wrong raises here, before any slot is taken."""
        batcher = self._batcher_for(msg, sharding_key, selector)
        if batcher is not None:
            return batcher.send(msg, self._open_sender().deadline(timeout))
        sender, out, plan = self._plan(msg, sharding_key, selector, selector_arg)
        return sender.send(out, plan, sender.deadline(timeout), slot=True)

    def start_send(
        self, task_group: anyio.abc.TaskGroup, msg: Message, *,
        on_result: ResultCallback | None, timeout: float | None, sharding_key: object,
        selector: QueueSelector | None, selector_arg: object,
    ) -> Awaitable[None] | None:  # fmt: skip
        # ``_batcher_for``, inline (a call a message)
        batcher = self._batcher
        if (
            batcher is None
            or sharding_key is not None
            or selector is not None
            or not batcher.accepts(msg)
        ):
            return self._start_unbatched(
                task_group, msg, on_result, timeout, sharding_key, selector, selector_arg
            )
        # It shares requests, as concurrent send() calls do; no coroutine while a slot
        # is free (its creation and run were a measurable share of a batched message).
        # ``_open_sender().deadline(timeout)`` without their two calls a message, the
        # common case (the config's ``send_timeout``, checked positive) inline
        sender = self._sender
        if sender is None or self._closed:
            sender = self._open_sender()  # raises
        if timeout is None:
            deadline = sender.now() + self.config.send_timeout
        else:
            deadline = sender.deadline(timeout)
        waiting = batcher.start_nowait(task_group, msg, deadline, on_result)
        return None if waiting is None else batcher.start_when_free(task_group, waiting)

    async def _start_unbatched(
        self, task_group: anyio.abc.TaskGroup, msg: Message, on_result: ResultCallback | None,
        timeout: float | None, sharding_key: object, selector: QueueSelector | None,
        selector_arg: object,
    ) -> None:  # fmt: skip
        sender, out, plan = self._plan(msg, sharding_key, selector, selector_arg)
        deadline = sender.deadline(timeout)
        if not sender.acquire_nowait():
            await sender.acquire(deadline)
        try:
            task_group.start_soon(self._send_in_slot, sender, out, plan, deadline, on_result)
        except BaseException:
            sender.release()
            raise

    @staticmethod
    async def _send_in_slot(
        sender: Sender, out: Outgoing, plan: Plan, deadline: float,
        on_result: ResultCallback | None,
    ) -> None:  # fmt: skip
        try:
            result = await sender.send(out, plan, deadline)
        finally:
            sender.release()
        await report(on_result, result)

    async def send_oneway(
        self, msg: Message, *, timeout: float | None, sharding_key: object,
        selector: QueueSelector | None, selector_arg: object,
    ) -> None:  # fmt: skip
        sender, out, plan = self._plan(msg, sharding_key, selector, selector_arg)
        deadline = sender.deadline(timeout)
        await sender.acquire(deadline)
        try:
            await sender.send_oneway(out, plan, deadline)
        finally:
            sender.release()

    async def send_batch(
        self, messages: Sequence[Message], *, timeout: float | None, sharding_key: object,
        selector: QueueSelector | None, selector_arg: object,
    ) -> list[SendResult]:  # fmt: skip
        sender = self._open_sender()
        out, ids = prepare_batch(messages, self.config)
        plan = sender.plan(messages[0], sharding_key, selector, selector_arg)
        deadline = sender.deadline(timeout)
        await sender.acquire(deadline)
        try:
            result = await sender.send(out, plan, deadline, batch=True)
        finally:
            sender.release()
        return split_batch_result(result, ids)

    # -- request-reply (aiorocket.producer.reply) ------------------------------------

    @property
    def replies(self) -> Replies | None:
        return self._replies

    async def _send_unbatched(
        self, msg: Message, extra: dict[str, str], deadline: float, *, config: ProducerConfig
    ) -> SendResult:
        """One message in a request of its own (a request or a reply: not in a batch,
        whose request code is neither)."""
        sender = self._open_sender()
        plan = sender.plan(msg, None, None, None)
        out = prepare_message(msg, config, extra_properties=extra)
        await sender.acquire(deadline)
        try:
            return await sender.send(out, plan, deadline)
        finally:
            sender.release()

    async def request(self, msg: Message, *, timeout: float | None) -> MessageExt:
        sender = self._open_sender()
        replies = self._replies
        assert replies is not None
        deadline = sender.deadline(timeout)
        budget = deadline - sender.now()
        topic = wrap(self.config.namespace, msg.topic)
        with anyio.move_on_after(budget) as scope:
            await self._register_for_replies(sender, topic)
        if scope.cancelled_caught:
            raise RequestTimeoutError(f"request to {msg.topic!r}: registering took its timeout")
        correlation_id = replies.new_id()
        extra = request_properties(correlation_id, self.client.client_id, budget)
        with replies.expect(correlation_id) as waiter:
            await self._send_unbatched(msg, extra, deadline, config=self.config)
            return await replies.wait(waiter, correlation_id, max(0.0, deadline - sender.now()))

    async def _register_for_replies(self, sender: Sender, topic: str) -> None:
        """Be registered, before the request leaves, on every broker its reply can reach:
        a broker pushes a reply only on the connection our client id heartbeats on, and
        the replier may send it to any broker of the reply topic of the request broker's
        cluster. Those topics' routes join the producer's, so the heartbeats keep them."""
        membership = self._membership
        assert membership is not None
        route = (await sender.routes.get(topic)).route
        addrs = set(route.all_master_addrs().values())
        for cluster in sorted({b.cluster for b in route.broker_datas if b.cluster}):
            try:
                replies_route = (await sender.routes.get(reply_topic(cluster))).route
            except RocketMQError as exc:  # the request's brokers are registered anyway
                self.log.warning("reply_topic_unknown", cluster=cluster, error=str(exc))
                continue
            addrs.update(replies_route.all_master_addrs().values())
        async with anyio.create_task_group() as tg:
            for addr in sorted(addrs):
                tg.start_soon(membership.ensure, addr)

    async def reply(
        self, request: MessageExt, body: bytes, *, properties: dict[str, str] | None,
        timeout: float | None,
    ) -> SendResult:  # fmt: skip
        out = create_reply(request, body, properties=properties)
        sender = self._open_sender()
        if self._reply_config is None:
            # The cluster's reply topic is the broker's own, in no namespace: not wrapped.
            self._reply_config = dataclasses.replace(self.config, namespace="")
        deadline = sender.deadline(timeout)
        return await self._send_unbatched(out, {}, deadline, config=self._reply_config)

    # -- transactions --------------------------------------------------------------

    async def send_in_transaction(
        self, msg: Message, local_transaction: LocalTransaction, *, timeout: float | None
    ) -> TransactionResult:
        result = await self._send_half(msg, self.group, {}, timeout)
        addr = await self._open_sender().addr_of(result.queue)
        if result.status is not SendStatus.SEND_OK:
            state = TransactionState.ROLLBACK
        else:
            assert self._membership is not None
            await self._membership.ensure(addr)  # so that a check-back can reach us
            try:
                state = await local_transaction(msg, result)
                if not isinstance(state, TransactionState):
                    raise ConfigError(f"local transaction returned {state!r}, not a state")
            except Exception:
                await self._end(addr, result, TransactionState.UNKNOWN)
                raise
        await self._end(addr, result, state)
        return TransactionResult(result, state)

    async def send_prepared(
        self, msg: Message, *, producer_group: str | None, check_immunity: int | None,
        timeout: float | None,
    ) -> SendResult:  # fmt: skip
        """A half message left open (``Producer.send_prepared``)."""
        extra = {} if check_immunity is None else {PROPERTY_CHECK_IMMUNITY: str(check_immunity)}
        return await self._send_half(msg, producer_group or self.group, extra, timeout)

    async def _send_half(
        self, msg: Message, group: str, extra: dict[str, str], timeout: float | None
    ) -> SendResult:
        if msg.delay_level or msg.deliver_time_ms is not None:
            raise ConfigError("transactional messages cannot be delayed")
        sender = self._open_sender()
        extra = {
            **extra,
            PROPERTY_TRANSACTION_PREPARED: "true",
            PROPERTY_PRODUCER_GROUP: wrap(self.config.namespace, group),
        }
        out = prepare_message(
            msg, self.config, extra_properties=extra, sys_flag=SYSFLAG_TRANSACTION_PREPARED
        )
        # One attempt (as over gRPC, and as Java's transactional send): a second half
        # message after one that may be stored would be a second transaction, of which
        # one would be ended and the other left to the check-back (which may commit it).
        plan = sender.plan(msg, None, None, None)
        if plan.attempts != 1:
            plan = sender.round_robin_once if not plan.pinned else Plan(plan.choose, 1, True)
        deadline = sender.deadline(timeout)
        if not sender.acquire_nowait():
            await sender.acquire(deadline)
        try:
            return await sender.send(out, plan, deadline)
        finally:
            sender.release()

    async def accept_checks(self, *topics: str) -> None:
        """Heartbeat the brokers of ``topics`` now (``Producer.accept_checks``)."""
        sender = self._open_sender()
        assert self._membership is not None
        for topic in topics:
            await sender.routes.get(wrap(self.config.namespace, topic))
        await self._membership.heartbeat_all()

    async def recall(self, topic: str, recall_handle: str) -> str:
        """RECALL_MESSAGE to the broker the handle names (``Producer.recall``)."""
        sender = self._open_sender()
        handle = RecallHandle.parse(recall_handle)
        wire_topic = wrap(self.config.namespace, topic)
        route = (await sender.routes.get(wire_topic)).route
        addr = route.master_addr(handle.broker_name)
        if addr is None:
            raise NoRouteError(f"broker {handle.broker_name} of the recall handle has no master")
        return await recall_message(
            self.client.broker, addr, wrap(self.config.namespace, self.group), wire_topic,
            recall_handle,
        )  # fmt: skip

    async def _end(self, addr: str, result: SendResult, state: TransactionState) -> None:
        namespace = self.config.namespace
        if namespace:  # the broker's names
            result = dataclasses.replace(result, queue=wrap_queue(namespace, result.queue))
        try:
            await end_transaction(
                self.client.broker, addr, wrap(namespace, self.group), result, state
            )
        except RocketMQError as exc:  # the broker will ask the checker instead
            self.log.warning(
                "end_transaction_failed", broker=addr, msg_id=result.msg_id, error=str(exc)
            )
