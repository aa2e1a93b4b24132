"""``RocketBroker``: FastStream's broker over aiorocket's Producer and Consumers."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from fast_depends import Provider, dependency_provider
from faststream._internal.broker import BrokerUsecase
from faststream._internal.constants import EMPTY
from faststream._internal.context.repository import ContextRepo
from faststream._internal.di import FastDependsConfig
from faststream.exceptions import SetupError
from faststream.middlewares import AckPolicy
from faststream.response import PublishType
from faststream.specification.schema import BrokerSpec

from aiorocket._send_result import SendResult
from aiorocket._transport import choose_transport
from aiorocket.consumer.config import ConsumerConfig
from aiorocket.faststream._command import RocketPublishCommand
from aiorocket.faststream._config import RocketBrokerConfig
from aiorocket.faststream._logging import make_rocket_logger_state
from aiorocket.faststream._producer import RocketProducer
from aiorocket.faststream._registrator import RocketRegistrator
from aiorocket.faststream._resident import Resident
from aiorocket.faststream._subscriber import RocketSubscriber
from aiorocket.producer.config import ProducerConfig
from aiorocket.producer.producer import Producer
from aiorocket.received import ConsumerMessage

if TYPE_CHECKING:
    from types import TracebackType

    from fast_depends.dependencies import Dependant
    from fast_depends.library.serializer import SerializerProto
    from faststream._internal.basic_types import LoggerProto
    from faststream._internal.broker.registrator import Registrator
    from faststream._internal.parser import CodecProto
    from faststream._internal.types import BrokerMiddleware, CustomCallable
    from faststream.specification.schema.extra import Tag, TagDict

    from aiorocket.grpc import GrpcOptions

__all__ = ["RocketBroker"]


class RocketBroker(
    RocketRegistrator,
    BrokerUsecase[ConsumerMessage, Producer, RocketBrokerConfig],
):
    """A FastStream broker for RocketMQ.

    ```python
    broker = RocketBroker(namesrv="127.0.0.1:9876")      # remoting: NameServer + brokers
    broker = RocketBroker(proxy="127.0.0.1:8081")        # a 5.x Proxy over gRPC
    ```

    Parameters
    ----------
    namesrv:
        NameServer addresses; default ``$AIOROCKET_NAMESRV_ADDR``.
    proxy:
        A 5.x Proxy's gRPC endpoint instead (the ``grpc`` extra).
    grpc_options:
        [`aiorocket.grpc.GrpcOptions`][] (TLS, namespace, credentials) over gRPC.
    producer_group:
        The group of the broker's one [`Producer`][aiorocket.producer.Producer].
    producer_config:
        Its settings ([`ProducerConfig`][aiorocket.producer.ProducerConfig]).
    consumer_config:
        What every subscriber's consumer starts from
        ([`ConsumerConfig`][aiorocket.consumer.ConsumerConfig]); a subscriber's own
        arguments override it. ``graceful_timeout`` is its ``shutdown_timeout``.
    graceful_timeout:
        Seconds a stopping subscriber waits for its running handlers.
    ack_policy:
        The default of every subscriber (``NACK_ON_ERROR`` when unset).
    """

    _subscribers: Any

    def __init__(
        self,
        namesrv: str | Sequence[str] | None = None,
        *,
        proxy: str | None = None,
        grpc_options: GrpcOptions | None = None,
        producer_group: str = "faststream",
        producer_config: ProducerConfig | None = None,
        consumer_config: ConsumerConfig | None = None,
        graceful_timeout: float | None = 15.0,
        ack_policy: AckPolicy = EMPTY,
        decoder: CustomCallable | None = None,
        parser: CustomCallable | None = None,
        codec: CodecProto | None = None,
        dependencies: Sequence[Dependant] = (),
        middlewares: Sequence[BrokerMiddleware[Any, Any]] = (),
        routers: Iterable[Registrator[Any, Any]] = (),
        # AsyncAPI
        description: str | None = None,
        tags: Iterable[Tag | TagDict] = (),
        specification_url: str | None = None,
        # logging
        logger: LoggerProto | None = EMPTY,
        log_level: int = logging.INFO,
        # FastDepends
        apply_types: bool = True,
        serializer: SerializerProto | None = EMPTY,
        provider: Provider | None = None,
        context: ContextRepo | None = None,
    ) -> None:
        transport = choose_transport(namesrv, proxy, None, grpc_options)
        consumer_config = consumer_config or ConsumerConfig()
        if graceful_timeout is not None:
            consumer_config = replace(consumer_config, shutdown_timeout=graceful_timeout)
        self._producer_args: dict[str, Any] = {
            "group": producer_group, "namesrv": namesrv, "proxy": proxy,
            "grpc_options": grpc_options, "config": producer_config,
        }  # fmt: skip
        # Built at each connect (a closed Producer does not open again; without an
        # address the broker still works in memory, under TestRocketBroker).
        self._producer_client: Producer | None = None
        self._resident: Resident | None = None
        if specification_url is None:
            specification_url = _address(proxy or namesrv)
        super().__init__(
            config=RocketBrokerConfig(
                namesrv=namesrv,
                proxy=proxy,
                grpc_options=grpc_options,
                consumer_config=consumer_config,
                producer=RocketProducer(parser, decoder),
                broker_middlewares=middlewares,
                broker_parser=parser,
                broker_decoder=decoder,
                broker_codec=codec,
                logger=make_rocket_logger_state(logger=logger, log_level=log_level),
                fd_config=FastDependsConfig(
                    use_fastdepends=apply_types,
                    serializer=serializer,
                    provider=provider or dependency_provider,
                    context=context or ContextRepo(),
                ),
                broker_dependencies=dependencies,
                graceful_timeout=graceful_timeout,
                ack_policy=ack_policy,
                extra_context={"broker": self},
            ),
            specification=BrokerSpec(
                url=[specification_url],
                protocol="rocketmq",
                protocol_version="grpc" if transport == "grpc" else "remoting",
                description=description,
                tags=tags,
                security=None,
            ),
            routers=routers,
        )

    @property
    def producer(self) -> Producer | None:
        """The aiorocket producer the broker publishes with (once connected)."""
        return self._producer_client

    async def _connect(self) -> Producer:
        client = self._producer_client = Producer(**self._producer_args)
        self._resident = Resident(client, "producer")
        await self._resident.open()
        config = self.config.broker_config
        producer = config.producer
        assert isinstance(producer, RocketProducer)
        producer.connect(client, config.fd_config._serializer, config.broker_codec)
        return client

    async def start(self) -> None:
        self.check_groups()
        await self.connect()
        await super().start()

    def check_groups(self) -> None:
        """SetupError for two subscribers (with handlers) of one consumer group: what a
        real start refuses, ``TestRocketBroker`` refuses too."""
        groups: dict[str, str] = {}
        for sub in self.subscribers:
            assert isinstance(sub, RocketSubscriber)
            if sub.group in groups and sub.calls:
                raise SetupError(
                    f"consumer group {sub.group!r} has two subscribers ({groups[sub.group]!r} "
                    f"and {sub.topic!r}): a RocketMQ group has one subscription per instance; "
                    "give each subscriber its own group"
                )
            if sub.calls:
                groups[sub.group] = sub.topic

    async def stop(
        self,
        exc_type: type[BaseException] | None = None,
        exc_val: BaseException | None = None,
        exc_tb: TracebackType | None = None,
    ) -> None:
        await super().stop(exc_type, exc_val, exc_tb)
        resident, self._resident = self._resident, None
        if resident is not None:
            producer = self.config.broker_config.producer
            if isinstance(producer, RocketProducer):
                producer.disconnect()
            await resident.close()
        self._connection = None

    async def ping(self, timeout: float | None = None) -> bool:
        """Connected, the producer open, and no started subscriber's consumer died."""
        client = self._producer_client
        if self._connection is None or client is None or client.closed:
            return False
        return not any(isinstance(sub, RocketSubscriber) and sub.died for sub in self.subscribers)

    async def publish(
        self,
        message: Any = None,
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
        """Send ``message`` to ``topic``; returns where it landed (message id, queue,
        offset). ``headers`` become user properties; ``delay`` is seconds from now;
        ``priority`` (RocketMQ 5.4+, a PRIORITY topic) puts it ahead for POP consumers."""
        cmd = RocketPublishCommand(
            message,
            _publish_type=PublishType.PUBLISH,
            topic=topic,
            headers=headers,
            correlation_id=correlation_id or self.config.id_generator(),
            reply_to=reply_to,
            tags=tags,
            keys=keys,
            sharding_key=sharding_key,
            delay=delay,
            delay_level=delay_level,
            priority=priority,
            timeout=timeout,
        )
        result: SendResult = await self._basic_publish(cmd, producer=self.config.producer)
        return result

    async def publish_batch(  # type: ignore[override]
        self,
        *messages: Any,
        topic: str,
        tags: str | None = None,
        keys: Sequence[str] = (),
        headers: dict[str, Any] | None = None,
        correlation_id: str | None = None,
        timeout: float | None = None,
    ) -> list[SendResult]:
        """Send ``messages`` to ``topic`` in one batch request (remoting)."""
        cmd = RocketPublishCommand(
            *messages,
            _publish_type=PublishType.PUBLISH,
            topic=topic,
            headers=headers,
            correlation_id=correlation_id or self.config.id_generator(),
            tags=tags,
            keys=keys,
            timeout=timeout,
        )
        result: list[SendResult] = await self._basic_publish_batch(
            cmd, producer=self.config.producer
        )
        return result

    async def request(  # type: ignore[override]
        self, message: Any = None, topic: str = "", *, timeout: float = 0.5,
        headers: dict[str, Any] | None = None, correlation_id: str | None = None,
    ) -> Any:  # fmt: skip
        """Send ``message`` to ``topic`` as a RocketMQ request and return the reply (a
        subscriber's return value, or a Java replier's), parsed (FastStream's RPC).
        ``timeout`` (seconds) covers the send and the wait (``ReplyTimeoutError``).
        Remoting only (``Producer.request``); ``TestRocketBroker`` does it in memory."""
        cmd = RocketPublishCommand(
            message, _publish_type=PublishType.REQUEST, topic=topic, headers=headers,
            correlation_id=correlation_id or self.config.id_generator(), timeout=timeout,
        )  # fmt: skip
        return await self._basic_request(cmd, producer=self.config.producer)


def _address(addr: str | Sequence[str] | None) -> str:
    if addr is None:
        return os.environ.get("AIOROCKET_NAMESRV_ADDR", "127.0.0.1:9876")
    return addr if isinstance(addr, str) else ";".join(addr)
