"""The producer: lifecycle and the public send API (plain, ordered, batch, transactional).

``async with Producer(group, namesrv=...)`` owns a ``ClientInstance`` (connections,
route refresher) and a task group running the heartbeat loop and the transaction
check-back workers; leaving the block unregisters the group and stops them all.

However many tasks send at once, at most ``max_in_flight`` requests wait for brokers
(see [`aiorocket.producer.sender`][]); ``Producer.start_send`` waits for a slot
*before* spawning, so a loop feeding a task group is held back too.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Awaitable, Callable, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc

from aiorocket._log import get_logger
from aiorocket._settings import apply_settings, check_group
from aiorocket._transport import Transport, choose_transport
from aiorocket.client.instance import ClientInstance
from aiorocket.client.namesrv import namesrv_addrs
from aiorocket.client.results import SendResult, SendStatus
from aiorocket.errors import (
    ClientClosedError,
    ConfigError,
    RocketMQError,
    UnsupportedTransportError,
)
from aiorocket.message import (
    PROPERTY_PRODUCER_GROUP,
    PROPERTY_SHARDING_KEY,
    PROPERTY_TRANSACTION_PREPARED,
    Message,
)
from aiorocket.namespace import wrap, wrap_queue
from aiorocket.producer.accumulate import AutoBatcher
from aiorocket.producer.batch import prepare_batch, split_batch_result
from aiorocket.producer.config import ProducerConfig
from aiorocket.producer.fault import LatencyFaultTolerance
from aiorocket.producer.membership import Membership
from aiorocket.producer.prepare import SYSFLAG_TRANSACTION_PREPARED, Outgoing, prepare_message
from aiorocket.producer.routes import PublishRoutes
from aiorocket.producer.selectors import QueueSelector
from aiorocket.producer.sender import Plan, Sender
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

if TYPE_CHECKING:
    from aiorocket.grpc import GrpcOptions
    from aiorocket.grpc._batcher import GrpcBatcher
    from aiorocket.grpc._producer import GrpcProducer

__all__ = [
    "Producer",
    "ResultCallback",
    "Transport",
]

ResultCallback = Callable[[SendResult], "Awaitable[None] | None"]


class Producer:
    """Sends messages for one producer group.

    ```python
    async with Producer("my-group", namesrv="127.0.0.1:9876") as producer:
        result = await producer.send(Message("orders", b"paid"))
        print(result.msg_id, result.queue, result.queue_offset)
    ```

    Over a RocketMQ 5.x Proxy's gRPC endpoint instead of a NameServer (``grpc`` extra,
    asyncio only): ``Producer(group, proxy="host:8081")`` or
    ``Producer(group, "host:8081", transport="grpc")``. The Proxy picks the queue, so
    ``selector=``, oneway sends, auto-batching and delay levels raise
    [`UnsupportedTransportError`][aiorocket.errors.UnsupportedTransportError] there
    (``sharding_key`` is the FIFO message group; ``deliver_time_ms`` delays).

    Parameters
    ----------
    group:
        The producer group (brokers ask a member of it to check back transactions).
    namesrv:
        NameServer addresses (``"host:9876"``, ``"a:9876;b:9876"`` or a sequence);
        default: ``$AIOROCKET_NAMESRV_ADDR``. With ``transport="grpc"``: the Proxy
        endpoint.
    config:
        A ``ProducerConfig``; keyword ``settings`` override its fields.
    transaction_checker:
        Answers the brokers' check-backs of transactional messages (over gRPC: the
        Proxy's orphaned-transaction recovery commands).
    client_id:
        This client's id (default ``<ip>@<pid>#<random>``).
    proxy:
        A Proxy gRPC endpoint ``host:port``: selects the gRPC transport.
    transport:
        ``"remoting"`` (the default) or ``"grpc"``.
    grpc_options:
        [`aiorocket.grpc.GrpcOptions`][] (TLS, namespace, ACL credentials); gRPC only.
    settings:
        ``ProducerConfig`` fields, e.g. ``auto_batch=True``.
    """

    def __init__(
        self,
        group: str,
        namesrv: str | Sequence[str] | None = None,
        *,
        config: ProducerConfig | None = None,
        transaction_checker: TransactionChecker | None = None,
        client_id: str | None = None,
        proxy: str | None = None,
        transport: Transport | None = None,
        grpc_options: GrpcOptions | None = None,
        **settings: Any,
    ) -> None:
        self.transport: Transport = choose_transport(namesrv, proxy, transport, grpc_options)
        check_group(group, "producer")
        if group == "DEFAULT_PRODUCER":  # reserved by the broker
            raise ConfigError(f"invalid producer group {group!r}")
        cfg = apply_settings(config or ProducerConfig(), settings, "producer")
        self.group = group
        self.config = cfg
        #: per-broker latency record, consulted when ``latency_fault_tolerance`` is on;
        #: may be replaced (e.g. other thresholds) before the producer starts.
        self.fault = LatencyFaultTolerance()
        self.log = get_logger("producer", group=group)
        self._namesrv: list[str] = []
        self._proxy = ""
        if self.transport == "grpc":
            self._proxy = str(proxy or namesrv)
        else:
            self._namesrv = namesrv_addrs(namesrv)
        self._client_id = client_id
        self._grpc_options = grpc_options
        self._grpc: GrpcProducer | None = None
        self._checker = transaction_checker
        self._client: ClientInstance | None = None
        self._tg: anyio.abc.TaskGroup | None = None
        self._sender: Sender | None = None
        self._batcher: AutoBatcher | None = None
        self._membership: Membership | None = None
        self._checks: CheckBacks | None = None
        self._closed = False

    # -- lifecycle -----------------------------------------------------------------

    @property
    def client(self) -> ClientInstance:
        if self._client is None:
            raise ClientClosedError("producer is not started")
        return self._client

    @property
    def in_flight(self) -> int:
        """Requests currently holding an in-flight slot."""
        if self._grpc is not None:
            return self._grpc.in_flight
        return 0 if self._sender is None else self._sender.in_flight

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def batcher(self) -> AutoBatcher | GrpcBatcher | None:
        """The auto-batcher (``auto_batch`` on, once started), with its batch counters
        (``batches``, ``batched_messages``)."""
        if self._grpc is not None:
            return self._grpc.batcher
        return self._batcher

    @property
    def membership(self) -> Membership | None:
        return self._membership

    @property
    def checks(self) -> CheckBacks | None:
        return self._checks

    async def __aenter__(self) -> Producer:
        if self._client is not None or self._grpc is not None or self._closed:
            raise ClientClosedError("a producer can be started once")
        if self.transport == "grpc":
            from aiorocket.grpc._producer import GrpcProducer

            grpc = GrpcProducer(
                self.group, self._proxy, config=self.config, checker=self._checker,
                options=self._grpc_options, client_id=self._client_id,
            )  # fmt: skip
            await grpc.__aenter__()
            self._grpc = grpc
            self.log = self.log.bind(client_id=grpc.transport.client_id, proxy=self._proxy)
            self.log.info("producer_started")
            return self
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
        await client.__aenter__()
        self._client = client
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
        self._checks = CheckBacks(
            client.broker, group, self._checker,
            concurrency=cfg.check_concurrency, backlog=cfg.check_backlog, log=self.log,
            namespace=cfg.namespace,
        )  # fmt: skip
        client.dispatcher.register(RequestCode.CHECK_TRANSACTION_STATE, self._checks.on_request)
        try:
            self._tg = anyio.create_task_group()
            await self._tg.__aenter__()
            if cfg.auto_batch:
                self._batcher = AutoBatcher(self._sender, cfg, self.log)
                self._batcher.start(self._tg)
            self._tg.start_soon(membership.run, cfg.heartbeat_interval)
            self._tg.start_soon(self._checks.run)
        except BaseException as exc:
            await self._teardown(type(exc), exc, exc.__traceback__)
            raise
        self.log.info("producer_started")
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        await self._teardown(exc_type, exc, tb)
        return None

    async def _teardown(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Stop the background tasks, unregister the group (bounded), close the client."""
        self._closed = True
        if self._grpc is not None:
            await self._grpc.__aexit__(exc_type, exc, tb)
            self.log.info("producer_closed")
            return
        if self._client is not None and self._checks is not None:
            self._client.dispatcher.unregister(
                RequestCode.CHECK_TRANSACTION_STATE, self._checks.on_request
            )
        try:
            if self._batcher is not None:
                # Batches carry other callers' messages: let them finish, within bounds.
                with (
                    anyio.CancelScope(shield=True),
                    anyio.move_on_after(self.config.shutdown_timeout),
                ):
                    await self._batcher.drain()
                self._batcher.close()
            if self._tg is not None:
                tg, self._tg = self._tg, None
                tg.cancel_scope.cancel()
                # The body's exception is not the group's: passed in, it would come out
                # wrapped in an ExceptionGroup and miss the caller's `except` clauses.
                await tg.__aexit__(None, None, None)
        finally:
            if self._membership is not None:
                limit = self.config.shutdown_timeout
                with anyio.CancelScope(shield=True), anyio.move_on_after(limit):
                    await self._membership.unregister_all()
            if self._client is not None:
                # Not inside a shield: the client's task groups were entered before it.
                await self._client.__aexit__(exc_type, exc, tb)
            self.log.info("producer_closed")

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

    async def send(
        self,
        msg: Message,
        *,
        timeout: float | None = None,
        sharding_key: object = None,
        selector: QueueSelector | None = None,
        selector_arg: object = None,
    ) -> SendResult:
        """Send ``msg`` and return where it landed (message id, queue, queue offset).

        Without a selector the queue is chosen round-robin over every writable queue
        (avoiding slow or failed brokers) and a failed attempt is retried up to
        ``retries`` times on another broker. ``sharding_key`` (or ``selector`` with
        ``selector_arg``) pins the message to one queue so that messages with the same
        key keep their order; such sends never move, and are retried (on that queue)
        only after a broker answer saying it did not store the message. ``timeout``
        (default ``send_timeout``) bounds the whole call.

        With ``auto_batch``, an unpinned message without delay whose body is below
        ``compress_over`` may leave in one batch request with other sends of its topic
        that wait at the same time (see ``aiorocket.producer.accumulate``).
        """
        if self.transport == "grpc":
            return await self._grpc_producer(selector).send(
                msg, timeout=timeout, sharding_key=sharding_key
            )
        batcher = self._batcher
        if (
            batcher is not None
            and sharding_key is None
            and selector is None
            and batcher.accepts(msg)
        ):
            return await batcher.send(msg, self._open_sender().deadline(timeout))
        sender, out, plan = self._plan(msg, sharding_key, selector, selector_arg)
        deadline = sender.deadline(timeout)
        await sender.acquire(deadline)
        try:
            return await sender.send(out, plan, deadline)
        finally:
            sender.release()

    async def start_send(
        self,
        task_group: anyio.abc.TaskGroup,
        msg: Message,
        *,
        on_result: ResultCallback | None = None,
        timeout: float | None = None,
        sharding_key: object = None,
        selector: QueueSelector | None = None,
        selector_arg: object = None,
    ) -> None:
        """Wait for an in-flight slot, then send ``msg`` in ``task_group``.

        Returns once the send is under way; ``on_result`` (sync or async) gets its
        result. A failed send raises in ``task_group`` (cancelling it, as any failed task).
        """
        if self.transport == "grpc":
            grpc = self._grpc_producer(selector)
            await grpc.acquire()
            try:
                task_group.start_soon(self._grpc_send, msg, on_result, timeout, sharding_key)
            except BaseException:
                grpc.release()
                raise
            return
        sender, out, plan = self._plan(msg, sharding_key, selector, selector_arg)
        deadline = sender.deadline(timeout)
        await sender.acquire(deadline)
        try:
            task_group.start_soon(self._send_in_slot, out, plan, deadline, on_result)
        except BaseException:
            sender.release()
            raise

    async def _send_in_slot(
        self,
        out: Outgoing,
        plan: Plan,
        deadline: float,
        on_result: ResultCallback | None,
    ) -> None:
        assert self._sender is not None
        try:
            result = await self._sender.send(out, plan, deadline)
        finally:
            self._sender.release()
        if on_result is not None:
            ret = on_result(result)
            if inspect.isawaitable(ret):
                await ret

    async def _grpc_send(
        self,
        msg: Message,
        on_result: ResultCallback | None,
        timeout: float | None,
        sharding_key: object,
    ) -> None:
        grpc = self._grpc_producer(None)
        try:
            result = await grpc.send(msg, timeout=timeout, sharding_key=sharding_key, held=True)
        finally:
            grpc.release()
        if on_result is not None:
            ret = on_result(result)
            if inspect.isawaitable(ret):
                await ret

    def _grpc_producer(self, selector: QueueSelector | None) -> GrpcProducer:
        if selector is not None:
            raise _unsupported("choosing the queue (selector=)")
        if self._closed:
            raise ClientClosedError("producer is closed")
        if self._grpc is None:
            raise ClientClosedError("producer is not started (use 'async with')")
        return self._grpc

    async def send_oneway(
        self,
        msg: Message,
        *,
        timeout: float | None = None,
        sharding_key: object = None,
        selector: QueueSelector | None = None,
        selector_arg: object = None,
    ) -> None:
        """Write ``msg`` to a broker without waiting for an answer (one attempt)."""
        if self.transport == "grpc":
            raise _unsupported("send_oneway")
        sender, out, plan = self._plan(msg, sharding_key, selector, selector_arg)
        deadline = sender.deadline(timeout)
        await sender.acquire(deadline)
        try:
            await sender.send_oneway(out, plan, deadline)
        finally:
            sender.release()

    async def send_batch(
        self,
        messages: Sequence[Message],
        *,
        timeout: float | None = None,
        sharding_key: object = None,
        selector: QueueSelector | None = None,
        selector_arg: object = None,
    ) -> list[SendResult]:
        """Send messages of one topic in one request; they land consecutively in one queue.

        Returns one result per message, in order (own ids; offsets first .. first+n-1).
        """
        if self.transport == "grpc":
            return await self._grpc_producer(selector).send_batch(
                messages, timeout=timeout, sharding_key=sharding_key
            )
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

    # -- transactions --------------------------------------------------------------

    async def send_in_transaction(
        self,
        msg: Message,
        local_transaction: LocalTransaction,
        *,
        timeout: float | None = None,
    ) -> TransactionResult:
        """Send ``msg`` as a half message, run ``local_transaction``, end the transaction.

        ``await local_transaction(msg, send_result)`` returns COMMIT, ROLLBACK or
        UNKNOWN; UNKNOWN leaves the outcome to ``transaction_checker`` when the broker
        asks. If it raises, the transaction is ended UNKNOWN and the exception propagates.
        A half message the broker did not store durably (status not SEND_OK) is rolled
        back without running the local transaction.

        Over gRPC, an UNKNOWN outcome (or a local transaction that raises) sends no end
        request: the Proxy's orphaned-transaction recovery asks ``transaction_checker``.
        """
        if self.transport == "grpc":
            return await self._grpc_producer(None).send_in_transaction(
                msg, local_transaction, timeout=timeout
            )
        result, addr = await self._send_half(msg, self.group, {}, timeout)
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
        self,
        msg: Message,
        *,
        producer_group: str | None = None,
        check_immunity: int | None = None,
        timeout: float | None = None,
    ) -> SendResult:
        """Store ``msg`` as a half message and leave its transaction open.

        Remoting only. Whoever holds the result ends the transaction later
        (``aiorocket.producer.transaction.HalfMessage.of`` and
        ``end_half``, from any process), or the
        ``transaction_checker`` of ``producer_group`` (default: this producer's group)
        when the broker asks. With another group, the broker's check-backs go to that
        group's members, not to this producer. ``check_immunity`` (seconds) keeps the
        broker from checking back sooner, and refuses a non-check end after it.
        """
        if self.transport == "grpc":
            raise _unsupported("leaving a transaction open (send_prepared)")
        extra = {} if check_immunity is None else {PROPERTY_CHECK_IMMUNITY: str(check_immunity)}
        result, _ = await self._send_half(msg, producer_group or self.group, extra, timeout)
        return result

    async def _send_half(
        self, msg: Message, group: str, extra: dict[str, str], timeout: float | None
    ) -> tuple[SendResult, str]:
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
        plan = sender.plan(msg, None, None, None)
        deadline = sender.deadline(timeout)
        await sender.acquire(deadline)
        try:
            result = await sender.send(out, plan, deadline)
        finally:
            sender.release()
        return result, await sender.addr_of(result.queue)

    async def accept_checks(self, *topics: str) -> None:
        """Join this producer's group on the brokers of ``topics`` now (and keep
        heartbeating them), so that their transaction check-backs reach this producer
        although it has not sent there. Remoting only."""
        if self.transport == "grpc":
            raise _unsupported("accept_checks")
        sender = self._open_sender()
        assert self._membership is not None
        for topic in topics:
            await sender.routes.get(wrap(self.config.namespace, topic))
        await self._membership.heartbeat_all()

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


def _unsupported(feature: str) -> UnsupportedTransportError:
    return UnsupportedTransportError(
        f"{feature} exists only on the remoting transport (a NameServer address); this "
        "producer talks to a gRPC Proxy"
    )
