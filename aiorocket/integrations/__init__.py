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

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from aiorocket.integrations.service import RocketMQService

__all__ = ["RocketMQService"]


def __getattr__(name: str) -> Any:
    # Loaded when first named: importing the package stays free of the clients.
    if name == "RocketMQService":
        from aiorocket.integrations.service import RocketMQService

        return RocketMQService
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
