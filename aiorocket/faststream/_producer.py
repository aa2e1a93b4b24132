"""FastStream's producer seam over aiorocket's ``Producer``."""

from __future__ import annotations

from dataclasses import fields
from typing import TYPE_CHECKING

from faststream._internal.endpoint.utils import ParserComposition
from faststream._internal.parser import DefaultCodec
from faststream._internal.producer import ProducerProto
from faststream.exceptions import IncorrectState

from aiorocket._send_result import SendResult
from aiorocket.faststream._command import RocketPublishCommand, to_message
from aiorocket.faststream._message import decode, parse
from aiorocket.message import Message, MessageExt
from aiorocket.received import ConsumerMessage

if TYPE_CHECKING:
    from fast_depends.library.serializer import SerializerProto
    from faststream._internal.parser import CodecProto
    from faststream._internal.types import CustomCallable

    from aiorocket.producer import Producer

__all__ = ["RocketProducer", "encode_all"]


async def encode_all(
    cmd: RocketPublishCommand, codec: CodecProto, serializer: SerializerProto | None
) -> list[Message]:
    """The aiorocket messages of every body of ``cmd``."""
    out = []
    # A None body is no body to FastStream's batch view; RocketMQ refuses it as empty.
    for body in cmd.batch_bodies or (cmd.body,):
        data, content_type = await codec.encode(body, serializer)
        out.append(to_message(cmd, data, content_type))
    return out


class RocketProducer(ProducerProto[RocketPublishCommand]):
    """Publishes through the broker's aiorocket ``Producer`` once it is connected."""

    def __init__(self, parser: CustomCallable | None, decoder: CustomCallable | None) -> None:
        self._producer: Producer | None = None
        self.serializer: SerializerProto | None = None
        self.codec: CodecProto = DefaultCodec()
        self._parser = ParserComposition(parser, parse)
        self._decoder = ParserComposition(decoder, decode)

    def connect(
        self, producer: Producer, serializer: SerializerProto | None, codec: CodecProto | None
    ) -> None:
        self._producer = producer
        self.serializer = serializer
        self.codec = codec or DefaultCodec()

    def disconnect(self) -> None:
        self._producer = None

    def _client(self) -> Producer:
        if self._producer is None:
            raise IncorrectState("RocketBroker is not connected: start it (or use 'async with')")
        return self._producer

    async def publish(self, cmd: RocketPublishCommand) -> SendResult:
        producer = self._client()
        (msg,) = await encode_all(cmd, self.codec, self.serializer)
        if cmd.reply_request is not None:  # a handler's answer to a RocketMQ request
            return await producer.reply(
                cmd.reply_request, msg.body, properties=msg.properties, timeout=cmd.timeout
            )
        return await producer.send(msg, timeout=cmd.timeout, sharding_key=cmd.sharding_key)

    async def publish_batch(self, cmd: RocketPublishCommand) -> list[SendResult]:
        producer = self._client()
        messages = await encode_all(cmd, self.codec, self.serializer)
        return await producer.send_batch(
            messages, timeout=cmd.timeout, sharding_key=cmd.sharding_key
        )

    async def request(self, cmd: RocketPublishCommand) -> ConsumerMessage:
        """RocketMQ's request-reply (``Producer.request``); remoting only."""
        producer = self._client()
        (msg,) = await encode_all(cmd, self.codec, self.serializer)
        reply = await producer.request(msg, timeout=cmd.timeout)
        # the parser's type; a reply is not settled (it was pushed, not consumed)
        return ConsumerMessage(**{f.name: getattr(reply, f.name) for f in fields(MessageExt)})
