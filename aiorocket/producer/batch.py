"""Batch bodies: several messages of one topic sent in one SEND_BATCH_MESSAGE request.

The body is the concatenation of one record per message (apache/rocketmq
``MessageDecoder.encodeMessages``), all big-endian:

```text
int32 TOTALSIZE   int32 MAGICCODE (0)   int32 BODYCRC (0)   int32 FLAG
int32 BODYLEN + body   int16 PROPERTIESLEN + properties
```

The broker stores the messages consecutively in one queue. Batched bodies are not
compressed (as in Java), and delayed or timer messages cannot be batched.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from aiorocket._send_result import results_of_batch
from aiorocket._unique_id import create_unique_id
from aiorocket.client.results import SendResult
from aiorocket.errors import ConfigError, MessageTooLargeError
from aiorocket.message import RETRY_TOPIC_PREFIX, Message
from aiorocket.namespace import wrap
from aiorocket.producer.config import ProducerConfig
from aiorocket.producer.prepare import (
    UNIQ_ENTRY,
    Outgoing,
    check_body,
    check_topic,
    encode_props,
    wire_properties,
)

__all__ = [
    "RECORD_OVERHEAD",
    "decode_records",
    "encode_record",
    "id_record",
    "pack_record",
    "prepare_batch",
    "split_batch_result",
]

_HEAD = struct.Struct(">iiiii")  # TOTALSIZE MAGICCODE BODYCRC FLAG BODYLEN
_PROPS_LEN = struct.Struct(">h")
RECORD_OVERHEAD = _HEAD.size + _PROPS_LEN.size


def encode_record(body: bytes, properties: str, flag: int = 0) -> bytes:
    """One message of a batch body."""
    return pack_record(body, properties.encode(), flag)


def pack_record(body: bytes, props: bytes, flag: int = 0) -> bytes:
    """One message of a batch body, its properties encoded already."""
    total = RECORD_OVERHEAD + len(body) + len(props)
    return b"".join(
        (_HEAD.pack(total, 0, 0, flag, len(body)), body, _PROPS_LEN.pack(len(props)), props)
    )


#: a generated id's properties in a record (``id_text``: its 32 characters, the key and
#: the two separators), their length field and what precedes the id
_ID_PROPS_LEN = len(UNIQ_ENTRY) + 32 + 1
_ID_PROPS_HEAD = _PROPS_LEN.pack(_ID_PROPS_LEN) + UNIQ_ENTRY.encode()
_ID_RECORD_OVERHEAD = RECORD_OVERHEAD + _ID_PROPS_LEN


def id_record(body: bytes, flag: int) -> tuple[bytes, str]:
    """The record of a message whose only property is a new id, and the id:
    ``pack_record(body, id_properties()[1], flag)`` in one call, the id's properties not
    encoded whole (an auto-batched message's: benchmarks/README.md, "Goal 3, round 10")."""
    msg_id = create_unique_id()
    n = len(body)
    head = _HEAD.pack(_ID_RECORD_OVERHEAD + n, 0, 0, flag, n)
    return b"".join((head, body, _ID_PROPS_HEAD, msg_id.encode(), b"\x02")), msg_id


def decode_records(data: bytes) -> list[tuple[int, bytes, str]]:
    """Inverse of ``encode_batch`` bodies: ``(flag, body, properties)`` per record."""
    out: list[tuple[int, bytes, str]] = []
    pos = 0
    while pos < len(data):
        total, _magic, _crc, flag, body_len = _HEAD.unpack_from(data, pos)
        body_start = pos + _HEAD.size
        props_at = body_start + body_len
        (props_len,) = _PROPS_LEN.unpack_from(data, props_at)
        props = data[props_at + 2 : props_at + 2 + props_len].decode()
        if props_at + 2 + props_len != pos + total:
            raise ValueError(f"batch record at byte {pos} has an inconsistent TOTALSIZE")
        out.append((flag, data[body_start:props_at], props))
        pos += total
    return out


def prepare_batch(
    messages: Sequence[Message], config: ProducerConfig
) -> tuple[Outgoing, list[str]]:
    """Validate and encode ``messages``; return the batch and each message's id, in order."""
    if not messages:
        raise ConfigError("a batch needs at least one message")
    topic = messages[0].topic
    check_topic(topic)
    if topic.startswith(RETRY_TOPIC_PREFIX):
        raise ConfigError("retry topics cannot be sent to in a batch")
    records: list[bytes] = []
    ids: list[str] = []
    size = 0
    for msg in messages:
        if msg.topic != topic:
            raise ConfigError(
                f"all messages of a batch must share one topic ({topic!r} != {msg.topic!r})"
            )
        if msg.delay_level or msg.deliver_time_ms is not None:
            raise ConfigError("delayed and timer messages cannot be sent in a batch")
        if msg.priority is not None:
            raise ConfigError("priority messages cannot be sent in a batch (each has its queue)")
        if msg.lite_topic is not None:
            raise ConfigError("lite messages cannot be sent in a batch: send them one by one")
        check_body(msg, config.max_message_size)
        props, msg_id = wire_properties(msg)
        record = encode_record(bytes(msg.body), encode_props(props), msg.flag)
        size += len(record)
        if size > config.max_message_size:
            raise MessageTooLargeError(
                f"batch of {len(messages)} messages exceeds the maximum of "
                f"{config.max_message_size} bytes; split it"
            )
        records.append(record)
        ids.append(msg_id)
    # The broker appends the batch's own properties to every message's, so they carry
    # nothing that must differ per message (no UNIQ_KEY).
    batch = Outgoing(wrap(config.namespace, topic), b"".join(records), "", 0, create_unique_id())
    return batch, ids


def split_batch_result(result: SendResult, ids: Sequence[str]) -> list[SendResult]:
    """One result per message of a batch, in order: own id, consecutive queue offsets."""
    offset_ids = result.offset_msg_id.split(",") if result.offset_msg_id else []
    if len(offset_ids) != len(ids):
        offset_ids = [""] * len(ids)
    return results_of_batch(result, ids, offset_ids)
