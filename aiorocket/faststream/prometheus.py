"""Prometheus metrics of a ``RocketBroker`` (FastStream's ``PrometheusMiddleware``):
received and published messages, sizes, durations and errors per topic, with
``messaging.system`` ``rocketmq``.

```python
from prometheus_client import CollectorRegistry
from aiorocket.faststream.prometheus import RocketPrometheusMiddleware

registry = CollectorRegistry()
broker = RocketBroker(middlewares=[RocketPrometheusMiddleware(registry=registry)])
```

Needs FastStream's Prometheus support: ``pip install 'faststream[prometheus]'``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from aiorocket.faststream._needs import needs_faststream_extra

with needs_faststream_extra("prometheus", "aiorocket.faststream.prometheus"):
    from faststream._internal.constants import EMPTY
    from faststream.prometheus import ConsumeAttrs, MetricsSettingsProvider
    from faststream.prometheus.middleware import PrometheusMiddleware

from aiorocket.faststream._command import RocketPublishCommand
from aiorocket.received import ConsumerMessage

if TYPE_CHECKING:
    from faststream.message import StreamMessage
    from prometheus_client import CollectorRegistry

__all__ = ["RocketMetricsSettingsProvider", "RocketPrometheusMiddleware"]


class RocketMetricsSettingsProvider(
    MetricsSettingsProvider[ConsumerMessage, RocketPublishCommand]
):
    """The labels of a RocketMQ message's metrics: its topic."""

    messaging_system = "rocketmq"

    def get_consume_attrs_from_message(self, msg: StreamMessage[ConsumerMessage]) -> ConsumeAttrs:
        raw = msg.raw_message
        return {"destination_name": raw.topic, "message_size": len(raw.body),
                "messages_count": 1}  # fmt: skip

    def get_publish_destination_name_from_cmd(self, cmd: RocketPublishCommand) -> str:
        return cmd.destination


class RocketPrometheusMiddleware(PrometheusMiddleware[ConsumerMessage, RocketPublishCommand]):
    """FastStream's Prometheus middleware, for RocketMQ."""

    def __init__(
        self,
        *,
        registry: CollectorRegistry,
        app_name: str = EMPTY,
        metrics_prefix: str = "faststream",
        received_messages_size_buckets: Sequence[float] | None = None,
        custom_labels: dict[str, str | Callable[[Any], str]] | None = None,
    ) -> None:
        super().__init__(
            settings_provider_factory=lambda _: RocketMetricsSettingsProvider(),
            registry=registry,
            app_name=app_name,
            metrics_prefix=metrics_prefix,
            received_messages_size_buckets=received_messages_size_buckets,
            custom_labels=custom_labels,
        )
