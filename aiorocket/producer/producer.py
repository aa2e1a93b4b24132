"""The producer: lifecycle and the public send API (plain, ordered, batch, transactional).

A ``Producer`` picks the engine of its transport once, at construction, and every
method forwards to it (``ProducerBackend``): the
remoting one (``aiorocket.producer.remoting``: NameServer, brokers, heartbeats,
check-backs) or the gRPC one (``aiorocket.producer.over_grpc``: a 5.x Proxy). A feature
of one transport only raises ``UnsupportedTransportError``
naming the other.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc

from aiorocket._log import get_logger
from aiorocket._settings import apply_settings, check_group
from aiorocket._trace import Tracer, check_trace_transport
from aiorocket._transport import Transport, choose_transport
from aiorocket.client.instance import ClientInstance
from aiorocket.client.namesrv import namesrv_addrs
from aiorocket.client.recall import RecallHandle
from aiorocket.client.results import SendResult
from aiorocket.errors import ClientClosedError, ConfigError
from aiorocket.message import Message, MessageExt
from aiorocket.producer.accumulate import AutoBatcher
from aiorocket.producer.backend import (
    ProducerBackend,
    ResultCallback,
    declared_topics,
    unsupported,
)
from aiorocket.producer.config import ProducerConfig
from aiorocket.producer.fault import LatencyFaultTolerance
from aiorocket.producer.membership import Membership
from aiorocket.producer.pace import SendRate
from aiorocket.producer.remoting import RemotingProducer
from aiorocket.producer.reply import Replies
from aiorocket.producer.selectors import QueueSelector
from aiorocket.producer.trace import SendTrace
from aiorocket.producer.transaction import (
    CheckBacks,
    LocalTransaction,
    TransactionChecker,
    TransactionResult,
)

if TYPE_CHECKING:
    from aiorocket.grpc import GrpcOptions
    from aiorocket.grpc._batcher import GrpcBatcher

__all__ = [
    "Producer",
    "ResultCallback",
    "Transport",
]


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
    ``selector=``, oneway sends, delay levels and the remoting internals (``client``,
    ``fault``, ``membership``, ``checks``) raise
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
    topics:
        The topics this producer sends to, declared at start (Java 5.x
        ``ProducerBuilder.setTopics``). Over gRPC the Proxy asks a producer about the
        orphaned transactions of the topics it declared only: a transactional producer
        that restarts must declare its topics to be asked about the half messages its
        predecessor left (without them it is warned at start, and a topic joins only at
        its first send). Over remoting their routes are fetched at start.
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
        topics: Sequence[str] = (),
        **settings: Any,
    ) -> None:
        self.transport: Transport = choose_transport(namesrv, proxy, transport, grpc_options)
        check_group(group, "producer")
        if group == "DEFAULT_PRODUCER":  # reserved by the broker
            raise ConfigError(f"invalid producer group {group!r}")
        cfg = apply_settings(config or ProducerConfig(), settings, "producer")
        topics = declared_topics(topics)
        self.group = group
        self.config = cfg
        self.log = get_logger("producer", group=group)
        check_trace_transport(cfg.trace, cfg.trace_topic, self.transport)
        #: the message trace (``trace=True``; aiorocket._trace): its counters, e.g. ``dropped``
        self.tracer: Tracer | None = Tracer(group, cfg.trace_topic) if cfg.trace else None
        self._trace = None if self.tracer is None else SendTrace(self.tracer, group)
        #: the send rate limit (``max_rate``), None without one
        self._rate = None if cfg.max_rate is None else SendRate(cfg.max_rate)
        # One engine, chosen here; the methods below forward to it, whatever it is. The
        # gRPC one is built at start: constructing a producer imports no grpclib.
        self._engine: ProducerBackend | None = None
        self._remoting: RemotingProducer | None = None
        self._make_engine: Callable[[], ProducerBackend]
        if self.transport == "grpc":
            self._make_engine = functools.partial(
                _grpc_engine, group, str(proxy or namesrv), cfg, transaction_checker,
                grpc_options, client_id, topics, self.tracer,
            )  # fmt: skip
        else:
            self._remoting = RemotingProducer(
                group, namesrv_addrs(namesrv), config=cfg, checker=transaction_checker,
                client_id=client_id, topics=topics, log=self.log, tracer=self.tracer,
            )  # fmt: skip
            self._engine = self._remoting
        self._started = False
        self._closed = False

    # -- lifecycle -----------------------------------------------------------------

    def _only_remoting(self, feature: str) -> RemotingProducer:
        if self._remoting is None:
            raise unsupported(feature, "remoting")
        return self._remoting

    @property
    def fault(self) -> LatencyFaultTolerance:
        """The per-broker latency record, consulted when ``latency_fault_tolerance`` is
        on; may be replaced (e.g. other thresholds) before the producer starts.
        Remoting only (the Proxy chooses the broker over gRPC)."""
        return self._only_remoting("the latency fault record (fault)").fault

    @fault.setter
    def fault(self, value: LatencyFaultTolerance) -> None:
        self._only_remoting("the latency fault record (fault)").fault = value

    @property
    def client(self) -> ClientInstance:
        """The connections to the NameServer and brokers (remoting only)."""
        return self._only_remoting("the remoting client (client)").client

    @property
    def in_flight(self) -> int:
        """Requests currently holding an in-flight slot."""
        return 0 if self._engine is None else self._engine.in_flight

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def batcher(self) -> AutoBatcher | GrpcBatcher | None:
        """The auto-batcher (``auto_batch`` on, once started), with its batch counters
        (``batches``, ``batched_messages``)."""
        return None if self._engine is None else self._engine.batcher

    @property
    def stall_retries(self) -> int:
        """Sends abandoned on a broker that sat on them while others answered, and
        retried on another broker (``stall_retry``): each may be stored twice. Remoting
        only."""
        return self._only_remoting("stalled-broker retries (stall_retry)").stall_retries

    @property
    def membership(self) -> Membership | None:
        """The brokers this producer heartbeats to (remoting only)."""
        return self._only_remoting("producer group membership").membership

    @property
    def checks(self) -> CheckBacks | None:
        """The broker's transaction check-backs (remoting only)."""
        return self._only_remoting("broker check-backs (checks)").checks

    @property
    def replies(self) -> Replies | None:
        """The requests waiting for replies, and ``dropped``: replies that came after
        their request gave up (remoting only; once started)."""
        return self._only_remoting("request-reply (replies)").replies

    async def __aenter__(self) -> Producer:
        if self._started or self._closed:
            raise ClientClosedError("a producer can be started once")
        self._started = True
        if self._engine is None:
            self._engine = self._make_engine()
        await self._engine.start()
        if self._remoting is not None:
            self.log = self._remoting.log
        else:
            grpc: Any = self._engine
            self.log = self.log.bind(client_id=grpc.transport.client_id, proxy=grpc.endpoint)
        self.log.info("producer_started")
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        self._closed = True
        if self._engine is not None:
            await self._engine.close(exc_type, exc, tb)
        self.log.info("producer_closed")
        return None

    def _open(self) -> ProducerBackend:
        if self._closed:
            raise ClientClosedError("producer is closed")
        if self._engine is None or not self._started:
            raise ClientClosedError("producer is not started (use 'async with')")
        return self._engine

    async def _paced(self, n: int = 1) -> None:
        """``max_rate``: wait for the turn of ``n`` messages (checked open first, so a
        closed producer raises at once rather than after the wait)."""
        if self._rate is not None:
            await self._rate.acquire(n)

    # -- sending -------------------------------------------------------------------

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
        engine = self._open()
        if self._rate is not None:  # no coroutine per message without a limit
            await self._rate.acquire(1)
        trace = self._trace
        if trace is None:
            return await engine.send(
                msg, timeout=timeout, sharding_key=sharding_key, selector=selector,
                selector_arg=selector_arg,
            )  # fmt: skip
        began = trace.clock()
        result = await engine.send(
            msg, timeout=timeout, sharding_key=sharding_key, selector=selector,
            selector_arg=selector_arg,
        )  # fmt: skip
        trace.sent(msg, result, began)
        return result

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
        engine = self._engine
        if engine is None or self._closed or not self._started:  # ``_open``, without its call
            engine = self._open()  # raises
        if self._rate is not None:  # no coroutine per message without a limit
            await self._rate.acquire(1)
        trace = self._trace
        if trace is not None:
            on_result = _traced(trace, msg, on_result)
        pending = engine.start_send(
            task_group, msg, on_result=on_result, timeout=timeout, sharding_key=sharding_key,
            selector=selector, selector_arg=selector_arg,
        )  # fmt: skip
        if pending is not None:
            await pending

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
        engine = self._open()
        await self._paced()
        await engine.send_oneway(
            msg, timeout=timeout, sharding_key=sharding_key, selector=selector,
            selector_arg=selector_arg,
        )  # fmt: skip

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
        engine = self._open()
        await self._paced(len(messages))
        began = SendTrace.clock()
        results = await engine.send_batch(
            messages, timeout=timeout, sharding_key=sharding_key, selector=selector,
            selector_arg=selector_arg,
        )  # fmt: skip
        if self._trace is not None:
            self._trace.sent_batch(list(messages), results, began)
        return results

    # -- request-reply -------------------------------------------------------------

    async def request(self, msg: Message, *, timeout: float | None = None) -> MessageExt:
        """Send ``msg`` as a request and return its reply (Java's
        ``DefaultMQProducer.request``; interoperable with Java requesters and repliers).

        A consumer of ``msg.topic`` answers it with ``Producer.reply`` (or Java's
        ``MessageUtil.createReplyMessage`` and a send); the broker pushes the reply to
        this producer. ``timeout`` (default ``send_timeout``) bounds the send and the
        wait together: past it, [`ReplyTimeoutError`][aiorocket.errors.ReplyTimeoutError]
        (the request may still be processed; its reply is then dropped). Cancelling the
        call drops its reply likewise. Remoting only: the 5.x gRPC API has no request-reply.
        """
        engine = self._only_remoting(_REQUEST_REPLY)
        self._open()
        await self._paced()
        return await engine.request(msg, timeout=timeout)

    async def reply(
        self,
        request: MessageExt,
        body: bytes,
        *,
        properties: dict[str, str] | None = None,
        timeout: float | None = None,
    ) -> SendResult:
        """Send ``body`` as the reply to ``request``, a received message sent with
        ``request`` (by this client or Java's). The broker pushes it to the requester and
        stores it in the topic ``<cluster>_REPLY_TOPIC``. Raises ``ConfigError`` for a
        message that is not a request, ``BrokerResponseError`` when the broker cannot
        reach the requester (gone, or not registered there). Remoting only, and only for
        requests received over remoting: the Proxy passes a gRPC consumer none of the
        properties a reply needs (``UnsupportedTransportError``)."""
        engine = self._only_remoting(_REQUEST_REPLY)
        self._open()
        await self._paced()
        return await engine.reply(request, body, properties=properties, timeout=timeout)

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
        engine = self._open()
        await self._paced()
        began = SendTrace.clock()
        result = await engine.send_in_transaction(msg, local_transaction, timeout=timeout)
        if self._trace is not None:
            self._trace.sent(msg, result.send_result, began, half=True)
            self._trace.ended(msg, result.send_result, result.state)
        return result

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
        ([`HalfMessage.of`][aiorocket.producer.transaction.HalfMessage] and
        [`end_half`][aiorocket.producer.transaction.end_half], from any process), or the
        ``transaction_checker`` of ``producer_group`` (default: this producer's group)
        when the broker asks. With another group, the broker's check-backs go to that
        group's members, not to this producer. ``check_immunity`` (seconds) keeps the
        broker from checking back sooner, and refuses a non-check end after it.
        """
        engine = self._only_remoting("leaving a transaction open (send_prepared)")
        self._open()
        if self._rate is not None:  # no coroutine per message without a limit
            await self._rate.acquire(1)
        return await engine.send_prepared(
            msg, producer_group=producer_group, check_immunity=check_immunity, timeout=timeout
        )

    async def recall(self, topic: str, recall_handle: str) -> str:
        """Withdraw a timer message of ``topic`` before its delivery time, by the
        ``recall_handle`` of its ``SendResult`` (a message
        sent with ``deliver_time_ms``); it is then never delivered. Returns its message
        id. Both transports; RocketMQ 5.3.2+ brokers with ``recallMessageEnable=true``
        (else [`AccessDeniedError`][aiorocket.errors.AccessDeniedError]); a message
        already delivered is refused (``BrokerResponseError``), and a string that is not
        a recall handle raises ``ConfigError`` before anything is sent."""
        RecallHandle.parse(recall_handle)
        return await self._open().recall(topic, recall_handle)

    async def accept_checks(self, *topics: str) -> None:
        """Join this producer's group on the brokers of ``topics`` now (and keep
        heartbeating them), so that their transaction check-backs reach this producer
        although it has not sent there. Remoting only."""
        engine = self._only_remoting("accept_checks")
        self._open()
        await engine.accept_checks(*topics)


_REQUEST_REPLY = "request-reply (the 5.x gRPC API has none)"


def _traced(trace: SendTrace, msg: Message, on_result: ResultCallback | None) -> ResultCallback:
    """``on_result`` that records the send first (``start_send``)."""
    began = trace.clock()

    def record(result: SendResult) -> Awaitable[None] | None:
        trace.sent(msg, result, began)
        return None if on_result is None else on_result(result)

    return record


def _grpc_engine(
    group: str, endpoint: str, config: ProducerConfig, checker: TransactionChecker | None,
    options: GrpcOptions | None, client_id: str | None, topics: tuple[str, ...],
    tracer: Tracer | None,
) -> ProducerBackend:  # fmt: skip
    from aiorocket.producer.over_grpc import GrpcEngine

    return GrpcEngine(
        group, endpoint, config=config, checker=checker, options=options, client_id=client_id,
        topics=topics, tracer=tracer,
    )  # fmt: skip
