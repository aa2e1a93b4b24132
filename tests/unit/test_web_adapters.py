"""The FastAPI and aiohttp adapters' wiring, without a broker (a service with no clients):
the service runs once per app lifetime, the routes see it, and it stops with the app."""

from __future__ import annotations

import asyncio
import contextlib
from types import TracebackType

import httpx
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from fastapi import FastAPI

from aiorocket.consumer import ConsumeFromWhere, Consumer
from aiorocket.errors import ClientClosedError
from aiorocket.integrations import aiohttp as rmq_aiohttp
from aiorocket.integrations.fastapi import ProducerDep, RocketMQRouter
from aiorocket.integrations.service import RocketMQService
from aiorocket.testing.logs import capture_logs

from .consumer_fakes import FAST, TOPIC, FakeBroker, FakeCluster, running

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


async def test_aiohttp_run_apps_stop_closes_every_consumer_gracefully() -> None:
    """``web.run_app`` stops by cancelling the task that runs the app, then runs the
    cleanup in it. That cancellation still counted there: anyio raised it again as the
    close left the lag refresher's task group (telemetry on, as where OpenTelemetry is
    installed), so every consumer was told it was cancelled (``graceful=False``) and cut
    its running handlers at once, without its ``shutdown_timeout`` (the aiohttp order
    service logged no drain; the FastAPI one did)."""
    cluster = FakeCluster({"broker-a": [FakeBroker("broker-a", 0)]})
    started = asyncio.Event()
    async with running(cluster):
        service = RocketMQService(cluster.namesrv.address, from_env=False, telemetry=True)
        for group in ("g1", "g2"):
            consumer = Consumer(group, cluster.namesrv.address, handler=_ignore,
                                consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
                                **FAST)  # fmt: skip
            consumer.subscribe(TOPIC)
            service.add_consumer(consumer)
        app = web.Application()
        rmq_aiohttp.setup(app, service)

        async def run_app() -> None:  # web.run_app's _run_app, without signals and sites
            runner = web.AppRunner(app, handle_signals=False)
            await runner.setup()
            try:
                started.set()
                await asyncio.sleep(3600)
            finally:
                await runner.cleanup()

        with capture_logs() as logs:
            task = asyncio.create_task(run_app())
            await started.wait()
            assert service.ready()
            task.cancel()  # as run_app on SIGTERM
            with contextlib.suppress(asyncio.CancelledError):
                await task
    closed = [(e["group"], e["graceful"]) for e in logs if e["event"] == "consumer_closed"]
    assert sorted(closed) == [("g1", True), ("g2", True)]


async def _ignore(msg: object) -> None:
    pass


def test_the_producer_is_handed_out_only_while_running() -> None:
    service = RocketMQService("127.0.0.1:9876", producer_group="p", from_env=False,
                              telemetry=False)  # fmt: skip
    with pytest.raises(ClientClosedError, match="not running"):
        _ = service.producer
