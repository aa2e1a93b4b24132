"""Running aiorocket's clients inside a service (FastAPI, aiohttp, or any asyncio app).

* [`aiorocket.integrations.service`][]:
[`RocketMQService`][aiorocket.integrations.service.RocketMQService],
  the consumers and the shared producer a service declares, started and stopped together,
  with readiness, liveness and a health report (no optional dependency);
* [`aiorocket.integrations.health`][]: the health report (per consumer: queues, cached
  and in-flight messages, committed offsets, lag);
* [`aiorocket.integrations.fastapi`][] (extra ``fastapi``): lifespan, a ``Producer``
  dependency and health routes;
* [`aiorocket.integrations.aiohttp`][] (extra ``aiohttp``): ``cleanup_ctx``, app keys and
  health handlers.

Importing this package imports no web framework.
"""
