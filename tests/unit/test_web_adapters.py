"""The FastAPI and aiohttp adapters' wiring, without a broker (a service with no clients):
the service runs once per app lifetime, the routes see it, and it stops with the app."""

from __future__ import annotations

from types import TracebackType

import httpx
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from fastapi import FastAPI

from aiorocket.errors import ClientClosedError
from aiorocket.integrations import aiohttp as rmq_aiohttp
from aiorocket.integrations.fastapi import ProducerDep, RocketMQRouter
from aiorocket.integrations.service import RocketMQService

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class CountingService(RocketMQService):
    def __init__(self) -> None:
        super().__init__("127.0.0.1:9876", from_env=False, telemetry=False)
        self.entered = self.exited = 0

    async def __aenter__(self) -> CountingService:
        self.entered += 1
        await super().__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        self.exited += 1
        return await super().__aexit__(exc_type, exc, tb)


async def test_fastapi_router_lifespan_given_twice_runs_the_service_once() -> None:
    service = CountingService()
    router = RocketMQRouter(service=service)
    app = FastAPI(lifespan=router.lifespan_context)  # and merged by include_router
    app.include_router(router)

    @app.get("/producer")
    async def needs_producer(producer: ProducerDep) -> dict[str, str]:
        return {"group": producer.group}

    async with app.router.lifespan_context(app):
        assert (service.entered, service.ready()) == (1, True)
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://app") as client:
            ready = await client.get("/health/ready")
            assert (ready.status_code, ready.json()) == (200, {"ready": True})
            report = await client.get("/health")
            assert report.json() == {"ready": True, "live": True, "lag": 0, "consumers": []}
            # no producer_group: a clear error, not a hang
            assert (await client.get("/producer")).status_code == 500
    assert (service.entered, service.exited, service.ready()) == (1, 1, False)


async def test_aiohttp_setup_runs_the_service_with_the_app() -> None:
    service = CountingService()
    app = web.Application()
    rmq_aiohttp.setup(app, service)
    assert app[rmq_aiohttp.ROCKETMQ] is service
    async with TestClient(TestServer(app)) as client:
        assert service.entered == 1 and service.ready()
        ready = await client.get("/health/ready")
        assert ready.status == 200 and await ready.json() == {"ready": True}
        live = await client.get("/health/live")
        assert live.status == 200 and await live.json() == {"live": True}
    assert service.exited == 1 and not service.ready()


def test_the_producer_is_handed_out_only_while_running() -> None:
    service = RocketMQService("127.0.0.1:9876", producer_group="p", from_env=False,
                              telemetry=False)  # fmt: skip
    with pytest.raises(ClientClosedError, match="not running"):
        _ = service.producer
