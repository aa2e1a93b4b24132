"""Turning a ``Message`` into what goes on the wire, validating it first.

Everything that can make a send fail for a reason the broker need not be asked about is
checked here, before any connection is made: topic name, empty or oversized body,
conflicting delay settings, oversized properties.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aiorocket._unique_id import create_unique_id

# The message checks both transports share (the gRPC producer's too); re-exported here.
from aiorocket._validate import TOPIC_MAX_LENGTH, check_body, check_schedule, check_topic
from aiorocket.errors import MessageTooLargeError
from aiorocket.message import PROPERTY_UNIQ_KEY, Message
from aiorocket.namespace import wrap
from aiorocket.producer.config import ProducerConfig
from aiorocket.protocol.message_codec import (
    MAX_PROPERTIES_BYTES,
    compress_body,
    encode_properties,
)

__all__ = [
    "SYSFLAG_COMPRESSED",
    "SYSFLAG_TRANSACTION_PREPARED",
    "TOPIC_MAX_LENGTH",
    "TRANSACTION_COMMIT_TYPE",
    "TRANSACTION_NOT_TYPE",
    "TRANSACTION_ROLLBACK_TYPE",
    "UNIQ_ENTRY",
    "Outgoing",
    "check_body",
    "check_schedule",
    "check_topic",
    "encode_props",
    "encoded_props",
    "id_properties",
    "id_text",
    "prepare_message",
    "properties_with_id",
    "wire_properties",
]

# MessageSysFlag bits a producer sets.
SYSFLAG_COMPRESSED = 0x1
SYSFLAG_TRANSACTION_PREPARED = 0x4
TRANSACTION_NOT_TYPE = 0x0
TRANSACTION_COMMIT_TYPE = 0x8
TRANSACTION_ROLLBACK_TYPE = 0xC


@dataclass(frozen=True, slots=True)
class Outgoing:
    """A validated, encoded message (or batch) ready for SEND_MESSAGE_V2."""

    topic: str
    body: bytes
    properties: str
    sys_flag: int
    msg_id: str
    flag: int = 0


class _UnfrozenOutgoing:
    """``Outgoing``'s slots without the frozen ``__setattr__``: ``prepare_message`` fills
    one in (a plain slot store a field, not a setter call each) and makes it an
    ``Outgoing`` by ``__class__`` assignment (``_send_result._Unfrozen``'s way; a plain
    send prepares one a message)."""

    __slots__ = Outgoing.__slots__

    topic: str
    body: bytes
    properties: str
    sys_flag: int
    msg_id: str
    flag: int


_new = object.__new__


def encode_props(props: dict[str, str]) -> str:
    return encoded_props(props)[0]


def encoded_props(props: dict[str, str]) -> tuple[str, bytes]:
    """The properties as the request header's text and as a batch record's bytes (one
    encoding for both: the auto-batcher needs each), within the size the wire allows."""
    text = encode_properties(props)
    return text, _within_limit(text.encode())


def _within_limit(data: bytes) -> bytes:
    if len(data) > MAX_PROPERTIES_BYTES:
        raise MessageTooLargeError(
            f"message properties take {len(data)} bytes, more than the maximum "
            f"{MAX_PROPERTIES_BYTES}"
        )
    return data


#: what precedes a generated id in the encoded properties
UNIQ_ENTRY = f"{PROPERTY_UNIQ_KEY}\x01"


def properties_with_id(msg: Message) -> tuple[str, bytes, str]:
    """``encoded_props(wire_properties(msg)[0])`` and the id, without the id in a dict:
    a generated id (hex) is appended to the checked encoding of the rest, which makes the
    auto-batcher's per-message encoding cheaper (benchmarks/README.md, goal 3)."""
    props = msg.wire_properties()
    msg_id = props.get(PROPERTY_UNIQ_KEY)
    if msg_id:  # the caller's own id
        return (*encoded_props(props), msg_id)
    props.pop(PROPERTY_UNIQ_KEY, None)  # an empty one is replaced, as wire_properties does
    if not props:
        return id_properties()
    msg_id = create_unique_id()
    text = f"{encode_properties(props)}{UNIQ_ENTRY}{msg_id}\x02"
    return text, _within_limit(text.encode()), msg_id


def id_properties() -> tuple[str, bytes, str]:
    """``properties_with_id`` of a message without wire properties: a generated id alone
    (ASCII, far within the limit)."""
    msg_id = create_unique_id()
    text = id_text(msg_id)
    return text, text.encode(), msg_id


def id_text(msg_id: str) -> str:
    """The encoded properties of a message whose only one is its id ``msg_id``."""
    return f"{UNIQ_ENTRY}{msg_id}\x02"


def wire_properties(
    msg: Message, extra: dict[str, str] | None = None
) -> tuple[dict[str, str], str]:
    """The message's properties with its ``UNIQ_KEY`` (kept if the caller set one)."""
    props = msg.wire_properties()
    if extra:
        props.update(extra)
    msg_id = props.get(PROPERTY_UNIQ_KEY) or create_unique_id()
    props[PROPERTY_UNIQ_KEY] = msg_id
    return props, msg_id


def prepare_message(
    msg: Message,
    config: ProducerConfig,
    *,
    extra_properties: dict[str, str] | None = None,
    sys_flag: int = 0,
) -> Outgoing:
    """Validate ``msg``, assign its client message id, compress a large body."""
    check_topic(msg.topic)
    check_body(msg, config.max_message_size)
    check_schedule(msg)
    if extra_properties:
        props, msg_id = wire_properties(msg, extra_properties)
        text = encode_props(props)
    else:  # the auto-batcher's encoding: no dict for the id (most messages have no other)
        text, _, msg_id = properties_with_id(msg)
    body = bytes(msg.body)
    if len(body) >= config.compress_over:
        packed = compress_body(body, config.compression, config.compression_level)
        if len(packed) < len(body):
            body = packed
            sys_flag |= SYSFLAG_COMPRESSED | (int(config.compression) << 8)
    topic = wrap(config.namespace, msg.topic) if config.namespace else msg.topic
    out: Any = _new(_UnfrozenOutgoing)  # Outgoing(topic, body, text, sys_flag, msg_id, msg.flag)
    out.topic = topic
    out.body = body
    out.properties = text
    out.sys_flag = sys_flag
    out.msg_id = msg_id
    out.flag = msg.flag
    out.__class__ = Outgoing
    return out  # type: ignore[no-any-return]
