"""Between aiorocket's message types and the v2 API's ``Message``.

Outgoing: an :class:`aiorocket.Message` becomes a ``Message`` whose system properties
carry the tag, keys, client message id (the same ``UNIQ_KEY`` format the remoting
producer uses, so both transports' consumers see one id), message group and delivery
time; user properties travel as they are. The Proxy maps these to the broker's stored
properties, so a remoting consumer reads the same tags, keys and properties.

Incoming: a received ``Message`` becomes a :class:`MessageExt` whose ``properties``
hold the user properties plus TAGS/KEYS/UNIQ_KEY, as a remoting consumer would see them.
"""

from __future__ import annotations

import socket
import zlib
from collections.abc import Mapping
from datetime import datetime, timezone

from aiorocket.errors import ConfigError, MessageDecodeError, UnsupportedTransportError
from aiorocket.grpc import _pb as pb
from aiorocket.message import (
    KEY_SEPARATOR,
    PROPERTY_KEYS,
    PROPERTY_SHARDING_KEY,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    Message,
)
from aiorocket.producer.prepare import check_body, check_schedule, check_topic
from aiorocket.protocol.message_codec import create_unique_id

__all__ = ["HOSTNAME", "decode_body", "properties_of", "to_pb_message"]

HOSTNAME = socket.gethostname()

#: properties the API carries in system fields: users must not set them as properties.
_SYSTEM_KEYS = frozenset({PROPERTY_TAGS, PROPERTY_KEYS, PROPERTY_UNIQ_KEY})


def _ms_to_datetime(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc)


def to_pb_message(
    msg: Message,
    *,
    max_body_size: int,
    namespace: str = "",
    message_group: str | None = None,
    transactional: bool = False,
) -> pb.Message:
    """Validate ``msg`` and build its v2 ``Message`` (with a new client message id)."""
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
    if transactional:
        if message_group is not None or msg.deliver_time_ms is not None:
            raise ConfigError("a transactional message cannot be FIFO or delayed")
        mtype = pb.MessageType.TRANSACTION
    elif message_group is not None:
        if msg.deliver_time_ms is not None:
            raise ConfigError("a FIFO message (sharding_key) cannot be delayed")
        mtype = pb.MessageType.FIFO
    elif msg.deliver_time_ms is not None:
        mtype = pb.MessageType.DELAY
    else:
        mtype = pb.MessageType.NORMAL
    sysp = pb.SystemProperties(
        tag=msg.tags or None,
        keys=list(msg.keys),
        message_id=msg_id,
        body_encoding=pb.Encoding.IDENTITY,
        message_type=mtype,
        born_timestamp=datetime.now(timezone.utc),
        born_host=HOSTNAME,
        message_group=message_group,
        delivery_timestamp=(
            None if msg.deliver_time_ms is None else _ms_to_datetime(msg.deliver_time_ms)
        ),
    )
    return pb.Message(
        topic=pb.Resource(resource_namespace=namespace, name=msg.topic),
        user_properties=user,
        system_properties=sysp,
        body=bytes(msg.body),
    )


def properties_of(
    user: Mapping[str, str], tag: str | None, keys: list[str], message_id: str,
    message_group: str | None = None,
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
    return props


def decode_body(body: bytes, encoding: int) -> bytes:
    """The body as sent: GZIP-encoded bodies (a compressed stored message) inflated."""
    if encoding == pb.Encoding.GZIP:
        try:
            return zlib.decompress(body)
        except zlib.error as exc:
            raise MessageDecodeError(f"corrupt compressed body: {exc}") from exc
    return body
