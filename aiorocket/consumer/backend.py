"""The transport behind a [`Consumer`][aiorocket.consumer.Consumer], chosen once at construction.

All backends run the same delivery strategies and handler (the consumer builds them);
they differ in where messages come from: the remoting ``Engine``
(rebalance, a pull task per queue, offsets) or the ``PopRuntime`` (pop, through a
Proxy over gRPC or from the brokers over remoting). What exists for pull consumption
only (queues, offsets, the client instance) is reached through
``ConsumerBackend.engine``, which for pop raises
[`UnsupportedTransportError`][aiorocket.errors.UnsupportedTransportError] naming the feature.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Protocol

from aiorocket.consumer.allocation import AllocateStrategy
from aiorocket.consumer.engine import Engine, RebalanceListener
from aiorocket.errors import ClientClosedError, UnsupportedTransportError

if TYPE_CHECKING:
    from aiorocket._transport import Transport
    from aiorocket.consumer.delivery import DeliveryFactory
    from aiorocket.consumer.handler import Handler
    from aiorocket.consumer.pop.runtime import PopRuntime
    from aiorocket.consumer.pop.source import PopSource
    from aiorocket.consumer.state import ConsumerState
    from aiorocket.grpc._transport import GrpcOptions

__all__ = [
    "ConsumerBackend",
    "PopBackend",
    "RemotingBackend",
    "grpc_source",
    "pull_only",
    "remoting_only",
    "remoting_source",
]


def remoting_only(feature: str, hint: str = "") -> UnsupportedTransportError:
    """The error for a remoting feature asked of a consumer talking to a Proxy."""
    more = f" ({hint})" if hint else ""
    return UnsupportedTransportError(
        f"{feature} exists only on the remoting transport (a NameServer address); this "
        f"consumer talks to a gRPC Proxy{more}"
    )


def pull_only(feature: str, hint: str = "") -> UnsupportedTransportError:
    """The error for a pull-mode feature asked of a remoting consumer in POP mode."""
    more = f" ({hint})" if hint else ""
    return UnsupportedTransportError(
        f"{feature} exists only for pull consumption (consume_mode='pull'); this consumer "
        f"pops (consume_mode='pop'): the brokers hand it messages, not queues{more}"
    )


class ConsumerBackend(Protocol):
    """What a [`Consumer`][aiorocket.consumer.Consumer] asks of its transport."""

    transport: Transport

    @property
    def started(self) -> bool: ...

    @property
    def client_id(self) -> str: ...

    @property
    def joined(self) -> bool:
        """Remoting: a rebalance pass found us in the group; gRPC: the session is up."""

    async def start(self, delivery: DeliveryFactory, handler: Handler | None) -> None: ...

    async def close(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
        *,
        graceful: bool,
    ) -> None: ...

    def engine(self, feature: str) -> Engine:
        """The remoting engine, for ``feature``; raises over gRPC (or before start)."""


class RemotingBackend:
    """The remoting transport: NameServer, brokers, rebalance and pulls.

    Parameters
    ----------
    state:
        The consumer's shared state.
    namesrv:
        NameServer addresses.
    allocate, listener, client_id, instance_name:
        As ``Engine`` takes them.
    """

    transport: Transport = "remoting"

    def __init__(
        self,
        state: ConsumerState,
        namesrv: Sequence[str],
        *,
        allocate: AllocateStrategy,
        listener: RebalanceListener | None,
        client_id: str | None,
        instance_name: str | None,
    ) -> None:
        self._state = state
        self._namesrv = list(namesrv)
        self._allocate = allocate
        self._listener = listener
        self._client_id = client_id
        self._instance_name = instance_name
        self._engine: Engine | None = None

    @property
    def started(self) -> bool:
        return self._engine is not None and self._engine.started

    @property
    def client_id(self) -> str:
        return self.engine("client_id").client.client_id

    @property
    def joined(self) -> bool:
        return self._state.joined

    async def start(self, delivery: DeliveryFactory, handler: Handler | None) -> None:
        self._engine = Engine(
            self._state,
            self._namesrv,
            delivery=delivery,
            handler=handler,
            allocate=self._allocate,
            listener=self._listener,
            client_id=self._client_id,
            instance_name=self._instance_name,
        )
        try:
            await self._engine.start()
        except BaseException:
            if not self._engine.started:
                self._engine = None  # nothing was started (e.g. no NameServer): may retry
            raise

    async def close(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
        *,
        graceful: bool,
    ) -> None:
        if self._engine is not None:
            await self._engine.close(exc_type, exc, tb, graceful=graceful)

    def engine(self, feature: str) -> Engine:
        if self._engine is None:
            raise ClientClosedError("consumer is not started")
        return self._engine


def grpc_source(
    state: ConsumerState, endpoint: str, options: GrpcOptions | None, client_id: str | None
) -> Callable[[], PopSource]:
    """Makes the gRPC pop source (imports the ``grpc`` extra only when called)."""

    def make() -> PopSource:
        from aiorocket.consumer.pop.grpc_source import GrpcSource
        from aiorocket.grpc import _pb as pb
        from aiorocket.grpc._simple import SimpleConsumer
        from aiorocket.grpc._transport import with_security

        cfg = state.config
        lite = state.lite  # its one subscription is its bind topic
        session = SimpleConsumer(
            state.group, endpoint,
            {topic: sub.expression for topic, sub in state.subscriptions.items()},
            # The Proxy holds a receive 5-20 s.
            await_duration=min(max(cfg.long_poll_timeout, 5.0), 20.0),
            request_timeout=cfg.request_timeout,
            options=with_security(options, cfg.credentials, cfg.tls, cfg.namespace),
            client_id=client_id,
            client_type=(
                pb.ClientType.PUSH_CONSUMER if lite is None else pb.ClientType.LITE_PUSH_CONSUMER
            ),
        )  # fmt: skip

        def undecodable() -> None:  # dead-lettered by the session, counted as over remoting
            state.undecodable_messages += 1

        session.on_undecodable = undecodable
        pauses, rates = state.pauses, state.topic_rates
        if rates is None:
            session.receivable = lambda topic: not pauses.topic_paused(topic)
        else:  # topic_max_rate: a limited topic has a receive loop of its own
            session.receivable = lambda t: rates.receivable(t) and not pauses.topic_paused(t)
        return GrpcSource(session, state.log, lite)

    return make


def remoting_source(
    state: ConsumerState, namesrv: Sequence[str], client_id: str | None
) -> Callable[[], PopSource]:
    """Makes the remoting pop source (POP_MESSAGE from the brokers)."""

    def make() -> PopSource:
        if state.lite is not None:
            from aiorocket.consumer.pop.remoting_lite import LiteRemotingSource

            return LiteRemotingSource(state, namesrv, client_id=client_id)
        from aiorocket.consumer.pop.remoting_source import RemotingSource

        return RemotingSource(state, namesrv, client_id=client_id)

    return make


class PopBackend:
    """Pop consumption: through a 5.x Proxy (gRPC, ``grpc`` extra) or from the brokers
    (remoting, ``consume_mode="pop"``).

    Parameters
    ----------
    state:
        The consumer's shared state.
    make_source:
        Makes the pop source at start (``grpc_source`` or ``remoting_source``).
    transport:
        Which one it is.
    """

    def __init__(
        self, state: ConsumerState, make_source: Callable[[], PopSource], transport: Transport
    ) -> None:
        self._state = state
        self._make_source = make_source
        self.transport = transport
        self.runtime: PopRuntime | None = None

    @property
    def started(self) -> bool:
        return self.runtime is not None and self.runtime.started

    @property
    def client_id(self) -> str:
        if self.runtime is None:
            raise ClientClosedError("consumer is not started")
        return self.runtime.client_id

    @property
    def joined(self) -> bool:
        return self.started

    def receivable_queues(self) -> int:
        runtime = self.runtime
        return runtime.source.receivable_queues() if runtime is not None else 0

    async def start(self, delivery: DeliveryFactory, handler: Handler | None) -> None:
        from aiorocket.consumer.pop.runtime import PopRuntime

        runtime = PopRuntime(
            self._state, self._make_source(), delivery=delivery, transport=self.transport,
            threads=handler.threads if handler is not None else None,
        )  # fmt: skip
        await runtime.start()
        self.runtime = runtime
        if handler is not None and self.transport == "grpc":
            from aiorocket.consumer.pop.grpc_source import GrpcSource

            assert isinstance(runtime.source, GrpcSource)
            runtime.source.answer_verify(handler)

    async def close(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
        *,
        graceful: bool,
    ) -> None:
        if self.runtime is not None:
            await self.runtime.close(graceful=graceful)

    def engine(self, feature: str) -> Engine:
        if self.transport == "grpc":
            raise remoting_only(feature)
        raise pull_only(feature)
