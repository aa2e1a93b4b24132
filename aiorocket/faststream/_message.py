"""The message a FastStream handler sees, and how its ack/nack/reject become a settle.

FastStream acknowledges through ``StreamMessage.ack/nack/reject`` (its
``AcknowledgementMiddleware``, or the handler itself). Inside a subscriber these only
record the decision: the subscriber's bridge hands it to aiorocket's consumer runtime as
the handler's result, so one place settles every message whatever the strategy
(concurrent, orderly, broadcasting) and transport. Outside a subscriber (a message got
with ``get_one`` or ``async for``) they settle the message at once.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any

from faststream.message import StreamMessage, decode_message

from aiorocket.message import (
    PROPERTY_CLUSTER,
    PROPERTY_CORRELATION_ID,
    PROPERTY_REPLY_TO_CLIENT,
    MessageExt,
    is_system_property,
)
from aiorocket.producer.reply import reply_topic
from aiorocket.received import ConsumerMessage
from aiorocket.results import HandlerResult, Reconsume

__all__ = [
    "CONTENT_TYPE", "CORRELATION_ID", "REPLY_TO", "GroupParser", "Outcome", "RocketMessage",
    "parse",
]  # fmt: skip

#: user properties carrying FastStream's message metadata (the names FastStream's Kafka
#: broker gives its headers)
CONTENT_TYPE = "content-type"
CORRELATION_ID = "correlation_id"
REPLY_TO = "reply_to"


class Outcome:
    """What the handler decided for one message (unset: nothing decided)."""

    __slots__ = ("decided", "result")

    def __init__(self) -> None:
        self.decided = False
        self.result: HandlerResult = None

    def decide(self, result: HandlerResult) -> None:
        self.decided, self.result = True, result


#: set by a subscriber around one handler call; read when the message is parsed (in the
#: same task, before the handler runs: a sync handler's thread sees the captured holder)
CURRENT_OUTCOME: ContextVar[Outcome | None] = ContextVar("aiorocket_faststream_outcome",
                                                         default=None)  # fmt: skip


class RocketMessage(StreamMessage[ConsumerMessage]):
    """A RocketMQ message in FastStream: ``raw_message`` is aiorocket's
    [`ConsumerMessage`][aiorocket.consumer.ConsumerMessage] (tags, keys, queue, offset,
    ``reconsume_times``); ``headers`` are its user properties.

    * ``ack()``: consumed.
    * ``nack(delay_level=None, delay=None)``: retried by the group's retry policy
      (remoting: the retry topic with the broker's backoff, or ``delay_level``; gRPC:
      the server's policy), or after ``delay`` seconds (``Reconsume(delay=)``; so does
      ``raise NackMessage(delay=5)``), then the dead-letter queue after
      ``max_reconsume_times``.
    * ``reject()``: straight to the group's dead-letter queue (``Reconsume(-1)``).
    """

    def __init__(self, *args: Any, group: str | None = None, broadcasting: bool = False,
                 **kwargs: Any) -> None:  # fmt: skip
        super().__init__(*args, **kwargs)
        #: the consumer group that received it (None: a request's reply)
        self.group = group
        #: received by a broadcasting subscriber
        self.broadcasting = broadcasting
        self._outcome = CURRENT_OUTCOME.get()

    async def ack(self) -> None:
        if self.committed is None:
            await self._settle(None)
        await super().ack()

    async def nack(self, delay_level: int | None = None, delay: float | None = None) -> None:
        if self.committed is None:
            if delay is not None:
                await self._settle(Reconsume(delay=delay))
            else:
                await self._settle(False if delay_level is None else Reconsume(delay_level))
        await super().nack()

    async def reject(self) -> None:
        if self.committed is None:
            await self._settle(Reconsume(-1))
        await super().reject()

    async def _settle(self, result: HandlerResult) -> None:
        if self._outcome is not None:
            self._outcome.decide(result)
            return
        raw = self.raw_message
        if result is None:
            await raw.ack()
        elif isinstance(result, Reconsume):
            await raw.nack(result.delay_level, delay=result.delay)
        else:
            await raw.nack()


def headers_of(raw: ConsumerMessage) -> dict[str, str]:
    """The application's properties of a message (the client's and broker's left out)."""
    return {k: v for k, v in raw.properties.items() if not is_system_property(k)}


async def parse(raw: ConsumerMessage) -> RocketMessage:
    """FastStream's parser: aiorocket's message to a ``RocketMessage``."""
    return parse_for(raw, None, broadcasting=False)


def rocketmq_request(raw: MessageExt) -> bool:
    """``raw`` was sent by ``Producer.request`` (or Java's): its answer is a reply."""
    props = raw.properties
    return all(props.get(name) for name in (
        PROPERTY_CLUSTER, PROPERTY_CORRELATION_ID, PROPERTY_REPLY_TO_CLIENT
    ))  # fmt: skip


def parse_for(raw: ConsumerMessage, group: str | None, *, broadcasting: bool) -> RocketMessage:
    headers = headers_of(raw)
    reply_to = headers.get(REPLY_TO, "")
    if not reply_to and rocketmq_request(raw):  # the handler's result is its reply
        reply_to = reply_topic(raw.properties[PROPERTY_CLUSTER])
    return RocketMessage(
        raw_message=raw,
        body=raw.body,
        headers=headers,
        reply_to=reply_to,
        content_type=headers.get(CONTENT_TYPE),
        correlation_id=headers.get(CORRELATION_ID),
        message_id=raw.msg_id,
        group=group,
        broadcasting=broadcasting,
    )


class GroupParser:
    """A subscriber's parser: its messages carry its group (for telemetry and logs)."""

    __slots__ = ("broadcasting", "group")

    def __init__(self, group: str, *, broadcasting: bool) -> None:
        self.group = group
        self.broadcasting = broadcasting

    async def __call__(self, raw: ConsumerMessage) -> RocketMessage:
        return parse_for(raw, self.group, broadcasting=self.broadcasting)


async def decode(msg: StreamMessage[Any]) -> Any:
    """FastStream's decoder: JSON by content type, else text or bytes."""
    return decode_message(msg)
