"""The push consumer: what the application configures, starts and reads.

The work is done by the [`Engine`][aiorocket.consumer.engine.Engine] and its parts; this
class holds the user's choices (subscriptions, handler, settings), picks the delivery
strategy from them at start, and exposes what an application reads (assignment,
statistics, joined state).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import replace
from types import TracebackType
from typing import TYPE_CHECKING, Any

import anyio

from aiorocket._log import get_logger
from aiorocket._settings import apply_settings, check_group
from aiorocket._trace import Tracer, check_trace_transport
from aiorocket._transport import Transport, choose_transport
from aiorocket._validate import check_topic
from aiorocket.client.instance import ClientInstance, make_client_id
from aiorocket.client.namesrv import namesrv_addrs
from aiorocket.consumer.allocation import AllocateStrategy, allocate_averagely
from aiorocket.consumer.backend import (
    ConsumerBackend,
    PopBackend,
    RemotingBackend,
    grpc_source,
    pull_only,
    remoting_only,
    remoting_source,
)
from aiorocket.consumer.config import ConsumerConfig
from aiorocket.consumer.engine import RebalanceListener
from aiorocket.consumer.handler import Handler
from aiorocket.consumer.iterate import Iterated
from aiorocket.consumer.over_grpc import (
    ConsumeMode,
    check_grpc_consumer,
    check_remoting_consumer,
    choose_consume_mode,
)
from aiorocket.consumer.pop.lite import LiteOffset, LiteSubscriptions
from aiorocket.consumer.state import ConsumerState, PullObserver
from aiorocket.consumer.stats import QueueStats, Snapshot, queue_stats
from aiorocket.consumer.strategies import choose_delivery
from aiorocket.consumer.threads import HandlerThreads
from aiorocket.consumer.trace import HandlerTrace
from aiorocket.errors import ClientClosedError, ConfigError
from aiorocket.message import RETRY_TOPIC_PREFIX, MessageQueue
from aiorocket.namespace import app_subscriptions, unwrap_queue, wrap, wrap_queue
from aiorocket.protocol.subscription import EXPRESSION_SQL92, EXPRESSION_TAG, Subscription
from aiorocket.received import ConsumerMessage
from aiorocket.results import HandlerResult

if TYPE_CHECKING:
    from aiorocket.grpc._transport import GrpcOptions

__all__ = ["BatchHandler", "Consumer", "MessageHandler", "PullObserver", "RebalanceListener"]

MessageHandler = Callable[[ConsumerMessage], Awaitable[HandlerResult] | HandlerResult]
BatchHandler = Callable[[list[ConsumerMessage]], Awaitable[HandlerResult] | HandlerResult]

_ORDERLY_NEEDS_HANDLER = (
    "orderly=True needs a handler (handler= or batch_handler=): orderly consumption runs "
    "one handler call at a time per locked queue; async for cannot consume orderly"
)
_DEDUP_NEEDS_HANDLER = (
    "dedup= needs a handler (handler= or batch_handler=): the claim is made around the "
    "handler call, whose outcome decides done or released; async for has no such call"
)


class Consumer:
    """A push consumer for one group.

    ```python
    consumer = Consumer("my-group", namesrv="127.0.0.1:9876")
    consumer.subscribe("orders", "paid || refunded")
    async with consumer:
        async for msg in consumer:
            print(msg.body)
    ```

    or with a handler (run concurrently, up to ``consume_concurrency`` at a time):

    ```python
    async def handle(msg: ConsumerMessage) -> None: ...
    async with Consumer("my-group", namesrv=..., handler=handle) as consumer: ...
    ```

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
        [`Reconsume`][aiorocket.consumer.Reconsume] sends it back for a retry. Without a
        handler, consume with ``async for``.
    batch_handler:
        Like ``handler``, with a list of up to ``consume_batch_size`` messages of one
        queue, settled together.
    config:
        A [`ConsumerConfig`][aiorocket.consumer.ConsumerConfig]; keyword ``settings`` override
        its fields.
    allocate:
        The queue allocation strategy (default: averagely, as in Java).
    listener:
        A ``RebalanceListener`` awaited around queue ownership changes.
    client_id:
        This client's id in the group (default ``<ip>@<pid>#<random>``).
    instance_name:
        A stable instance name (the client id becomes ``<ip>@<instance_name>``); a
        broadcasting consumer finds its offset file again by it after a restart.
    proxy:
        A 5.x Proxy's gRPC endpoint ``host:port`` instead of a NameServer: selects the
        gRPC transport (``grpc`` extra, asyncio only): the same runtime (handler,
        ``async for``, consume timeout, close) with messages popped through the Proxy
        ([`PopMessage`][aiorocket.grpc.PopMessage]s). Queue-level features
        (assignment, listener, stats, offsets) and the remoting-only settings raise
        [`UnsupportedTransportError`][aiorocket.errors.UnsupportedTransportError] there.
    transport:
        ``"remoting"`` (the default) or ``"grpc"`` (then ``namesrv`` is the Proxy).
    consume_mode:
        How a remoting consumer gets messages: ``"pull"`` (the default: client
        rebalance, a pull per owned queue, offsets committed by the client) or
        ``"pop"`` (RocketMQ 5.x POP: every member pops from every queue of its topics,
        the broker tracks what is consumed and keeps what is handled invisible, so more
        members than queues all receive and nobody waits for a rebalance; needs 5.x
        brokers). Over gRPC consumption is always pop. See the documentation's page
        *POP consumption* (``consumer/pop.md``).
    bind_topic:
        Makes a lite consumer (RocketMQ 5.5+): the parent topic (message type LITE) its
        group is bound to (the group's ``lite.bind.topic``). It consumes the lite topics
        of that topic it subscribes to with
        [`subscribe_lite`][aiorocket.consumer.Consumer.subscribe_lite], at any time,
        each in order (pop; over remoting ``consume_mode`` is ``"pop"``). See the
        documentation's page *Lite topics* (``consumer/lite.md``).
    grpc_options:
        [`aiorocket.grpc.GrpcOptions`][] (TLS, namespace, ACL credentials); gRPC only.
    settings:
        [`ConsumerConfig`][aiorocket.consumer.ConsumerConfig] fields, e.g.
        ``consume_concurrency=50``.
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
        proxy: str | None = None,
        transport: Transport | None = None,
        grpc_options: GrpcOptions | None = None,
        consume_mode: ConsumeMode | None = None,
        bind_topic: str | None = None,
        **settings: Any,
    ) -> None:
        check_group(group, "consumer")
        if handler is not None and batch_handler is not None:
            raise ConfigError("pass either handler or batch_handler, not both")
        cfg = apply_settings(config or ConsumerConfig(), settings, "consumer")
        if instance_name is not None and (not instance_name or "@" in instance_name):
            raise ConfigError(f"invalid instance name {instance_name!r}")
        self.transport: Transport = choose_transport(namesrv, proxy, transport, grpc_options)
        if bind_topic is not None:
            check_topic(bind_topic)
            if consume_mode == "pull":
                raise ConfigError("a lite consumer (bind_topic) pops: not consume_mode='pull'")
            consume_mode = "pop"
        #: ``"pull"`` or ``"pop"`` (always pop over gRPC)
        self.consume_mode: ConsumeMode = choose_consume_mode(self.transport, consume_mode)
        custom_allocation = allocate is not allocate_averagely
        if self.transport == "grpc":
            check_grpc_consumer(
                cfg, listener=listener, custom_allocation=custom_allocation,
                instance_name=instance_name,
            )  # fmt: skip
        else:
            check_remoting_consumer(
                cfg, pop=self.consume_mode == "pop", listener=listener,
                custom_allocation=custom_allocation,
            )  # fmt: skip
        self._group = group
        # The engine works with the broker's names: the group and topics in the namespace
        # (over gRPC the session wraps every name it sends: aiorocket.grpc).
        wire_group = wrap(cfg.namespace, group) if self.transport == "remoting" else group
        self._state = ConsumerState(wire_group, cfg, get_logger("consumer", group=wire_group))
        check_trace_transport(cfg.trace, cfg.trace_topic, self.transport)
        if cfg.trace:
            self._state.tracer = Tracer(group, cfg.trace_topic)
            self._state.trace = HandlerTrace(self._state.tracer, group)
        if bind_topic is not None:
            # Over gRPC the session wraps every name it sends (aiorocket.grpc).
            bound = wrap(cfg.namespace, bind_topic) if self.transport == "remoting" else bind_topic
            self._state.lite = LiteSubscriptions(bound, self._state.log)
            # Its one subscription: routes, heartbeats and the Proxy's settings name it.
            self._state.subscriptions[bound] = Subscription(bound, "*", EXPRESSION_TAG)
        client_id = client_id or (make_client_id(instance_name) if instance_name else None)
        self._backend: ConsumerBackend
        if self.transport == "grpc":
            make = grpc_source(self._state, str(proxy or namesrv), grpc_options, client_id)
            self._backend = PopBackend(self._state, make, "grpc")
        elif self.consume_mode == "pop":
            self._state.pop_mode = True
            make = remoting_source(self._state, namesrv_addrs(namesrv), client_id)
            self._backend = PopBackend(self._state, make, "remoting")
        else:
            self._backend = RemotingBackend(
                self._state, namesrv_addrs(namesrv), allocate=allocate, listener=listener,
                client_id=client_id, instance_name=instance_name,
            )  # fmt: skip
        self._handler_fn: Callable[..., Any] | None = handler or batch_handler
        self._batch = batch_handler is not None
        self._starting = False
        self._iterated: Iterated | None = None
        self._threads: HandlerThreads | None = None
        self._last_stats: Snapshot | None = None

    # -- configuration -------------------------------------------------------------

    @property
    def group(self) -> str:
        return self._group

    @property
    def config(self) -> ConsumerConfig:
        return self._state.config

    @property
    def tracer(self) -> Tracer | None:
        """The message trace (``trace=True``; aiorocket._trace): its counters ``sent``,
        ``dropped`` (buffer full) and ``failed`` (not stored)."""
        return self._state.tracer

    def subscribe(self, topic: str, expression: str = "*", *, sql: str | None = None) -> None:
        """Subscribe to ``topic`` with a tag expression (``"a || b"``) or an SQL92 ``sql``."""
        self._check_not_started("subscribe")
        if self._state.lite is not None:
            raise ConfigError(
                "a lite consumer is bound to one topic (bind_topic): subscribe to its lite "
                "topics with subscribe_lite()"
            )
        if self.transport == "grpc":
            if sql is not None:
                raise remoting_only("an SQL92 subscription", "over gRPC, subscribe by tag")
        else:  # over gRPC the session wraps every name it sends
            topic = wrap(self._state.config.namespace, topic)
        if sql is not None:
            sub = Subscription(topic, sql, EXPRESSION_SQL92)
        else:
            sub = Subscription(topic, expression, EXPRESSION_TAG)
        self._state.subscriptions[topic] = sub

    @property
    def subscriptions(self) -> dict[str, Subscription]:
        """The subscriptions by topic (after start, the group's retry topic too)."""
        return app_subscriptions(self._state.config.namespace, self._state.subscriptions)

    # -- lite topics ---------------------------------------------------------------

    def _lite(self) -> LiteSubscriptions:
        if self._state.lite is None:
            raise ConfigError("not a lite consumer: create it with bind_topic=<a LITE topic>")
        return self._state.lite

    async def subscribe_lite(self, lite_topic: str, *, offset: LiteOffset | None = None) -> None:
        """Consume ``lite_topic`` of the bind topic too: from where the group left it (one
        the group never read: see [`LiteOffset`][aiorocket.consumer.LiteOffset]), or from
        ``offset``
        ([`LiteOffset`][aiorocket.consumer.LiteOffset]: earliest, an offset, the last n,
        a time). A subscribed lite topic stays as it is.

        Before the start it is only noted (the start sends the whole set); after, every
        server takes it before this returns, or it raises and nothing changed:
        [`LiteQuotaExceededError`][aiorocket.errors.LiteQuotaExceededError] over the
        group's quota of lite subscriptions per client, a ``RocketMQError`` otherwise.
        """
        await self._lite().subscribe(lite_topic, offset)

    async def unsubscribe_lite(self, lite_topic: str) -> None:
        """Stop consuming ``lite_topic``: the servers send no more of its messages (those
        already received are still delivered and settled)."""
        await self._lite().unsubscribe(lite_topic)

    @property
    def lite_topics(self) -> frozenset[str]:
        """The lite topics this lite consumer is subscribed to."""
        return self._lite().topics

    def handler(self, fn: MessageHandler) -> MessageHandler:
        """Decorator form of ``handler=``."""
        self._check_not_started("set the handler")
        self._handler_fn, self._batch = fn, False
        return fn

    def _check_not_started(self, what: str) -> None:
        if self._starting:
            raise ConfigError(f"{what} before starting the consumer")

    @property
    def client(self) -> ClientInstance:
        return self._backend.engine("client (the remoting ClientInstance)").client

    @property
    def started(self) -> bool:
        return self._backend.started

    @property
    def client_id(self) -> str:
        return self._backend.client_id

    # -- lifecycle -----------------------------------------------------------------

    def _found_iterated(self, iterated: Iterated) -> None:
        self._iterated = iterated

    async def __aenter__(self) -> Consumer:
        if self._starting:
            raise ClientClosedError("a consumer can be started once")
        state = self._state
        if not state.subscriptions:
            raise ConfigError("subscribe to at least one topic before starting")
        cfg = state.config
        if cfg.orderly and self._handler_fn is None:
            raise ConfigError(_ORDERLY_NEEDS_HANDLER)
        if cfg.dedup is not None:
            if self._handler_fn is None:
                raise ConfigError(_DEDUP_NEEDS_HANDLER)
            cfg.dedup.check_loop()
        handler = None
        if self._handler_fn is not None:
            self._threads = HandlerThreads(
                concurrency=cfg.consume_concurrency,
                max_abandoned=cfg.max_abandoned_threads,
                log=state.log,
            )
            handler = Handler(
                self._handler_fn, batch=self._batch, threads=self._threads, state=state
            )
        self._starting = True
        try:
            await self._backend.start(choose_delivery(handler, self._found_iterated), handler)
        except BaseException:
            if not self._backend.started:
                self._starting = False  # nothing was started (e.g. no NameServer): may retry
            raise
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
        await self._backend.close(exc_type, exc, tb, graceful=graceful)
        return None

    async def run(self) -> None:
        """Start, consume until cancelled, then close: running handlers are cancelled,
        and what the consumer holds is handed back or released over its still running
        connections (docs/reliability.md, "A consumer cancelled from outside")."""
        async with self:
            await anyio.sleep_forever()

    # -- iteration -------------------------------------------------------------------

    def __aiter__(self) -> AsyncIterator[ConsumerMessage]:
        return self.messages()

    def messages(self) -> AsyncGenerator[ConsumerMessage, None]:
        """Yield messages one by one (see ``aiorocket.consumer.iterate.Iterated.messages``).

        A yielded message is acked when you ask for the next one (the loop body finished
        without raising). Take manual control with ``async with msg:``, ``msg.hold()``,
        ``await msg.ack()`` or ``await msg.nack()``. A message you leave unsettled (you
        broke out of the loop, or the body raised or was cancelled) is released when the
        iterator closes: the next iteration yields it again. It is never committed past
        (remoting) or acked (gRPC) before it is settled, so a restart or rebalance
        redelivers it; the same on both transports.
        """
        if self._handler_fn is not None:
            raise ConfigError("this consumer has a handler; iterate a consumer without one")
        if self.config.orderly:
            raise ConfigError(_ORDERLY_NEEDS_HANDLER)
        if self._iterated is None:
            raise ClientClosedError("start the consumer (async with) before iterating")
        return self._iterated.messages()

    # -- pausing -----------------------------------------------------------------------

    def pause(self, *targets: str | MessageQueue) -> None:
        """Stop receiving ``targets``: subscribed topics or (pull consumption) queues;
        with none, everything. Handlers running finish, messages already received are
        still handled in order, nothing is lost; ``resume`` goes on from where it
        stopped (``aiorocket.consumer.pauses``)."""
        self._state.pauses.pause(self._checked_targets("pause", targets))

    def resume(self, *targets: str | MessageQueue) -> None:
        """Receive ``targets`` again; with none, everything paused."""
        self._state.pauses.resume(self._checked_targets("resume", targets))

    def paused(self) -> frozenset[str | MessageQueue]:
        """What is paused: topics and queues (every subscribed topic after ``pause()``)."""
        topics = app_subscriptions(self._state.config.namespace, self._state.subscriptions)
        return self._state.pauses.paused(topics)

    def _checked_targets(
        self, what: str, targets: tuple[str | MessageQueue, ...]
    ) -> tuple[str | MessageQueue, ...]:
        """``targets`` if each is a subscribed topic or a queue of one, else ConfigError."""
        topics = app_subscriptions(self._state.config.namespace, self._state.subscriptions)
        for target in targets:
            if isinstance(target, MessageQueue):
                self._pull_only(f"{what}() of a queue ({what} its topic)")
                topic = target.topic
            elif isinstance(target, str):
                topic = target
            else:
                raise ConfigError(f"{what}({target!r}): a topic name or a MessageQueue expected")
            if topic not in topics:
                raise ConfigError(f"{what}({target!r}): {topic!r} is not a subscribed topic "
                                  f"(subscribed: {sorted(topics)})")  # fmt: skip
        return targets

    # -- introspection -----------------------------------------------------------------

    @property
    def abandoned_threads(self) -> int:
        """Synchronous handler threads given up by a timeout that are still running."""
        return self._threads.abandoned if self._threads else 0

    @property
    def abandoned_threads_total(self) -> int:
        """Synchronous handler threads given up by a timeout since the start."""
        return self._threads.abandoned_total if self._threads else 0

    def _pull_only(self, feature: str) -> None:
        """Raise for a feature of pull consumption (queues) on a pop consumer."""
        if self.transport == "grpc":
            raise remoting_only(feature)
        if self.consume_mode == "pop":
            raise pull_only(feature)

    def assignment(self) -> set[MessageQueue]:
        self._pull_only("assignment() (queues)")
        namespace = self._state.config.namespace
        return {unwrap_queue(namespace, mq) for mq in self._state.assignment()}

    def receivable_queues(self) -> int:
        """Queues of the subscribed topics this member consumes now, on every transport:
        its assigned queues (pull; the retry queue not counted), the readable queues of
        the topics' routes (POP over remoting), the Proxy's assignments (gRPC). 0 for
        every member of a group means nothing is consumed (metrics and alerts use it)."""
        if not self.started:
            return 0
        if isinstance(self._backend, PopBackend):
            return self._backend.receivable_queues()
        return sum(1 for mq in self._state.assignment()
                   if not mq.topic.startswith(RETRY_TOPIC_PREFIX))  # fmt: skip

    @property
    def has_joined(self) -> bool:
        """True once a rebalance pass found this client among the group's members and
        computed its share of every subscribed topic (its first assignment, possibly
        empty when the group has more members than queues). Readiness checks use it.
        Pop consumers: once started (over gRPC, the client's settings exchanged with
        the Proxy; over remoting, the first heartbeat sent)."""
        return self._backend.joined

    @property
    def not_ready_reason(self) -> str | None:
        """Why ``has_joined`` is false, in words (health reports give it); None once it
        is true."""
        if self.has_joined:
            return None
        if not self.started:
            return f"consumer of group {self.group!r} is not started"
        missing = sorted(t for t in self._state.missing_topics if not t.startswith("%"))
        if missing:
            return (f"consumer of group {self.group!r}: topic {missing[0]!r} does not exist "
                    "(no route); it is consumed once created")  # fmt: skip
        return f"consumer of group {self.group!r} has not joined its group yet (first rebalance)"

    async def wait_joined(self) -> None:
        """Wait until ``has_joined`` is true (a started pop consumer has joined)."""
        if self.transport == "grpc":
            raise remoting_only("wait_joined()")
        if self.consume_mode == "pop":
            if not self._backend.joined:
                raise ClientClosedError("start the consumer (async with) before waiting")
            return
        await self._state.wait_joined()

    @property
    def dropped_messages(self) -> int:
        """Broadcasting messages given up after their local retries."""
        return self._state.dropped_messages

    @property
    def undecodable_messages(self) -> int:
        """Records that could not be decoded (dead-lettered or skipped, logged)."""
        return self._state.undecodable_messages

    def observe_pulls(self, observer: PullObserver) -> None:
        """Call ``observer(queue, seconds, messages)`` after each pull that returned
        messages: the time from sending the pull request (or, when the broker held it
        until a message arrived, from that message's store time) to its answer, and how
        many messages it brought (metrics use it: pull latency without the long poll's
        wait for traffic). Pulls that found nothing are left out.
        ``observer`` runs on the pull path: it must be quick and must not raise."""
        self._pull_only("observe_pulls()")
        self._state.pull_observers.append(observer)

    def stats(self, *, advance: bool = True) -> list[QueueStats]:
        """Per-queue cache, running handlers, offsets, and rates since the previous call.

        ``advance=False`` reads the figures without starting a new rate interval, so a
        health endpoint polling them does not disturb the application's own rates.
        """
        self._pull_only("stats() (per-queue figures)")
        stats, snapshot = queue_stats(self._state.process_queues, self._last_stats)
        if advance or self._last_stats is None:
            self._last_stats = snapshot
        namespace = self._state.config.namespace
        if namespace:
            stats = [replace(s, queue=unwrap_queue(namespace, s.queue)) for s in stats]
        return stats

    async def committed(self, mq: MessageQueue) -> int | None:
        """The offset stored for ``mq`` (the next one to consume), or None."""
        engine = self._backend.engine("committed() (queue offsets)")
        return await engine.offset_store.read(wrap_queue(self._state.config.namespace, mq))

    async def read_addr(self, mq: MessageQueue) -> str | None:
        """A broker serving reads of ``mq`` (its master, else a slave), or None."""
        engine = self._backend.engine("read_addr()")
        return await engine.finder.reader(wrap_queue(self._state.config.namespace, mq))
