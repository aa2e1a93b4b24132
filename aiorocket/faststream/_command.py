"""What FastStream publishes, in RocketMQ's terms: topic, tags, keys, properties (the
headers), sharding key and delay; and the aiorocket ``Message`` it becomes."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from faststream.response import PublishCommand, PublishType, Response
from faststream.response.response import BatchPublishCommand

from aiorocket.errors import ConfigError
from aiorocket.faststream._message import CONTENT_TYPE, CORRELATION_ID, REPLY_TO
from aiorocket.message import Message, MessageExt

__all__ = ["RocketPublishCommand", "RocketResponse", "to_message"]


class RocketResponse(Response):
    """A handler's return value with RocketMQ options, for its publishers:

    ```python
    @broker.subscriber("orders", group="billing")
    @broker.publisher("invoices")
    async def handle(order: Order) -> RocketResponse:
        return RocketResponse(invoice, tags="issued", keys=[order.id])
    ```
    """

    def __init__(
        self,
        body: Any,
        *,
        headers: dict[str, Any] | None = None,
        correlation_id: str | None = None,
        tags: str | None = None,
        keys: Sequence[str] = (),
        sharding_key: str | None = None,
        delay: float | None = None,
        delay_level: int = 0,
        priority: int | None = None,
    ) -> None:
        super().__init__(body=body, headers=headers, correlation_id=correlation_id)
        self.tags = tags
        self.keys = tuple(keys)
        self.sharding_key = sharding_key
        self.delay = delay
        self.delay_level = delay_level
        self.priority = priority

    def as_publish_command(self) -> RocketPublishCommand:
        return RocketPublishCommand(
            self.body,
            _publish_type=PublishType.PUBLISH,
            topic="",
            headers=self.headers,
            correlation_id=self.correlation_id,
            tags=self.tags,
            keys=self.keys,
            sharding_key=self.sharding_key,
            delay=self.delay,
            delay_level=self.delay_level,
            priority=self.priority,
        )


class RocketPublishCommand(BatchPublishCommand):
    """One publish (or a batch of bodies for one topic) with RocketMQ's options.

    ``delay`` is seconds from now (a 5.x timer message, both transports);
    ``delay_level`` is a broker delay level (remoting only). ``sharding_key`` keeps the
    messages of one key in one queue, in order (over gRPC: the FIFO message group).
    ``priority`` (0 and up; RocketMQ 5.4+, a topic of message type PRIORITY): POP
    consumers get higher priorities first.
    """

    def __init__(
        self,
        body: Any,
        /,
        *bodies: Any,
        _publish_type: PublishType,
        topic: str = "",
        headers: dict[str, Any] | None = None,
        correlation_id: str | None = None,
        reply_to: str = "",
        tags: str | None = None,
        keys: Sequence[str] = (),
        sharding_key: str | None = None,
        delay: float | None = None,
        delay_level: int = 0,
        priority: int | None = None,
        timeout: float | None = None,
    ) -> None:
        super().__init__(
            body,
            *bodies,
            _publish_type=_publish_type,
            destination=topic,
            headers=headers,
            correlation_id=correlation_id,
            reply_to=reply_to,
        )
        self.tags = tags
        self.keys = tuple(keys)
        self.sharding_key = sharding_key
        self.delay = delay
        self.delay_level = delay_level
        self.priority = priority
        self.timeout = timeout
        #: the RocketMQ request (``Producer.request``, Java's) this command answers: it
        #: goes as its reply (``Producer.reply``), not to a topic
        self.reply_request: MessageExt | None = None

    @classmethod
    def from_cmd(
        cls, cmd: PublishCommand | RocketPublishCommand, *, batch: bool = False
    ) -> RocketPublishCommand:
        if isinstance(cmd, RocketPublishCommand):
            return cmd
        body, extra = cls._parse_bodies(cmd.body, batch=batch)
        return cls(
            body,
            *extra,
            _publish_type=cmd.publish_type,
            topic=cmd.destination,
            headers=cmd.headers,
            correlation_id=cmd.correlation_id,
            reply_to=cmd.reply_to,
        )

    def properties(self, content_type: str | None) -> dict[str, str]:
        """The user properties: the headers and FastStream's metadata."""
        props: dict[str, str] = {}
        if content_type:
            props[CONTENT_TYPE] = content_type
        if self.correlation_id:
            props[CORRELATION_ID] = self.correlation_id
        if self.reply_to:
            props[REPLY_TO] = self.reply_to
        for name, value in self.headers.items():
            props[str(name)] = _header_value(name, value)
        return props


def _header_value(name: object, value: object) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, (bool, int, float)):
        return str(value)
    raise ConfigError(
        f"header {name!r}: a RocketMQ property is a string, not {type(value).__name__}"
    )


def to_message(cmd: RocketPublishCommand, body: bytes, content_type: str | None) -> Message:
    """The aiorocket message of one encoded body of ``cmd``."""
    deliver_time_ms = None
    if cmd.delay is not None:
        if cmd.delay < 0:
            raise ConfigError(f"delay must be >= 0 seconds, got {cmd.delay}")
        deliver_time_ms = int((time.time() + cmd.delay) * 1000)
    return Message(
        cmd.destination,
        body,
        tags=cmd.tags,
        keys=list(cmd.keys),
        properties=cmd.properties(content_type),
        delay_level=cmd.delay_level,
        deliver_time_ms=deliver_time_ms,
        priority=cmd.priority,
    )
