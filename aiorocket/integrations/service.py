"""The RocketMQ clients of one service, started and stopped together.

A service declares its consumers (``@service.subscriber(topic, group=...)`` or
``RocketMQService.add_consumer``) and, with ``producer_group``, one shared
[`Producer`][aiorocket.producer.Producer]. ``async with service:`` starts the producer, then
the consumers; leaving it stops the consumers first (they stop pulling and give back
what no handler started, let running handlers finish within ``shutdown_timeout``, hand
back the messages of those cut then, commit the offsets of what finished and only then
unregister: another member gets each unfinished message again, no finished one; see
docs/services.md), then the producer (its handlers may still send).

The framework adapters ([`aiorocket.integrations.fastapi`][],
[`aiorocket.integrations.aiohttp`][]) enter it in the app's lifespan.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Sequence
from contextlib import AsyncExitStack
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

import anyio

from aiorocket import env
from aiorocket._log import get_logger
from aiorocket._settings import apply_settings
from aiorocket.consumer import Consumer, MessageHandler
from aiorocket.consumer.config import ConsumerConfig
from aiorocket.consumer.handler import is_async_callable
from aiorocket.errors import ClientClosedError, ConfigError, RocketMQError
from aiorocket.integrations.health import consumer_health, is_live
from aiorocket.producer import Producer

_log = get_logger("service")

if TYPE_CHECKING:
    from aiorocket.integrations.telemetry import Telemetry

__all__ = ["RocketMQService"]

H = TypeVar("H", bound=MessageHandler)


class RocketMQService:
    """Consumers and a shared producer with one lifecycle, and their health.

    ```python
    from aiorocket.integrations import RocketMQService

    service = RocketMQService(namesrv="127.0.0.1:9876", producer_group="orders-api")
    @service.subscriber("orders", group="order-processor", consume_concurrency=8)
    async def process(msg: ConsumerMessage) -> None: ...
    async with service:
        await service.producer.send(Message("orders", b"..."))
    ```

    Parameters
    ----------
    namesrv:
        NameServer addresses for the clients built here (default:
        ``$AIOROCKET_NAMESRV_ADDR``).
    proxy:
        A 5.x Proxy's gRPC endpoint ``host:port`` instead of a NameServer: the consumers
        built by ``subscriber`` and the producer use the gRPC transport (``grpc`` extra;
        see [`Consumer`][aiorocket.consumer.Consumer]'s ``proxy``).
    producer_group:
        Build and start a shared [`Producer`][aiorocket.producer.Producer] of this group
        (None: the service has no producer unless ``set_producer`` gives one).
    producer_settings:
        [`ProducerConfig`][aiorocket.producer.ProducerConfig] fields for that producer.
    consumer_settings:
        [`ConsumerConfig`][aiorocket.consumer.ConsumerConfig] fields every consumer built by
        ``subscriber`` starts from (its own keywords override them).
    from_env:
        Read settings from the environment ([`aiorocket.env`][]:
        ``AIOROCKET_CONSUMER_*``, ``AIOROCKET_PRODUCER_*``, credentials, TLS): settings
        given in code win over them, they win over the defaults.
    telemetry:
        OpenTelemetry metrics and tracing ([`aiorocket.integrations.telemetry`][]):
        None (default) turns them on when ``opentelemetry`` is installed (extra
        ``otel``), with the global providers; False turns them off; or a configured
        ``Telemetry``. Async handlers and ``producer.send`` are instrumented.
    lag_interval:
        With telemetry: seconds between refreshes of the per-queue lag gauge.
    stuck_after:
        Liveness: a consumer with an assigned queue whose pulls have not completed for
        this many seconds is stuck (default 120 s: several long polls; keep it well
        above ``long_poll_timeout`` + 5 s).
    """

    def __init__(
        self,
        namesrv: str | Sequence[str] | None = None,
        *,
        proxy: str | None = None,
        producer_group: str | None = None,
        producer_settings: dict[str, Any] | None = None,
        consumer_settings: dict[str, Any] | None = None,
        stuck_after: float = 120.0,
        from_env: bool = True,
        telemetry: Telemetry | bool | None = None,
        lag_interval: float = 15.0,
    ) -> None:
        if not stuck_after > 0:
            raise ConfigError(f"stuck_after must be positive, got {stuck_after!r}")
        self.namesrv = namesrv
        self.proxy = proxy
        self.stuck_after = stuck_after
        self.lag_interval = lag_interval
        env_consumer = env.consumer_settings() if from_env else {}
        env_producer = env.producer_settings() if from_env and producer_group else {}
        self.consumer_settings = {**env_consumer, **(consumer_settings or {})}
        self.consumers: list[Consumer] = []
        self.telemetry = _telemetry(telemetry)
        self._stack: AsyncExitStack | None = None
        self._producer: Producer | None = None
        if producer_group is not None:
            settings = {**env_producer, **(producer_settings or {})}
            self.set_producer(Producer(producer_group, namesrv, proxy=proxy, **settings))
        self._running = False

    # -- declaration -------------------------------------------------------------------

    def subscriber(
        self,
        topic: str,
        *,
        group: str,
        expression: str = "*",
        sql: str | None = None,
        **settings: Any,
    ) -> Callable[[H], H]:
        """Decorator: consume ``topic`` in ``group`` with the decorated handler.

        ``expression`` is a tag expression (``"a || b"``), ``sql`` an SQL92 filter;
        ``settings`` are [`ConsumerConfig`][aiorocket.consumer.ConsumerConfig] fields (over the
        service's ``consumer_settings``). The handler is called as the consumer's
        ``handler=``: returning settles the message, raising sends it back for a retry.
        """

        def register(fn: H) -> H:
            config = apply_settings(
                ConsumerConfig(), {**self.consumer_settings, **settings}, "consumer"
            )
            handler: MessageHandler = fn
            if self.telemetry is not None and is_async_callable(fn):
                handler = self.telemetry.instrument_handler(fn, group)
            consumer = Consumer(
                group, self.namesrv, handler=handler, config=config, proxy=self.proxy
            )
            consumer.subscribe(topic, expression, sql=sql)
            self.add_consumer(consumer)
            return fn

        return register

    def add_consumer(self, consumer: Consumer) -> Consumer:
        """Run a consumer built elsewhere (subscribed, with a handler) with the service."""
        if self._stack is not None:
            raise ConfigError("add consumers before starting the service")
        if any(c.group == consumer.group for c in self.consumers):
            raise ConfigError(
                f"consumer group {consumer.group!r} is declared twice: one consumer per "
                "group (subscribe it to several topics, or use another group)"
            )
        self.consumers.append(consumer)
        if self.telemetry is not None:
            self.telemetry.watch(consumer)
        return consumer

    def set_producer(self, producer: Producer) -> Producer:
        """Use ``producer`` (not started) as the service's shared producer."""
        if self._stack is not None:
            raise ConfigError("set the producer before starting the service")
        if self.telemetry is not None:
            self.telemetry.instrument_producer(producer)
        self._producer = producer
        return producer

    @property
    def producer(self) -> Producer:
        """The shared producer; [`ClientClosedError`][aiorocket.errors.ClientClosedError] unless the
        service is running with one."""
        if self._producer is None:
            raise ClientClosedError("this service has no producer (pass producer_group=)")
        if not self._running:
            raise ClientClosedError("the service is not running (enter it in the lifespan)")
        return self._producer

    # -- lifecycle ---------------------------------------------------------------------

    async def __aenter__(self) -> RocketMQService:
        if self._stack is not None:
            raise ClientClosedError("the service is already started")
        stack = AsyncExitStack()
        await stack.__aenter__()
        self._stack = stack
        try:
            if self._producer is not None:
                await stack.enter_async_context(self._producer)
            for consumer in self.consumers:
                await stack.enter_async_context(consumer)
            if self.telemetry is not None and self.consumers:
                # Exited first (last in): the refresher stops before the consumers close.
                tg = await stack.enter_async_context(anyio.create_task_group())
                stack.callback(tg.cancel_scope.cancel)
                tg.start_soon(self._refresh_lag, self.telemetry)
        except BaseException as exc:
            self._stack = None
            await stack.__aexit__(type(exc), exc, exc.__traceback__)
            if isinstance(exc, RocketMQError):
                # A start that fails (no NameServer, no topic, a refused filter) is the
                # environment's doing, not a bug: one clear log line, and an exception
                # without the client's internal frames and causes, which ASGI servers
                # print whole (70 lines under uvicorn for an unreachable NameServer).
                _log.error(
                    "service_start_failed", error=str(exc), error_type=type(exc).__name__
                )
                _log.debug("service_start_failed_traceback", exc_info=exc)
                raise exc.with_traceback(None) from None
            raise
        self._running = True
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        stack, self._stack = self._stack, None
        self._running = False
        if stack is not None:
            # Consumers first (reverse order of entry): their handlers may still send.
            await stack.__aexit__(exc_type, exc, tb)
        return None

    async def _refresh_lag(self, telemetry: Telemetry) -> None:
        """Feed the lag gauge: a health report (max offsets asked of the brokers) every
        ``lag_interval`` seconds; a gauge callback cannot ask the brokers itself."""
        while True:
            telemetry.record_lag(await self.health())
            await anyio.sleep(self.lag_interval)

    # -- health ------------------------------------------------------------------------

    def ready(self) -> bool:
        """True while running once every consumer has joined its group and received its
        first assignment ([`has_joined`][aiorocket.consumer.Consumer.has_joined])."""
        return self._running and all(c.has_joined for c in self.consumers)

    def not_ready_reasons(self) -> list[str]:
        """Why ``ready`` is false, one line per cause ([] when ready): what the health
        routes answer with their 503, so an operator need not search the log."""
        if not self._running:
            return ["the service is not running (starting or stopped)"]
        return [r for r in (c.not_ready_reason for c in self.consumers) if r is not None]

    def readiness(self) -> dict[str, Any]:
        """``{"ready": bool}``, with ``"reasons"`` (``not_ready_reasons``) when not ready:
        the body of the ``/ready`` routes."""
        ready = self.ready()
        return {"ready": True} if ready else {"ready": False, "reasons": self.not_ready_reasons()}

    async def wait_ready(self, timeout: float | None = None) -> bool:
        """Wait until ``ready`` (at most ``timeout`` seconds); return it."""
        with anyio.move_on_after(timeout):
            for consumer in self.consumers:
                if consumer.transport == "remoting":  # over gRPC: joined once started
                    await consumer.wait_joined()
        return self.ready()

    def live(self) -> bool:
        """False when a consumer is stuck: an assigned queue with no pull completed for
        ``stuck_after`` seconds (see [`is_live`][aiorocket.integrations.health.is_live])."""
        return all(is_live(c, self.stuck_after) for c in self.consumers)

    async def health(self, *, with_lag: bool = True) -> dict[str, Any]:
        """The report served by the health routes: ``{"ready", "live", "lag",
        "consumers": [...]}``, and ``"reasons"`` when not ready (see
        [`consumer_health`][aiorocket.integrations.health.consumer_health]); ``lag`` is the total
        over every consumer's queues."""
        reports = [
            await consumer_health(c, stuck_after=self.stuck_after, with_lag=with_lag)
            for c in self.consumers
        ]
        return {
            **self.readiness(),
            "live": self.live(),
            "lag": sum(r["lag"] or 0 for r in reports) if with_lag else None,
            "consumers": reports,
        }


def _telemetry(setting: Telemetry | bool | None) -> Telemetry | None:
    """The Telemetry to use; ``opentelemetry`` is imported only when it is installed and
    wanted, so a service without it pays nothing."""
    if setting is False:
        return None
    if setting is None or setting is True:
        if setting is None and importlib.util.find_spec("opentelemetry") is None:
            return None
        from aiorocket.integrations.telemetry import Telemetry

        return Telemetry()
    return setting
