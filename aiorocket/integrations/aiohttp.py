"""aiohttp integration (extra ``aiohttp``): run a service's RocketMQ clients with the app.

```python
from aiohttp import web
from aiorocket.integrations.aiohttp import ROCKETMQ, RocketMQService, setup

rocketmq = RocketMQService(producer_group="orders-api")

@rocketmq.subscriber("orders", group="order-processor")
async def process(msg: ConsumerMessage) -> None: ...

async def create(request: web.Request) -> web.Response:
    await request.app[ROCKETMQ].producer.send(Message("orders", b"..."))
    return web.json_response({"ok": True})

app = web.Application()
setup(app, rocketmq)  # cleanup_ctx + app key + /health routes
app.router.add_post("/orders", create)
web.run_app(app)
```

``setup`` adds a ``cleanup_ctx`` entry: the producer starts, then the consumers,
at the app's startup; at cleanup (``run_app`` on SIGTERM/SIGINT) the consumers stop
pulling, drain their running handlers within ``shutdown_timeout``, commit what finished
and unregister, then the producer closes. aiohttp runs startup and cleanup in the task
that runs the app (``run_app``, ``AppRunner.setup()``/``cleanup()`` called from one task),
which the clients' task groups require.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator

from aiorocket._extras import needs_extra

with needs_extra("aiohttp", "aiorocket.integrations.aiohttp"):
    from aiohttp import web

from aiorocket.integrations.service import RocketMQService
from aiorocket.producer import Producer

__all__ = ["ROCKETMQ", "RocketMQService", "health_routes", "producer", "setup"]

#: ``request.app[ROCKETMQ]``: the app's ``RocketMQService``.
ROCKETMQ = web.AppKey("aiorocket", RocketMQService)


def producer(request: web.Request) -> Producer:
    """The shared, started producer of the request's app."""
    return request.app[ROCKETMQ].producer


def health_routes(service: RocketMQService, path: str = "/health") -> list[web.RouteDef]:
    """The health routes of ``service`` (added by ``setup``; for a sub-app or another
    prefix): ``path`` (the JSON report with lag), ``path/live`` and ``path/ready``."""

    async def live(request: web.Request) -> web.Response:
        ok = service.live()
        return web.json_response({"live": ok}, status=200 if ok else 503)

    async def ready(request: web.Request) -> web.Response:
        report = service.readiness()
        return web.json_response(report, status=200 if report["ready"] else 503)

    async def health(request: web.Request) -> web.Response:
        report = await service.health()
        ok = report["ready"] and report["live"]
        return web.json_response(report, status=200 if ok else 503)

    return [
        web.get(path, health),
        web.get(f"{path}/live", live),
        web.get(f"{path}/ready", ready),
    ]


def _forget_run_apps_cancel() -> None:
    """``web.run_app`` stops on SIGTERM/SIGINT by cancelling the task that runs the app
    (its ``_run_app``) once, then runs the cleanup in that task, in the ``finally`` that
    handles the cancellation. The cancellation still counts there (``Task.cancelling()``),
    so anyio takes each cancel scope the close cancels and leaves (the lag refresher's, a
    client's task group) for that outside cancellation and raises it again: every client
    closed after it was told it was cancelled, and a consumer skipped its drain
    (``shutdown_timeout``), cutting its running handlers at once. The cleanup is the
    handling of that cancellation: it is uncounted, and only it. An app run by its own
    ``AppRunner`` in a task that something else cancels (a cancel scope it is embedded
    in, the program's shutdown) closes as cancelled, and that cancellation still counts
    for whoever handles it after the cleanup (a cancel scope decides by the count whether
    the cancellation is its own to swallow). A cancellation that comes during the cleanup
    counts as usual."""
    task = asyncio.current_task()
    if task is None or sys.version_info < (3, 11) or not task.cancelling():
        return
    # run_app's own task runs aiohttp's _run_app: nothing else cancels it, and run_app
    # cancels it once (the second, an other's, counts)
    run_app = getattr(getattr(web, "_run_app", None), "__code__", None)
    if run_app is not None and getattr(task.get_coro(), "cr_code", None) is run_app:
        task.uncancel()


def setup(
    app: web.Application, service: RocketMQService, *, health_path: str | None = "/health"
) -> RocketMQService:
    """Run ``service`` with ``app`` (a ``cleanup_ctx`` entry), store it as
    ``app[ROCKETMQ]``, and add the health routes under ``health_path`` (``{path}``: the
    JSON report with lag, ``{path}/live`` and ``{path}/ready``: 200 or 503; None: none).
    """

    async def run(app: web.Application) -> AsyncIterator[None]:
        async with service:
            yield
            _forget_run_apps_cancel()

    app[ROCKETMQ] = service
    app.cleanup_ctx.append(run)
    if health_path is not None:
        app.router.add_routes(health_routes(service, health_path))
    return service
