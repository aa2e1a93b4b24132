"""OpenTelemetry tracing and metrics of a ``RocketBroker`` (FastStream's
``TelemetryMiddleware``) with the RocketMQ semantic conventions: ``messaging.system``
``rocketmq``, the topic as destination, and ``messaging.rocketmq.*`` (tag, keys, client
group, consumption model, message type, message group, delivery time).

```python
from aiorocket.faststream.opentelemetry import RocketTelemetryMiddleware

broker = RocketBroker(middlewares=[RocketTelemetryMiddleware(tracer_provider=provider)])
```

Needs FastStream's OpenTelemetry support: ``pip install 'faststream[otel]'``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aiorocket.faststream._needs import needs_faststream_extra

with needs_faststream_extra("otel", "aiorocket.faststream.opentelemetry"):
    from faststream.opentelemetry import TelemetrySettingsProvider
    from faststream.opentelemetry.consts import MESSAGING_DESTINATION_PUBLISH_NAME
    from faststream.opentelemetry.middleware import TelemetryMiddleware
    from opentelemetry.semconv._incubating.attributes import messaging_attributes as attrs

from aiorocket.faststream._command import RocketPublishCommand
from aiorocket.message import PROPERTY_SHARDING_KEY, PROPERTY_TIMER_DELIVER_MS
from aiorocket.received import ConsumerMessage

if TYPE_CHECKING:
    from faststream.message import StreamMessage
    from opentelemetry.metrics import Meter, MeterProvider
    from opentelemetry.trace import TracerProvider

__all__ = ["RocketTelemetryMiddleware", "RocketTelemetrySettingsProvider"]

SYSTEM = "rocketmq"


def message_type(properties: Any) -> str:
    """``messaging.rocketmq.message.type`` of a message's properties."""
    if PROPERTY_TIMER_DELIVER_MS in properties or "DELAY" in properties:
        return "delay"
    if PROPERTY_SHARDING_KEY in properties:
        return "fifo"
    return "normal"


class RocketTelemetrySettingsProvider(
    TelemetrySettingsProvider[ConsumerMessage, RocketPublishCommand]
):
    """What a span or metric of a RocketMQ consume or publish is labelled with."""

    messaging_system = SYSTEM

    def get_consume_attrs_from_message(
        self, msg: StreamMessage[ConsumerMessage]
    ) -> dict[str, Any]:
        raw = msg.raw_message
        out: dict[str, Any] = {
            attrs.MESSAGING_SYSTEM: SYSTEM,
            attrs.MESSAGING_MESSAGE_ID: msg.message_id,
            attrs.MESSAGING_MESSAGE_CONVERSATION_ID: msg.correlation_id,
            attrs.MESSAGING_MESSAGE_BODY_SIZE: len(raw.body),
            MESSAGING_DESTINATION_PUBLISH_NAME: raw.topic,
            attrs.MESSAGING_ROCKETMQ_MESSAGE_TYPE: message_type(raw.properties),
        }
        if raw.tags:
            out[attrs.MESSAGING_ROCKETMQ_MESSAGE_TAG] = raw.tags
        if raw.keys:
            out[attrs.MESSAGING_ROCKETMQ_MESSAGE_KEYS] = list(raw.keys)
        group = getattr(msg, "group", None)
        if group:
            out[attrs.MESSAGING_ROCKETMQ_CLIENT_GROUP] = group
            out[attrs.MESSAGING_CONSUMER_GROUP_NAME] = group
            model = "broadcasting" if getattr(msg, "broadcasting", False) else "clustering"
            out[attrs.MESSAGING_ROCKETMQ_CONSUMPTION_MODEL] = model
        if sharding := raw.properties.get(PROPERTY_SHARDING_KEY):
            out[attrs.MESSAGING_ROCKETMQ_MESSAGE_GROUP] = sharding
        return out

    def get_consume_destination_name(self, msg: StreamMessage[ConsumerMessage]) -> str:
        return msg.raw_message.topic

    def get_publish_attrs_from_cmd(self, cmd: RocketPublishCommand) -> dict[str, Any]:
        out: dict[str, Any] = {
            attrs.MESSAGING_SYSTEM: SYSTEM,
            attrs.MESSAGING_DESTINATION_NAME: cmd.destination,
        }
        if cmd.correlation_id:
            out[attrs.MESSAGING_MESSAGE_CONVERSATION_ID] = cmd.correlation_id
        if cmd.tags:
            out[attrs.MESSAGING_ROCKETMQ_MESSAGE_TAG] = cmd.tags
        if cmd.keys:
            out[attrs.MESSAGING_ROCKETMQ_MESSAGE_KEYS] = list(cmd.keys)
        if cmd.sharding_key is not None:
            out[attrs.MESSAGING_ROCKETMQ_MESSAGE_GROUP] = cmd.sharding_key
            out[attrs.MESSAGING_ROCKETMQ_MESSAGE_TYPE] = "fifo"
        elif cmd.delay is not None or cmd.delay_level:
            out[attrs.MESSAGING_ROCKETMQ_MESSAGE_TYPE] = "delay"
            if cmd.delay_level:
                out[attrs.MESSAGING_ROCKETMQ_MESSAGE_DELAY_TIME_LEVEL] = cmd.delay_level
        else:
            out[attrs.MESSAGING_ROCKETMQ_MESSAGE_TYPE] = "normal"
        return out

    def get_publish_destination_name(self, cmd: RocketPublishCommand) -> str:
        return cmd.destination


class RocketTelemetryMiddleware(TelemetryMiddleware[RocketPublishCommand]):
    """FastStream's OpenTelemetry middleware, labelled for RocketMQ."""

    def __init__(
        self,
        *,
        tracer_provider: TracerProvider | None = None,
        meter_provider: MeterProvider | None = None,
        meter: Meter | None = None,
        include_messages_counters: bool = True,
    ) -> None:
        super().__init__(
            settings_provider_factory=lambda _: RocketTelemetrySettingsProvider(),
            tracer_provider=tracer_provider,
            meter_provider=meter_provider,
            meter=meter,
            include_messages_counters=include_messages_counters,
        )
