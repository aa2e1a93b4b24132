"""Routers: subscribers and publishers declared apart from the broker, included later
(``broker.include_router(router)``), optionally with a topic prefix."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from faststream._internal.broker.router import ArgsContainer, BrokerRouter, SubscriberRoute
from faststream._internal.configs import BrokerConfig

from aiorocket.faststream._config import RocketBrokerConfig
from aiorocket.faststream._registrator import RocketRegistrator
from aiorocket.received import ConsumerMessage

if TYPE_CHECKING:
    from fast_depends.dependencies import Dependant
    from faststream._internal.broker.registrator import Registrator
    from faststream._internal.types import BrokerMiddleware, CustomCallable

__all__ = ["RocketRoute", "RocketRoutePublisher", "RocketRouter"]


class RocketRoutePublisher(ArgsContainer):
    """The arguments of ``publisher()``, for a ``RocketRoute``."""

    def __init__(self, topic: str, **kwargs: Any) -> None:
        super().__init__(topic, **kwargs)


class RocketRoute(SubscriberRoute):
    """A handler with the arguments of ``subscriber()``, for ``RocketRouter(handlers=...)``."""

    def __init__(
        self,
        call: Callable[..., Any] | Callable[..., Awaitable[Any]],
        topic: str,
        *,
        group: str,
        publishers: Iterable[RocketRoutePublisher] = (),
        **kwargs: Any,
    ) -> None:
        super().__init__(call, topic, group=group, publishers=publishers, **kwargs)


class RocketRouter(RocketRegistrator, BrokerRouter[ConsumerMessage, RocketBrokerConfig]):
    """Subscribers and publishers to include in a ``RocketBroker``."""

    def __init__(
        self,
        prefix: str = "",
        handlers: Iterable[RocketRoute] = (),
        *,
        dependencies: Sequence[Dependant] = (),
        middlewares: Sequence[BrokerMiddleware[Any, Any]] = (),
        parser: CustomCallable | None = None,
        decoder: CustomCallable | None = None,
        include_in_schema: bool | None = None,
        routers: Sequence[Registrator[Any, Any]] = (),
    ) -> None:
        super().__init__(
            config=BrokerConfig(  # type: ignore[arg-type]
                broker_middlewares=middlewares,
                broker_dependencies=dependencies,
                broker_parser=parser,
                broker_decoder=decoder,
                include_in_schema=include_in_schema,
                prefix=prefix,
            ),
            handlers=handlers,
            routers=routers,
        )
