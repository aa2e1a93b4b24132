"""``subscriber()`` and ``publisher()``, shared by the broker and its routers."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

from faststream._internal.broker.registrator import Registrator
from faststream._internal.constants import EMPTY
from faststream._internal.endpoint.subscriber.call_item import CallsCollection
from faststream.middlewares import AckPolicy
from typing_extensions import override

from aiorocket._settings import check_group
from aiorocket._validate import check_topic
from aiorocket.consumer.config import ConsumeFromWhere, MessageModel
from aiorocket.consumer.over_grpc import ConsumeMode
from aiorocket.errors import ConfigError
from aiorocket.faststream._config import (
    RocketBrokerConfig,
    RocketPublisherConfig,
    RocketPublisherSpecificationConfig,
    RocketSubscriberConfig,
    RocketSubscriberSpecificationConfig,
)
from aiorocket.faststream._publisher import RocketPublisher, RocketPublisherSpecification
from aiorocket.faststream._subscriber import RocketSubscriber, RocketSubscriberSpecification
from aiorocket.received import ConsumerMessage

if TYPE_CHECKING:
    from fast_depends.dependencies import Dependant
    from faststream._internal.types import CustomCallable

__all__ = ["RocketRegistrator"]


class RocketRegistrator(Registrator[ConsumerMessage, RocketBrokerConfig]):
    """Declares subscribers and publishers (on a broker or a router)."""

    @override
    def subscriber(  # type: ignore[override]
        self,
        topic: str,
        *,
        group: str,
        tags: str = "*",
        sql: str | None = None,
        concurrency: int | None = None,
        orderly: bool = False,
        broadcasting: bool = False,
        consume_mode: ConsumeMode | None = None,
        consume_from_where: ConsumeFromWhere | None = None,
        consume_timestamp_ms: int | None = None,
        max_reconsume_times: int | None = None,
        consume_timeout: float | None = None,
        settings: dict[str, Any] | None = None,
        # FastStream's arguments
        ack_policy: AckPolicy = EMPTY,
        no_reply: bool = False,
        dependencies: Sequence[Dependant] = (),
        parser: CustomCallable | None = None,
        decoder: CustomCallable | None = None,
        persistent: bool = True,
        # AsyncAPI
        title: str | None = None,
        description: str | None = None,
        include_in_schema: bool = True,
    ) -> RocketSubscriber:
        """Consume ``topic`` as consumer group ``group`` (one subscriber per group).

        Parameters
        ----------
        topic:
            The topic (a router's prefix is put in front).
        group:
            The consumer group: the instances of a service share its queues
            (clustering) or each get every message (``broadcasting=True``).
        tags:
            A tag expression (``"paid || refunded"``); ``"*"``: every message.
        sql:
            An SQL92 filter over the message's properties instead of tags (remoting;
            the broker must enable ``enablePropertyFilter``).
        concurrency:
            Handler calls at once (``consume_concurrency``, default 20).
        orderly:
            One message at a time per queue, in order (a failure is retried in place).
        broadcasting:
            Every instance gets every message (remoting).
        consume_mode:
            Remoting: ``"pull"`` (default: queues rebalanced among the instances) or
            ``"pop"`` (5.x POP: every instance pops from every queue, no rebalance).
        consume_from_where:
            Where a group with no stored offset starts (default: new messages only).
        consume_timestamp_ms:
            The start for ``ConsumeFromWhere.TIMESTAMP``.
        max_reconsume_times:
            Retries before the dead-letter queue (default 16).
        consume_timeout:
            Seconds a handler call may run; then it is cancelled and counts as failed.
        settings:
            Any other [`ConsumerConfig`][aiorocket.consumer.ConsumerConfig] field.
        ack_policy:
            FastStream's acknowledgement (default ``NACK_ON_ERROR``: a raised exception
            retries the message, as RocketMQ does).
        """
        check_topic(topic)
        check_group(group, "consumer")
        chosen: dict[str, Any] = dict(settings or {})
        for name, value in (
            ("consume_concurrency", concurrency),
            ("consume_from_where", consume_from_where),
            ("consume_timestamp_ms", consume_timestamp_ms),
            ("max_reconsume_times", max_reconsume_times),
            ("consume_timeout", consume_timeout),
        ):
            if value is not None:
                chosen[name] = value
        if orderly:
            chosen["orderly"] = True
        if broadcasting:
            chosen["message_model"] = MessageModel.BROADCASTING
        if consume_mode not in (None, "pull", "pop"):
            raise ConfigError(f"consume_mode must be 'pull' or 'pop', got {consume_mode!r}")
        if tags != "*" and sql is not None:
            raise ConfigError("pass either tags or sql, not both")
        options: dict[str, Any] = {
            "topic": topic, "group": group, "tags": tags, "sql": sql, "settings": chosen,
            "consume_mode": consume_mode,
        }  # fmt: skip
        config = cast("RocketBrokerConfig", self.config)
        calls = CallsCollection[ConsumerMessage]()
        specification = RocketSubscriberSpecification(
            config,
            RocketSubscriberSpecificationConfig(
                title_=title, description_=description, include_in_schema=include_in_schema,
                **options,
            ),
            calls,
        )  # fmt: skip
        subscriber = RocketSubscriber(
            RocketSubscriberConfig(
                _outer_config=config, _ack_policy=ack_policy, no_reply=no_reply, **options
            ),
            specification,
            calls,
        )
        super().subscriber(subscriber, persistent=persistent)
        return subscriber.add_call(
            parser_=parser or self._parser,
            decoder_=decoder or self._decoder,
            dependencies_=dependencies,
        )

    @override
    def publisher(  # type: ignore[override]
        self,
        topic: str,
        *,
        tags: str | None = None,
        keys: Sequence[str] = (),
        headers: dict[str, Any] | None = None,
        sharding_key: str | None = None,
        delay: float | None = None,
        delay_level: int = 0,
        priority: int | None = None,
        persistent: bool = True,
        # AsyncAPI
        title: str | None = None,
        description: str | None = None,
        schema: Any | None = None,
        include_in_schema: bool = True,
    ) -> RocketPublisher:
        """Publish to ``topic``: decorate a handler to send what it returns, or call
        ``publish()``. ``tags``, ``keys``, ``headers`` (user properties),
        ``sharding_key`` (same key, same queue, in order), ``delay`` (seconds) or
        ``delay_level``, ``priority`` apply to every message unless ``publish()``
        overrides them."""
        check_topic(topic)
        options: dict[str, Any] = {
            "topic": topic, "tags": tags, "keys": tuple(keys), "headers": headers,
            "sharding_key": sharding_key, "delay": delay, "delay_level": delay_level,
            "priority": priority,
        }  # fmt: skip
        config = cast("RocketBrokerConfig", self.config)
        spec_config = RocketPublisherSpecificationConfig(
            title_=title, description_=description, schema_=schema,
            include_in_schema=include_in_schema, **options,
        )  # fmt: skip
        publisher = RocketPublisher(
            RocketPublisherConfig(_outer_config=config, **options),
            RocketPublisherSpecification(config, spec_config),
        )
        super().publisher(publisher, persistent=persistent)
        return publisher
