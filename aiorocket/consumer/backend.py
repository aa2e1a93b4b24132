"""The transport behind a [`Consumer`][aiorocket.consumer.Consumer], chosen once at construction.

Both backends run the same delivery strategies and handler (the consumer builds them);
they differ in where messages come from: the remoting ``Engine``
(rebalance, a pull task per queue, offsets) or the gRPC
``GrpcRuntime`` (pop through a Proxy). What exists
on the remoting transport only (queues, offsets, the client instance) is reached
through ``ConsumerBackend.engine``, which over gRPC raises
[`UnsupportedTransportError`][aiorocket.errors.UnsupportedTransportError] naming the feature.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Protocol

from aiorocket.consumer.allocation import AllocateStrategy
from aiorocket.consumer.engine import Engine, RebalanceListener
from aiorocket.errors import ClientClosedError, UnsupportedTransportError

if TYPE_CHECKING:
    from aiorocket._transport import Transport
    from aiorocket.consumer.delivery import DeliveryFactory
    from aiorocket.consumer.handler import Handler
    from aiorocket.consumer.pop.runtime import GrpcRuntime
    from aiorocket.consumer.state import ConsumerState
    from aiorocket.grpc._transport import GrpcOptions

__all__ = ["ConsumerBackend", "GrpcBackend", "RemotingBackend", "remoting_only"]


def remoting_only(feature: str, hint: str = "") -> UnsupportedTransportError:
    """The error for a remoting feature asked of a consumer talking to a Proxy."""
    more = f" ({hint})" if hint else ""
    return UnsupportedTransportError(
        f"{feature} exists only on the remoting transport (a NameServer address); this "
        f"consumer talks to a gRPC Proxy{more}"
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


class GrpcBackend:
    """The gRPC transport: pop consumption through a 5.x Proxy (``grpc`` extra).

    Parameters
    ----------
    state:
        The consumer's shared state.
    endpoint:
        The Proxy's ``host:port``.
    options:
        TLS, namespace and ACL credentials.
    client_id:
        This client's id.
    """

    transport: Transport = "grpc"

    def __init__(
        self,
        state: ConsumerState,
        endpoint: str,
        *,
        options: GrpcOptions | None,
        client_id: str | None,
    ) -> None:
        self._state = state
        self._endpoint = endpoint
        self._options = options
        self._client_id = client_id
        self.runtime: GrpcRuntime | None = None

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

    async def start(self, delivery: DeliveryFactory, handler: Handler | None) -> None:
        from aiorocket.consumer.pop.runtime import GrpcRuntime  # the grpc extra

        runtime = GrpcRuntime(
            self._state, self._endpoint, delivery=delivery, options=self._options,
            client_id=self._client_id,
        )  # fmt: skip
        await runtime.start()
        self.runtime = runtime

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
        raise remoting_only(feature)
