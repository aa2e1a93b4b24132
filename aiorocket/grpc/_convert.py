"""Between aiorocket's message types and the v2 API's ``Message``.

Outgoing: an [`aiorocket.Message`][] becomes a ``Message`` whose system properties
carry the tag, keys, client message id (the same ``UNIQ_KEY`` format the remoting
producer uses, so both transports' consumers see one id), message group and delivery
time; user properties travel as they are. The Proxy maps these to the broker's stored
properties, so a remoting consumer reads the same tags, keys and properties.

Incoming: a received ``Message`` becomes a ``MessageExt`` whose ``properties``
hold the user properties plus TAGS/KEYS/UNIQ_KEY, as a remoting consumer would see them.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from aiorocket._unique_id import create_unique_id
from aiorocket._validate import check_body, check_schedule, check_topic
from aiorocket.errors import ConfigError, UnsupportedTransportError
from aiorocket.grpc import _pb as pb
from aiorocket.message import (
    KEY_SEPARATOR,
    PROPERTY_KEYS,
    PROPERTY_LITE_TOPIC,
    PROPERTY_SHARDING_KEY,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    Message,
)
from aiorocket.namespace import wrap
from aiorocket.protocol.message_codec import decompress_sniffed

__all__ = [
    "HOSTNAME",
    "Outgoing",
    "decode_body",
    "ms_to_datetime",
    "prepare",
    "properties_of",
    "to_pb_message",
]

HOSTNAME = socket.gethostname()

#: properties the API carries in system fields: users must not set them as properties.
_SYSTEM_KEYS = frozenset({PROPERTY_TAGS, PROPERTY_KEYS})


EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def ms_to_datetime(ms: int) -> datetime:
    return EPOCH + timedelta(milliseconds=ms)


@dataclass(frozen=True, slots=True)
class Outgoing:
    """A validated message to send, field by field (both encoders start from this)."""

    topic: str
    namespace: str
    user_properties: dict[str, str]
    tag: str | None
    keys: list[str]
    message_id: str
    message_type: int
    born_ms: int
    born_host: str
    message_group: str | None
    delivery_ms: int | None
    body: bytes
    #: a priority message's priority (5.4+)
    priority: int | None = None
    #: a lite message's lite topic (5.5+)
    lite_topic: str | None = None
    #: a half message's ``orphaned_transaction_recovery_duration`` in seconds: the broker
    #: checks it back no sooner (its ``CHECK_IMMUNITY_TIME_IN_SECONDS``)
    recovery_s: int | None = None


def prepare(
    msg: Message,
    *,
    max_body_size: int,
    namespace: str = "",
    message_group: str | None = None,
    transactional: bool = False,
    recovery_s: int | None = None,
) -> Outgoing:
    """Validate ``msg`` and give it its client message id (kept if it carries UNIQ_KEY)."""
    check_topic(msg.topic)
    check_body(msg, max_body_size)
    check_schedule(msg)
    if msg.delay_level:
        raise UnsupportedTransportError(
            "delay levels exist only on the remoting transport; over gRPC set "
            "deliver_time_ms (an absolute delivery time)"
        )
    if msg.flag:
        raise UnsupportedTransportError("message flag exists only on the remoting transport")
    clash = _SYSTEM_KEYS.intersection(msg.properties)
    if clash:
        raise ConfigError(f"properties {sorted(clash)} are set through the message's fields")
    user = dict(msg.properties)
    msg_id = user.pop(PROPERTY_UNIQ_KEY, None) or create_unique_id()
    lite = msg.lite_topic
    if lite is not None and (
        transactional or message_group is not None or msg.deliver_time_ms is not None
        or msg.priority is not None
    ):  # fmt: skip
        # The Proxy types a message by one of these; a lite message is none of the others.
        raise ConfigError("a lite message cannot be transactional, FIFO, delayed or prioritised")
    if transactional:
        if message_group is not None or msg.deliver_time_ms is not None:
            raise ConfigError("a transactional message cannot be FIFO or delayed")
        mtype = pb.MessageType.TRANSACTION
    elif lite is not None:
        mtype = pb.MessageType.LITE
    elif message_group is not None:
        if msg.deliver_time_ms is not None:
            raise ConfigError("a FIFO message (sharding_key) cannot be delayed")
        mtype = pb.MessageType.FIFO
    elif msg.deliver_time_ms is not None:
        mtype = pb.MessageType.DELAY
    elif msg.priority is not None:
        mtype = pb.MessageType.PRIORITY
    else:
        mtype = pb.MessageType.NORMAL
    return Outgoing(
        topic=msg.topic,
        namespace=namespace,
        user_properties=user,
        tag=msg.tags or None,
        keys=list(msg.keys),
        message_id=msg_id,
        message_type=int(mtype),
        born_ms=time.time_ns() // 1_000_000,
        born_host=HOSTNAME,
        message_group=message_group,
        delivery_ms=msg.deliver_time_ms,
        body=bytes(msg.body),
        priority=msg.priority,
        lite_topic=lite,
        recovery_s=recovery_s if transactional else None,
    )


def to_pb_message(out: Outgoing) -> pb.Message:
    """The typed (betterproto) ``Message`` of ``out``; the send path encodes it with
    [`aiorocket.grpc._encode.encode_message`][], which must produce the same."""
    sysp = pb.SystemProperties(
        tag=out.tag,
        keys=list(out.keys),
        message_id=out.message_id,
        body_encoding=pb.Encoding.IDENTITY,
        message_type=pb.MessageType(out.message_type),
        born_timestamp=ms_to_datetime(out.born_ms),
        born_host=out.born_host,
        message_group=out.message_group,
        delivery_timestamp=None if out.delivery_ms is None else ms_to_datetime(out.delivery_ms),
        priority=out.priority,
        lite_topic=out.lite_topic,
        orphaned_transaction_recovery_duration=(
            None if out.recovery_s is None else timedelta(seconds=out.recovery_s)
        ),
    )
    return pb.Message(
        topic=pb.Resource(resource_namespace=out.namespace, name=wrap(out.namespace, out.topic)),
        user_properties=dict(out.user_properties),
        system_properties=sysp,
        body=out.body,
    )


def properties_of(
    user: Mapping[str, str], tag: str | None, keys: list[str], message_id: str,
    message_group: str | None = None, lite_topic: str | None = None,
) -> dict[str, str]:  # fmt: skip
    """The properties a remoting consumer would see for these system fields."""
    props = dict(user)
    if tag:
        props[PROPERTY_TAGS] = tag
    if keys:
        props[PROPERTY_KEYS] = KEY_SEPARATOR.join(keys)
    if message_id:
        props[PROPERTY_UNIQ_KEY] = message_id
    if message_group:
        props.setdefault(PROPERTY_SHARDING_KEY, message_group)
    if lite_topic:  # as a remoting consumer reads it (MessageExt.lite_topic)
        props[PROPERTY_LITE_TOPIC] = lite_topic
    return props


def decode_body(body: bytes, encoding: int) -> bytes:
    """The body as sent: a GZIP-labelled body (a compressed stored message) decompressed
    with the codec its first bytes name: the Proxy labels zlib, LZ4 and zstd bodies
    alike (``decompress_sniffed``); ``MessageDecodeError`` when none can read it."""
    if encoding == pb.Encoding.GZIP:
        return decompress_sniffed(body)
    return body
