"""A FastStream publisher: ``@broker.publisher(topic, ...)`` sends a handler's result
(and ``publisher.publish(...)`` a message) with its RocketMQ options."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from faststream._internal.endpoint.publisher import PublisherSpecification, PublisherUsecase
from faststream.response import PublishType
from faststream.specification.asyncapi.utils import resolve_payloads
from faststream.specification.schema import Message, Operation, PublisherSpec

from aiorocket._send_result import SendResult
from aiorocket.faststream._command import RocketPublishCommand
from aiorocket.faststream._config import (
    PublisherOptions,
    RocketBrokerConfig,
    RocketPublisherConfig,
    RocketPublisherSpecificationConfig,
)

if TYPE_CHECKING:
    from faststream._internal.types import PublisherMiddleware
    from faststream.response import PublishCommand

__all__ = ["RocketPublisher", "RocketPublisherSpecification"]


class RocketPublisherSpecification(
    PublisherSpecification[RocketBrokerConfig, RocketPublisherSpecificationConfig]
):
    @property
    def topic(self) -> str:
        return f"{self._outer_config.prefix}{self.config.topic}"

    @property
    def name(self) -> str:
        return self.config.title_ or f"{self.topic}:Publisher"

    def get_schema(self) -> dict[str, PublisherSpec]:
        return {
            self.name: PublisherSpec(
                address=self.topic,
                description=self.config.description_,
                operation=Operation(
                    message=Message(
                        title=f"{self.name}:Message",
                        payload=resolve_payloads(self.get_payloads(), "Publisher"),
                    ),
                    bindings=None,
                ),
                bindings=None,
            )
        }


class RocketPublisher(PublisherUsecase):
    """Sends to one topic with the options given at ``@broker.publisher(...)``; the
    arguments of ``publish`` override them."""

    _outer_config: RocketBrokerConfig

    def __init__(
        self, config: RocketPublisherConfig, specification: RocketPublisherSpecification
    ) -> None:
        super().__init__(config, specification)  # type: ignore[arg-type]
        self.options: PublisherOptions = config

    @property
    def topic(self) -> str:
        return f"{self._outer_config.prefix}{self.options.topic}"

    def _command(self, cmd: RocketPublishCommand) -> RocketPublishCommand:
        """Fill what ``cmd`` leaves unset from the publisher's options."""
        opts = self.options
        cmd.destination = cmd.destination or self.topic
        cmd.headers = {**(opts.headers or {}), **cmd.headers}
        cmd.tags = cmd.tags if cmd.tags is not None else opts.tags
        cmd.keys = cmd.keys or tuple(opts.keys)
        cmd.sharding_key = cmd.sharding_key if cmd.sharding_key is not None else opts.sharding_key
        cmd.delay = cmd.delay if cmd.delay is not None else opts.delay
        cmd.delay_level = cmd.delay_level or opts.delay_level
        cmd.priority = cmd.priority if cmd.priority is not None else opts.priority
        return cmd

    async def _publish(
        self, cmd: PublishCommand, *, _extra_middlewares: Iterable[PublisherMiddleware]
    ) -> Any:
        """A handler's result (publisher decorators, ``reply_to``) goes out here."""
        real = self._command(RocketPublishCommand.from_cmd(cmd))
        real.destination = self.topic
        return await self._basic_publish(
            real, producer=self._outer_config.producer, _extra_middlewares=_extra_middlewares
        )

    async def publish(
        self,
        message: Any,
        topic: str = "",
        *,
        tags: str | None = None,
        keys: Sequence[str] = (),
        headers: dict[str, Any] | None = None,
        correlation_id: str | None = None,
        reply_to: str = "",
        sharding_key: str | None = None,
        delay: float | None = None,
        delay_level: int = 0,
        priority: int | None = None,
        timeout: float | None = None,
    ) -> SendResult:
        """Send ``message`` (to ``topic``, else the publisher's); returns where it landed."""
        cmd = RocketPublishCommand(
            message,
            _publish_type=PublishType.PUBLISH,
            topic=topic,
            headers=headers,
            correlation_id=correlation_id or self._outer_config.id_generator(),
            reply_to=reply_to,
            tags=tags,
            keys=keys,
            sharding_key=sharding_key,
            delay=delay,
            delay_level=delay_level,
            priority=priority,
            timeout=timeout,
        )
        result: SendResult = await self._basic_publish(
            self._command(cmd), producer=self._outer_config.producer, _extra_middlewares=()
        )
        return result

    async def publish_batch(
        self,
        *messages: Any,
        tags: str | None = None,
        keys: Sequence[str] = (),
        headers: dict[str, Any] | None = None,
        correlation_id: str | None = None,
        timeout: float | None = None,
    ) -> list[SendResult]:
        """Send ``messages`` to the publisher's topic in one batch request."""
        cmd = RocketPublishCommand(
            *messages,
            _publish_type=PublishType.PUBLISH,
            headers=headers,
            correlation_id=correlation_id or self._outer_config.id_generator(),
            tags=tags,
            keys=keys,
            timeout=timeout,
        )
        result: list[SendResult] = await self._basic_publish_batch(
            self._command(cmd), producer=self._outer_config.producer, _extra_middlewares=()
        )
        return result

    async def request(self, message: Any, *, timeout: float = 0.5, **kwargs: Any) -> Any:
        """Send ``message`` as a RocketMQ request and return the parsed reply (see
        ``RocketBroker.request``)."""
        cmd = RocketPublishCommand(
            message, _publish_type=PublishType.REQUEST, topic=self.topic, timeout=timeout,
            correlation_id=self._outer_config.id_generator(),
        )  # fmt: skip
        return await self._basic_request(cmd, producer=self._outer_config.producer)
