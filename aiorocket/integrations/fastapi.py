"""FastAPI integration (extra ``fastapi``): a router that runs a service's RocketMQ clients.

```python
from fastapi import FastAPI
from aiorocket.consumer import ConsumerMessage
from aiorocket.integrations.fastapi import ProducerDep, RocketMQRouter

router = RocketMQRouter(producer_group="orders-api")

@router.subscriber("orders", group="order-processor")
async def process(msg: ConsumerMessage) -> None: ...

app = FastAPI()
app.include_router(router)  # its lifespan starts and stops the clients

@app.post("/orders")
async def create(producer: ProducerDep) -> dict[str, str]:
    result = await producer.send(Message("orders", b"..."))
    return {"msg_id": result.msg_id}
```

Including the router merges its lifespan into the app's (``FastAPI(lifespan=
router.lifespan_context)`` works too): the producer starts, then the consumers; at
shutdown (uvicorn's SIGTERM) the consumers stop pulling, drain their running handlers
within ``shutdown_timeout``, commit what finished and unregister, then the producer
closes. The router also serves ``GET /health/live``, ``/health/ready`` (200 or 503) and
``/health`` (the JSON report with lag) unless ``health_path=None``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Annotated, Any, TypeVar

from aiorocket._extras import needs_extra

with needs_extra("fastapi", "aiorocket.integrations.fastapi"):
    from fastapi import APIRouter, Depends, Request
    from fastapi.responses import JSONResponse

from aiorocket.consumer import MessageHandler
from aiorocket.errors import ClientClosedError
from aiorocket.integrations.service import RocketMQService
from aiorocket.producer import Producer

__all__ = ["ProducerDep", "RocketMQRouter", "get_producer", "get_service"]

H = TypeVar("H", bound=MessageHandler)


def get_service(request: Request) -> RocketMQService:
    """Dependency: the running ``RocketMQService`` of the app (set by the lifespan)."""
    service = getattr(request.app.state, "aiorocket", None)
    if not isinstance(service, RocketMQService):
        raise ClientClosedError("no RocketMQRouter lifespan is running for this app")
    return service


def get_producer(request: Request) -> Producer:
    """Dependency: the service's shared, started [`Producer`][aiorocket.producer.Producer]."""
    return get_service(request).producer


#: ``producer: ProducerDep`` in a route's parameters hands it the shared producer.
ProducerDep = Annotated[Producer, Depends(get_producer)]


class RocketMQRouter(APIRouter):
    """An ``APIRouter`` whose lifespan runs a ``RocketMQService``.

    Parameters
    ----------
    namesrv:
        NameServer addresses (default ``$AIOROCKET_NAMESRV_ADDR``).
    proxy:
        A 5.x Proxy's gRPC endpoint instead: the service's clients use gRPC.
    producer_group:
        Start a shared producer of this group (see ``ProducerDep``).
    service:
        An existing ``RocketMQService`` to run instead of building one from
        ``namesrv`` (or ``proxy``), ``producer_group`` and ``service_settings``.
    health_path:
        Where the health routes go (``{path}``, ``{path}/live``, ``{path}/ready``);
        None: no health routes.
    service_settings:
        Other ``RocketMQService`` parameters (``producer_settings``,
        ``consumer_settings``, ``stuck_after``).
    router_settings:
        Passed to ``APIRouter`` (``prefix``, ``tags``, ...).
    """

    def __init__(
        self,
        namesrv: str | Sequence[str] | None = None,
        *,
        proxy: str | None = None,
        producer_group: str | None = None,
        service: RocketMQService | None = None,
        health_path: str | None = "/health",
        service_settings: dict[str, Any] | None = None,
        **router_settings: Any,
    ) -> None:
        super().__init__(lifespan=self.lifespan_context, **router_settings)
        self.service = service or RocketMQService(
            namesrv, proxy=proxy, producer_group=producer_group, **(service_settings or {})
        )
        self._entered = 0
        if health_path is not None:
            self.add_api_route(health_path, self._health, methods=["GET"], tags=["health"])
            self.add_api_route(f"{health_path}/live", self._live, methods=["GET"], tags=["health"])
            self.add_api_route(
                f"{health_path}/ready", self._ready, methods=["GET"], tags=["health"]
            )

    def subscriber(
        self,
        topic: str,
        *,
        group: str,
        expression: str = "*",
        sql: str | None = None,
        **settings: Any,
    ) -> Callable[[H], H]:
        """Decorator: consume ``topic`` in ``group`` with the decorated handler (see
        ``RocketMQService.subscriber``)."""
        return self.service.subscriber(
            topic, group=group, expression=expression, sql=sql, **settings
        )

    @asynccontextmanager
    async def lifespan_context(self, app: Any) -> AsyncIterator[None]:
        """Run the service for the app's lifetime (entered once if given twice: as the
        app's ``lifespan`` and through ``include_router``)."""
        if self._entered:
            self._entered += 1
            try:
                yield
            finally:
                self._entered -= 1
            return
        self._entered = 1
        try:
            async with self.service:
                app.state.aiorocket = self.service
                yield
        finally:
            self._entered = 0

    async def _live(self) -> JSONResponse:
        live = self.service.live()
        return JSONResponse({"live": live}, status_code=200 if live else 503)

    async def _ready(self) -> JSONResponse:
        report = self.service.readiness()
        return JSONResponse(report, status_code=200 if report["ready"] else 503)

    async def _health(self) -> JSONResponse:
        report = await self.service.health()
        ok = report["ready"] and report["live"]
        return JSONResponse(report, status_code=200 if ok else 503)
