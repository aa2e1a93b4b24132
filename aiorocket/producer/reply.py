"""Request-reply over remoting, as the Java client does it (interoperable both ways).

The requester sends an ordinary message carrying ``CORRELATION_ID`` (a fresh id),
``REPLY_TO_CLIENT`` (its client id) and ``TTL`` (its timeout in ms), and waits. The
broker stores it, adding ``CLUSTER`` (its cluster's name) as it does to every message.
The replier, having consumed it, sends a reply to the topic ``<CLUSTER>_REPLY_TOPIC``
with ``MSG_TYPE=reply`` and the request's three properties, as SEND_REPLY_MESSAGE_V2
(``aiorocket.client.broker`` picks that request code from ``MSG_TYPE``). The broker
receiving it pushes it (PUSH_REPLY_MESSAGE_TO_CLIENT) on the connection the requester's
client id heartbeats on, so the requester must be a registered producer on that broker
(``RemotingProducer.request`` first heartbeats the brokers of the request topic and
of its cluster's reply topic). ``Replies``
hands each push to the request waiting for its correlation id; a push nobody waits for
(a reply after its request timed out, or to another process) is answered and dropped.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import anyio

from aiorocket.errors import (
    ConfigError,
    MessageDecodeError,
    ReplyTimeoutError,
    UnsupportedTransportError,
)
from aiorocket.message import (
    PROPERTY_CLUSTER,
    PROPERTY_CORRELATION_ID,
    PROPERTY_MESSAGE_TTL,
    PROPERTY_MESSAGE_TYPE,
    PROPERTY_REPLY_TO_CLIENT,
    REPLY_MESSAGE_TYPE,
    Message,
    MessageExt,
)
from aiorocket.protocol.codes import ResponseCode
from aiorocket.protocol.command import RemotingCommand
from aiorocket.protocol.message_codec import decode_properties, decompress_body
from aiorocket.remoting.connection import Connection

__all__ = [
    "REPLY_TOPIC_SUFFIX",
    "Replies",
    "create_reply",
    "reply_topic",
    "request_properties",
]

#: MixAll.REPLY_TOPIC_POSTFIX with its separator: the reply topic of cluster ``c`` is
#: ``c + REPLY_TOPIC_SUFFIX``, created by every broker of the cluster at start.
REPLY_TOPIC_SUFFIX = "_REPLY_TOPIC"

_SYSFLAG_COMPRESSED = 0x1


def reply_topic(cluster: str) -> str:
    """The topic replies to a request stored in ``cluster`` are sent to."""
    return f"{cluster}{REPLY_TOPIC_SUFFIX}"


def request_properties(correlation_id: str, client_id: str, timeout: float) -> dict[str, str]:
    """What makes a message a request (DefaultMQProducerImpl.prepareSendRequest's)."""
    return {
        PROPERTY_CORRELATION_ID: correlation_id,
        PROPERTY_REPLY_TO_CLIENT: client_id,
        PROPERTY_MESSAGE_TTL: str(max(1, int(timeout * 1000))),
    }


#: why a request a gRPC consumer received cannot be answered (seen on 5.5.0's Proxy)
_NO_REPLY_OVER_GRPC = (
    "a message received over gRPC (through the Proxy) cannot be replied to: the Proxy "
    "hands on none of the request's CLUSTER, CORRELATION_ID and REPLY_TO_CLIENT "
    "properties (system properties are not passed to gRPC clients), so the reply has no "
    "address; consume request topics over remoting (Consumer(..., namesrv=...))"
)


def _through_proxy(msg: MessageExt) -> bool:
    """``msg`` was received over gRPC: only the Proxy gives a message its own id."""
    return bool(getattr(msg, "_message_id", ""))


def create_reply(
    request: MessageExt,
    body: bytes,
    *,
    properties: Mapping[str, str] | None = None,
    tags: str | None = None,
) -> Message:
    """The reply to ``request`` (a received request message) carrying ``body``
    (MessageUtil.createReplyMessage). ``ConfigError`` if ``request`` is not a request:
    no ``CLUSTER`` (not received from a broker) or no ``CORRELATION_ID`` /
    ``REPLY_TO_CLIENT`` (not sent by ``request``); ``UnsupportedTransportError`` if it was
    received over gRPC (the Proxy does not hand those properties on)."""
    props = request.properties
    cluster = props.get(PROPERTY_CLUSTER)
    missing = [
        name for name in (PROPERTY_CLUSTER, PROPERTY_CORRELATION_ID, PROPERTY_REPLY_TO_CLIENT)
        if not props.get(name)
    ]  # fmt: skip
    if missing or cluster is None:
        if _through_proxy(request):
            raise UnsupportedTransportError(_NO_REPLY_OVER_GRPC)
        raise ConfigError(
            f"message {props.get('UNIQ_KEY', '?')} of {request.topic!r} is not a request "
            f"(no {', '.join(missing)} property): only a message sent with "
            "Producer.request (or Java's DefaultMQProducer.request) can be replied to"
        )
    reply_props = dict(properties or {})
    reply_props[PROPERTY_MESSAGE_TYPE] = REPLY_MESSAGE_TYPE
    for name in (PROPERTY_CORRELATION_ID, PROPERTY_REPLY_TO_CLIENT, PROPERTY_MESSAGE_TTL):
        if name in props:
            reply_props[name] = props[name]
    return Message(reply_topic(cluster), body, tags=tags, properties=reply_props)


def parse_reply(cmd: RemotingCommand) -> MessageExt:
    """The reply a PUSH_REPLY_MESSAGE_TO_CLIENT carries (ReplyMessageRequestHeader)."""
    ext = cmd.ext_fields
    sys_flag = cmd.ext_int("sysFlag", 0)
    body = cmd.body
    if sys_flag & _SYSFLAG_COMPRESSED:
        body = decompress_body(body, sys_flag)
    return MessageExt(
        topic=ext.get("topic", ""),
        body=body,
        properties=decode_properties(ext.get("properties", "")),
        queue_id=cmd.ext_int("queueId", 0),
        queue_offset=-1,
        commit_log_offset=-1,
        flag=cmd.ext_int("flag", 0),
        sys_flag=sys_flag,
        born_timestamp=cmd.ext_int("bornTimestamp", 0),
        born_host=ext.get("bornHost", "").lstrip("/"),
        store_timestamp=cmd.ext_int("storeTimestamp", 0),
        store_host=ext.get("storeHost", "").lstrip("/"),
        reconsume_times=cmd.ext_int("reconsumeTimes", 0),
    )


class _Waiter:
    __slots__ = ("event", "reply")

    def __init__(self) -> None:
        self.event = anyio.Event()
        self.reply: MessageExt | None = None


class Replies:
    """The requests waiting for their replies, by correlation id (module docstring)."""

    def __init__(self, log: Any) -> None:
        self._waiting: dict[str, _Waiter] = {}
        self._log = log
        #: replies no request waited for (late, or not ours): answered and dropped
        self.dropped = 0

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    @staticmethod
    def new_id() -> str:
        """A correlation id (a UUID, as CorrelationIdUtil makes)."""
        return str(uuid.uuid4())

    @contextmanager
    def expect(self, correlation_id: str) -> Iterator[_Waiter]:
        """Wait for the reply of ``correlation_id`` within the block; forgotten on exit
        (a reply after it is dropped), however the block ends."""
        waiter = self._waiting[correlation_id] = _Waiter()
        try:
            yield waiter
        finally:
            self._waiting.pop(correlation_id, None)

    @staticmethod
    async def wait(waiter: _Waiter, correlation_id: str, timeout: float) -> MessageExt:
        with anyio.move_on_after(timeout):
            await waiter.event.wait()
        if waiter.reply is None:
            raise ReplyTimeoutError(f"no reply to request {correlation_id} within {timeout:.3f}s")
        return waiter.reply

    async def on_push(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand | None:
        """Dispatcher handler for PUSH_REPLY_MESSAGE_TO_CLIENT: hand the reply over."""
        try:
            reply = parse_reply(cmd)
        except MessageDecodeError as exc:
            self._log.warning("reply_invalid", broker=conn.address, error=str(exc))
            return RemotingCommand.response_to(cmd, ResponseCode.SYSTEM_ERROR, str(exc))
        correlation_id = reply.properties.get(PROPERTY_CORRELATION_ID, "")
        waiter = self._waiting.get(correlation_id)
        if waiter is None or waiter.reply is not None:
            self.dropped += 1
            self._log.info("reply_dropped", broker=conn.address, correlation_id=correlation_id)
        else:
            waiter.reply = reply
            waiter.event.set()
        return RemotingCommand.response_to(cmd)
