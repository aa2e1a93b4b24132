"""A FastStream subscriber: one aiorocket ``Consumer`` (one group) whose handler is
FastStream's message processing (parser, filters, dependencies, middlewares, publishers)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from faststream._internal.endpoint.publisher.fake import FakePublisher
from faststream._internal.endpoint.subscriber import SubscriberSpecification, SubscriberUsecase
from faststream.exceptions import FeatureNotSupportedException, StopConsume
from faststream.specification.asyncapi.utils import resolve_payloads
from faststream.specification.schema import Message, Operation, SubscriberSpec

from aiorocket._settings import apply_settings
from aiorocket.consumer.config import ConsumerConfig, MessageModel
from aiorocket.consumer.consumer import Consumer
from aiorocket.faststream._command import RocketPublishCommand
from aiorocket.faststream._config import (
    RocketBrokerConfig,
    RocketSubscriberConfig,
    RocketSubscriberSpecificationConfig,
)
from aiorocket.faststream._message import (
    CURRENT_OUTCOME,
    REPLY_TO,
    GroupParser,
    Outcome,
    decode,
    rocketmq_request,
)
from aiorocket.faststream._resident import Resident
from aiorocket.received import ConsumerMessage
from aiorocket.results import HandlerResult

if TYPE_CHECKING:
    from faststream._internal.endpoint.subscriber.call_item import CallsCollection
    from faststream._internal.producer import ProducerProto
    from faststream.message import StreamMessage
    from faststream.response import PublishCommand

__all__ = ["RocketSubscriber", "RocketSubscriberSpecification"]


class RocketSubscriberSpecification(
    SubscriberSpecification[RocketBrokerConfig, RocketSubscriberSpecificationConfig]
):
    """The subscriber in the AsyncAPI document: its channel is the topic, named with the
    group (as MQTT names a shared subscription's channel with its group), and its
    description says the group and the filter."""

    @property
    def topic(self) -> str:
        return f"{self._outer_config.prefix}{self.config.topic}"

    @property
    def channel_labels(self) -> list[str]:
        return [f"{self.topic}:{self.config.group}"]

    def get_schema(self) -> dict[str, SubscriberSpec]:
        cfg = self.config
        kind = []
        if cfg.settings.get("orderly"):
            kind.append("orderly")
        if str(cfg.settings.get("message_model", "")).upper().endswith("BROADCASTING"):
            kind.append("broadcasting")
        rocket = f"RocketMQ consumer group `{cfg.group}`, {cfg.filter_text()}" + "".join(
            f", {k}" for k in kind
        )
        description = "\n\n".join(filter(None, [self.description, rocket + "."]))
        return {
            self.name: SubscriberSpec(
                address=self.topic,
                description=description,
                operation=Operation(
                    message=Message(
                        title=f"{self.name}:Message",
                        payload=resolve_payloads(self.get_payloads()),
                    ),
                    bindings=None,
                ),
                bindings=None,
            )
        }


class _ReplyPublisher(FakePublisher):
    """Publishes a handler's result to the topic a message's ``reply_to`` names."""

    def __init__(
        self, producer: ProducerProto[Any], topic: str, request: ConsumerMessage | None
    ) -> None:
        super().__init__(producer=producer)
        self.topic = topic
        self.rocketmq_request = request

    def patch_command(self, cmd: PublishCommand) -> RocketPublishCommand:
        cmd = super().patch_command(cmd)
        real = RocketPublishCommand.from_cmd(cmd)
        real.destination = self.topic
        real.reply_request = self.rocketmq_request
        return real


class RocketSubscriber(SubscriberUsecase[ConsumerMessage]):
    """One ``@broker.subscriber(topic, group=...)``: a consumer of ``group`` subscribed to
    ``topic``, started and stopped with the broker."""

    _outer_config: RocketBrokerConfig

    def __init__(
        self,
        config: RocketSubscriberConfig,
        specification: RocketSubscriberSpecification,
        calls: CallsCollection[ConsumerMessage],
    ) -> None:
        broadcasting = config.settings.get("message_model") == MessageModel.BROADCASTING
        config.parser = GroupParser(config.group, broadcasting=broadcasting)
        config.decoder = decode
        # Bad settings fail where they are written, not at start.
        apply_settings(ConsumerConfig(), config.settings, "consumer")
        super().__init__(config, specification, calls)  # type: ignore[arg-type]
        self.options = config
        self.consumer: Consumer | None = None
        self._resident: Resident | None = None

    @property
    def topic(self) -> str:
        return f"{self._outer_config.prefix}{self.options.topic}"

    @property
    def group(self) -> str:
        return self.options.group

    def build_consumer(self) -> Consumer:
        """The consumer this subscriber runs (not started)."""
        broker = self._outer_config
        config = apply_settings(broker.consumer_config, self.options.settings, "consumer")
        consumer = Consumer(
            self.group,
            broker.namesrv,
            proxy=broker.proxy,
            grpc_options=broker.grpc_options,
            handler=self._handle,
            config=config,
            consume_mode=self.options.consume_mode,
        )
        consumer.subscribe(self.topic, self.options.tags, sql=self.options.sql)
        return consumer

    async def start(self) -> None:
        await super().start()
        if self.calls:
            self.consumer = self.build_consumer()
            self._resident = Resident(
                self.consumer, f"consumer {self.group}", on_failure=self._consumer_died
            )
            await self._resident.open()
        self._post_start()

    @property
    def died(self) -> bool:
        """Its consumer ended while the subscriber was started (not stopped by it)."""
        resident = self._resident
        return resident is not None and resident.failure is not None

    def _consumer_died(self, exc: BaseException) -> None:
        # No message is taken any more: say so where FastStream and health checks look.
        self.running = False

    async def stop(self) -> None:
        # The consumer stops taking messages, lets running handlers finish (its
        # shutdown_timeout) and settles them; what never started is redelivered.
        resident, self._resident = self._resident, None
        if resident is not None:
            await resident.close()
        await super().stop()

    async def _handle(self, raw: ConsumerMessage) -> HandlerResult:
        """The consumer's handler: FastStream processes ``raw``; what the handler (or the
        ack policy) decided is the result the consumer settles with. Undecided (the
        MANUAL policy): consumed if the handler returned, retried if it raised."""
        outcome = Outcome()
        token = CURRENT_OUTCOME.set(outcome)
        failed = False
        try:
            await self.process_message(raw)
        except StopConsume:
            self._stop_soon()
        except SystemExit:
            self._stop_soon()
            if app := self._outer_config.context.get("app"):
                app.exit()
        except Exception as exc:
            # logged by FastStream's CriticalLogMiddleware; the dead-letter log names it
            # too (not the False or nack it turns into)
            failed, raw._failure = True, exc
        finally:
            CURRENT_OUTCOME.reset(token)
        if outcome.decided:
            return outcome.result
        return False if failed else None

    def _stop_soon(self) -> None:
        # Not awaited here: closing the consumer waits for this very handler call.
        task = asyncio.get_running_loop().create_task(self.stop())
        self._stopping = task  # keep a reference until it is done

    async def get_one(self, *, timeout: float = 5) -> NoReturn:
        raise FeatureNotSupportedException(
            "RocketSubscriber has no get_one(): decorate a handler (or use aiorocket's "
            "Consumer with async for)"
        )

    def __aiter__(self) -> AsyncIterator[StreamMessage[ConsumerMessage]]:
        raise FeatureNotSupportedException(
            "RocketSubscriber cannot be iterated: decorate a handler (or use aiorocket's "
            "Consumer with async for)"
        )

    def _make_response_publisher(
        self, message: StreamMessage[ConsumerMessage]
    ) -> Sequence[FakePublisher]:
        raw = message.raw_message
        # FastStream's own reply_to header names a topic; a RocketMQ request is replied to
        request = raw if REPLY_TO not in message.headers and rocketmq_request(raw) else None
        return (_ReplyPublisher(self._outer_config.producer, message.reply_to, request),)

    def get_log_context(self, message: StreamMessage[ConsumerMessage] | None) -> dict[str, str]:
        return {
            "topic": self.topic,
            "group": self.group,
            "message_id": getattr(message, "message_id", ""),
        }
