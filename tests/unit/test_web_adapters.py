"""The FastAPI and aiohttp adapters' wiring, without a broker (a service with no clients):
the service runs once per app lifetime, the routes see it, and it stops with the app."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import sys
from types import TracebackType
from typing import Any

import anyio
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


def _two_consumers_app(cluster: FakeCluster) -> tuple[web.Application, RocketMQService]:
    """An app with two consumers on ``cluster``, telemetry on (as where OpenTelemetry is
    installed: the lag refresher's task group runs)."""
    service = RocketMQService(cluster.namesrv.address, from_env=False, telemetry=True)
    for group in ("g1", "g2"):
        consumer = Consumer(group, cluster.namesrv.address, handler=_ignore,
                            consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
                            **FAST)  # fmt: skip
        consumer.subscribe(TOPIC)
        service.add_consumer(consumer)
    app = web.Application()
    rmq_aiohttp.setup(app, service)
    return app, service


def _closed(logs: list[dict[str, Any]]) -> list[tuple[str, bool]]:
    return sorted((e["group"], e["graceful"]) for e in logs if e["event"] == "consumer_closed")


async def test_aiohttp_run_apps_stop_closes_every_consumer_gracefully() -> None:
    """``web.run_app`` stops by cancelling the task that runs the app, then runs the
    cleanup in it. That cancellation still counted there: anyio raised it again as the
    close left the lag refresher's task group (telemetry on, as where OpenTelemetry is
    installed), so every consumer was told it was cancelled (``graceful=False``) and cut
    its running handlers at once, without its ``shutdown_timeout`` (the aiohttp order
    service logged no drain; the FastAPI one did). aiohttp's own ``run_app`` here, in a
    thread of its own with its own loop, stopped as its SIGTERM handler stops it (it
    raises ``GracefulExit`` in that loop); the fake cluster runs in the test's loop."""
    cluster = FakeCluster({"broker-a": [FakeBroker("broker-a", 0)]})
    async with running(cluster):
        app, service = _two_consumers_app(cluster)
        started, here = asyncio.Event(), asyncio.get_running_loop()

        async def tell_started(app: web.Application) -> None:  # after the service's start
            here.call_soon_threadsafe(started.set)

        app.on_startup.append(tell_started)
        its_loop = asyncio.new_event_loop()  # run_app closes it
        serve = functools.partial(web.run_app, app, host="127.0.0.1", port=0, print=None,
                                  handle_signals=False, loop=its_loop)  # fmt: skip
        with capture_logs() as logs:
            async with anyio.create_task_group() as tg:
                tg.start_soon(functools.partial(anyio.to_thread.run_sync, serve))
                await started.wait()
                assert service.ready()
                its_loop.call_soon_threadsafe(_graceful_exit)  # as on SIGTERM
    assert _closed(logs) == [("g1", True), ("g2", True)]


def _graceful_exit() -> None:
    raise web.GracefulExit  # what run_app's SIGINT/SIGTERM handler does


@pytest.mark.skipif(sys.version_info < (3, 11), reason="asyncio.timeout, Task.cancelling")
async def test_an_embedded_apps_cleanup_leaves_an_outer_cancellation_counted() -> None:
    """An app run by its own ``AppRunner`` in a task of a larger program, under a deadline
    of its own (``asyncio.timeout``), and the program cancels that task as the deadline
    passes: asyncio throws one ``CancelledError`` for both, and the timeout turns it into
    its ``TimeoutError`` only if the task's cancellation count says nothing else asked.
    The cleanup no longer uncounts what is not run_app's: the program's cancellation
    propagates, and the consumers close as cancelled. Before, the cleanup uncounted every
    pending cancellation: the timeout took the program's for its own and raised
    ``TimeoutError``, which the program's code may catch and go on."""
    cluster = FakeCluster({"broker-a": [FakeBroker("broker-a", 0)]})
    async with running(cluster):
        app, service = _two_consumers_app(cluster)
        started = asyncio.Event()
        deadline: list[asyncio.Timeout] = []

        async def embedded() -> None:
            async with asyncio.timeout(None) as its_deadline:
                deadline.append(its_deadline)
                runner = web.AppRunner(app, handle_signals=False)
                await runner.setup()
                try:
                    started.set()
                    await asyncio.Event().wait()
                finally:
                    await runner.cleanup()

        with capture_logs() as logs:
            task = asyncio.create_task(embedded())
            await started.wait()
            assert service.ready()
            deadline[0].reschedule(asyncio.get_running_loop().time())  # passes now
            task.cancel()  # and the program cancels the task, before it runs again
            with contextlib.suppress(asyncio.CancelledError):
                await task
        assert task.cancelled()  # not TimeoutError
    assert _closed(logs) == [("g1", False), ("g2", False)]


async def _ignore(msg: object) -> None:
    pass


def test_the_producer_is_handed_out_only_while_running() -> None:
    service = RocketMQService("127.0.0.1:9876", producer_group="p", from_env=False,
                              telemetry=False)  # fmt: skip
    with pytest.raises(ClientClosedError, match="not running"):
        _ = service.producer
