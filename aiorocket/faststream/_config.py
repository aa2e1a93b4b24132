"""The broker's configuration as FastStream's endpoints read it, and the subscribers'
and publishers' own options."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from faststream._internal.configs import (
    BrokerConfig,
    PublisherSpecificationConfig,
    PublisherUsecaseConfig,
    SubscriberSpecificationConfig,
    SubscriberUsecaseConfig,
)
from faststream._internal.constants import EMPTY
from faststream.middlewares import AckPolicy

from aiorocket.consumer.config import ConsumerConfig
from aiorocket.consumer.over_grpc import ConsumeMode

if TYPE_CHECKING:
    from aiorocket.grpc import GrpcOptions

__all__ = [
    "ConsumerOptions",
    "PublisherOptions",
    "RocketBrokerConfig",
    "RocketPublisherConfig",
    "RocketPublisherSpecificationConfig",
    "RocketSubscriberConfig",
    "RocketSubscriberSpecificationConfig",
]


@dataclass(kw_only=True)
class RocketBrokerConfig(BrokerConfig):
    """Where the broker's clients connect, and the defaults of every subscriber."""

    namesrv: str | Sequence[str] | None = None
    proxy: str | None = None
    grpc_options: GrpcOptions | None = None
    #: settings every subscriber's consumer starts from
    consumer_config: ConsumerConfig = field(default_factory=ConsumerConfig)


@dataclass(kw_only=True)
class ConsumerOptions:
    """One subscriber: its topic, group and the consumer settings it chose."""

    topic: str
    group: str
    tags: str = "*"
    sql: str | None = None
    #: remoting: "pull" (default) or "pop" (5.x POP); over gRPC always pop
    consume_mode: ConsumeMode | None = None
    #: ConsumerConfig fields set on this subscriber (the broker's config gives the rest)
    settings: dict[str, Any] = field(default_factory=dict)

    def filter_text(self) -> str:
        return f"SQL92 filter `{self.sql}`" if self.sql is not None else f"tags `{self.tags}`"


@dataclass(kw_only=True)
class RocketSubscriberConfig(ConsumerOptions, SubscriberUsecaseConfig):
    @property
    def ack_policy(self) -> AckPolicy:
        if self._ack_policy is EMPTY:
            outer = self._outer_config.ack_policy
            # RocketMQ's own rule: a failed message is retried, then dead-lettered.
            return AckPolicy.NACK_ON_ERROR if outer is EMPTY else outer
        return self._ack_policy


@dataclass(kw_only=True)
class RocketSubscriberSpecificationConfig(ConsumerOptions, SubscriberSpecificationConfig):
    pass


@dataclass(kw_only=True)
class PublisherOptions:
    """A publisher's topic and the RocketMQ options of every message it sends."""

    topic: str
    tags: str | None = None
    keys: Sequence[str] = ()
    headers: dict[str, Any] | None = None
    sharding_key: str | None = None
    delay: float | None = None
    delay_level: int = 0
    priority: int | None = None


@dataclass(kw_only=True)
class RocketPublisherConfig(PublisherOptions, PublisherUsecaseConfig):
    pass


@dataclass(kw_only=True)
class RocketPublisherSpecificationConfig(PublisherOptions, PublisherSpecificationConfig):
    pass
