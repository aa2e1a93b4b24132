"""Running aiorocket's clients inside a service (FastAPI, aiohttp, or any asyncio app).

* :mod:`aiorocket.integrations.service`: :class:`~aiorocket.integrations.service.RocketMQService`,
  the consumers and the shared producer a service declares, started and stopped together,
  with readiness, liveness and a health report (no optional dependency);
* :mod:`aiorocket.integrations.health`: the health report (per consumer: queues, cached
  and in-flight messages, committed offsets, lag);
* :mod:`aiorocket.integrations.fastapi` (extra ``fastapi``): lifespan, a ``Producer``
  dependency and health routes;
* :mod:`aiorocket.integrations.aiohttp` (extra ``aiohttp``): ``cleanup_ctx``, app keys and
  health handlers.

Importing this package imports no web framework.
"""
