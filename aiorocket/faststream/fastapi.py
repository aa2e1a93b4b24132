"""FastStream's FastAPI integration for RocketMQ: a ``RocketRouter`` is a FastAPI router
whose lifespan starts and stops a ``RocketBroker``; its subscribers take FastAPI's
``Depends``, and it serves the AsyncAPI document (``/asyncapi``, ``/asyncapi.json``).

```python
from fastapi import FastAPI
from aiorocket.faststream.fastapi import RocketRouter

router = RocketRouter()                       # $AIOROCKET_NAMESRV_ADDR, or proxy=...

@router.subscriber("orders", group="billing")
async def handle(order: Order) -> None: ...

@router.post("/orders")
async def create(order: Order) -> None:
    await router.broker.publish(order, "orders", tags="paid")

app = FastAPI()
app.include_router(router)
```

Needs FastAPI: ``pip install 'aiorocketmq[faststream,fastapi]'``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from aiorocket._extras import needs_extra

with needs_extra("fastapi", "aiorocket.faststream.fastapi"):
    from fastapi.datastructures import Default
    from faststream._internal.fastapi.router import StreamRouter

from faststream._internal.constants import EMPTY
from faststream.middlewares import AckPolicy

from aiorocket.faststream._broker import RocketBroker
from aiorocket.faststream._publisher import RocketPublisher
from aiorocket.faststream._subscriber import RocketSubscriber
from aiorocket.received import ConsumerMessage

if TYPE_CHECKING:
    from fastapi import params
    from fastapi.types import IncEx
    from faststream._internal.context import ContextRepo
    from faststream._internal.types import BrokerMiddleware
    from faststream.specification.base import SpecificationFactory
    from faststream.specification.schema.extra import Tag, TagDict
    from starlette.types import Lifespan

__all__ = ["RocketRouter"]

_NO_RESPONSE_MODEL = Default(None)  # FastAPI's "not given" marker


class RocketRouter(StreamRouter[ConsumerMessage]):
    """A FastAPI router running a [`RocketBroker`][aiorocket.faststream.RocketBroker]
    (``router.broker``) in the app's lifespan. ``broker_kwargs`` are the broker's
    arguments (``proxy=``, ``producer_group=``, ``consumer_config=``, ...); the
    FastAPI ones (``prefix``, ``tags``, ``dependencies``, ``lifespan``, ...) as for an
    ``APIRouter``."""

    broker_class = RocketBroker
    broker: RocketBroker

    def __init__(
        self,
        namesrv: str | Sequence[str] | None = None,
        *,
        middlewares: Sequence[BrokerMiddleware[Any, Any]] = (),
        context: ContextRepo | None = None,
        # AsyncAPI
        schema_url: str | None = "/asyncapi",
        specification: SpecificationFactory | None = None,
        specification_tags: Iterable[Tag | TagDict] = (),
        setup_state: bool = True,
        # FastAPI
        prefix: str = "",
        tags: list[Any] | None = None,
        dependencies: Sequence[params.Depends] | None = None,
        lifespan: Lifespan[Any] | None = None,
        include_in_schema: bool = True,
        **broker_kwargs: Any,
    ) -> None:
        super().__init__(
            namesrv,
            middlewares=middlewares,
            context=context,
            schema_url=schema_url,
            specification=specification,
            specification_tags=specification_tags,
            setup_state=setup_state,
            prefix=prefix,
            tags=tags,
            dependencies=dependencies,
            lifespan=lifespan,
            include_in_schema=include_in_schema,
            **broker_kwargs,
        )

    def subscriber(  # type: ignore[override]
        self,
        topic: str,
        *,
        group: str,
        dependencies: Iterable[params.Depends] = (),
        response_model: Any = _NO_RESPONSE_MODEL,
        response_model_include: IncEx | None = None,
        response_model_exclude: IncEx | None = None,
        response_model_by_alias: bool = True,
        response_model_exclude_unset: bool = False,
        response_model_exclude_defaults: bool = False,
        response_model_exclude_none: bool = False,
        ack_policy: AckPolicy = EMPTY,
        **subscriber_kwargs: Any,
    ) -> RocketSubscriber:
        """``RocketBroker.subscriber``'s arguments, with FastAPI's ``Depends``."""
        sub = super().subscriber(
            topic,
            group=group,
            ack_policy=ack_policy,
            dependencies=dependencies,
            response_model=response_model,
            response_model_include=response_model_include,
            response_model_exclude=response_model_exclude,
            response_model_by_alias=response_model_by_alias,
            response_model_exclude_unset=response_model_exclude_unset,
            response_model_exclude_defaults=response_model_exclude_defaults,
            response_model_exclude_none=response_model_exclude_none,
            **subscriber_kwargs,
        )
        assert isinstance(sub, RocketSubscriber)
        return sub

    def publisher(self, topic: str, **publisher_kwargs: Any) -> RocketPublisher:  # type: ignore[override]
        """``RocketBroker.publisher``."""
        return self.broker.publisher(topic, **publisher_kwargs)
