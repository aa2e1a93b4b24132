"""Build commit-log store records, the inverse of ``decode_messages``.

Used by the unit tests and by the in-process fake broker: a PULL_MESSAGE (FOUND) body is
simply ``b"".join(encode_stored_message(...) for each message)``.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Mapping

from aiorocket.errors import ConfigError
from aiorocket.protocol.message_codec import (
    MAGIC_V1,
    MAGIC_V2,
    MAX_PROPERTIES_BYTES,
    MAX_TOPIC_BYTES,
    SYSFLAG_BORNHOST_V6,
    SYSFLAG_COMPRESSED,
    SYSFLAG_COMPRESSION_MASK,
    SYSFLAG_STOREHOST_V6,
    V1_MAX_TOPIC_BYTES,
    CompressionType,
    compress_body,
    encode_properties,
    pack_host,
)

__all__ = [
    "encode_stored_message",
]

# TOTALSIZE MAGIC BODYCRC QUEUEID FLAG QUEUEOFFSET PHYSICALOFFSET SYSFLAG BORNTIMESTAMP
_HEAD = struct.Struct(">iIiiiqqiq")
_I64 = struct.Struct(">q")
_TAIL = struct.Struct(">iqi")  # RECONSUMETIMES PREPARED_TRANSACTION_OFFSET BODYLEN


def encode_stored_message(
    topic: str,
    body: bytes,
    properties: Mapping[str, str] | None = None,
    *,
    queue_id: int = 0,
    queue_offset: int = 0,
    commit_log_offset: int = 0,
    flag: int = 0,
    sys_flag: int = 0,
    born_timestamp: int = 0,
    born_host: str = "127.0.0.1:0",
    store_timestamp: int = 0,
    store_host: str = "127.0.0.1:10911",
    reconsume_times: int = 0,
    prepared_transaction_offset: int = 0,
    compression: CompressionType | None = None,
    compression_level: int = 5,
    version: int | None = None,
    body_crc: int | None = None,
) -> bytes:
    """One store record, as a broker returns it in a pull body.

    - The host v6 bits of ``sys_flag`` are set from ``born_host`` / ``store_host``.
    - ``compression``: compress ``body`` and set the COMPRESSED bit and algorithm bits.
      Without it, ``body`` and ``sys_flag`` are stored as given (so an already compressed,
      or deliberately corrupt, body can be stored with hand-set flags).
    - ``version``: 1 or 2 forces the magic code; ``None`` picks V2 only for topics longer
      than 127 UTF-8 bytes, as the broker does.
    - ``body_crc``: defaults to the broker's CRC (CRC32 & 0x7FFFFFFF of the stored body).

    Raises ``ConfigError`` for values the format cannot carry.
    """
    topic_bytes = topic.encode()
    props_bytes = encode_properties(properties or {}).encode()
    if version is None:
        version = 2 if len(topic_bytes) > V1_MAX_TOPIC_BYTES else 1
    if version not in (1, 2):
        raise ConfigError(f"stored message version must be 1 or 2, not {version!r}")
    limit = V1_MAX_TOPIC_BYTES if version == 1 else MAX_TOPIC_BYTES
    if len(topic_bytes) > limit:
        raise ConfigError(f"topic is {len(topic_bytes)} bytes, V{version} allows {limit}")
    if len(props_bytes) > MAX_PROPERTIES_BYTES:
        raise ConfigError(f"properties are {len(props_bytes)} bytes, max {MAX_PROPERTIES_BYTES}")
    try:
        born = pack_host(born_host)
        store = pack_host(store_host)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None

    sys_flag &= ~(SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6)
    if len(born) == 20:
        sys_flag |= SYSFLAG_BORNHOST_V6
    if len(store) == 20:
        sys_flag |= SYSFLAG_STOREHOST_V6
    if compression is not None:
        compression = CompressionType(compression)
        body = compress_body(body, compression, compression_level)
        sys_flag = (sys_flag & ~SYSFLAG_COMPRESSION_MASK) | SYSFLAG_COMPRESSED | compression << 8
    if body_crc is None:
        body_crc = zlib.crc32(body) & 0x7FFFFFFF

    topic_len = bytes((len(topic_bytes),)) if version == 1 else len(topic_bytes).to_bytes(2, "big")
    total = (
        _HEAD.size + len(born) + 8 + len(store) + _TAIL.size + len(body)
        + len(topic_len) + len(topic_bytes) + 2 + len(props_bytes)
    )  # fmt: skip
    magic = MAGIC_V1 if version == 1 else MAGIC_V2
    try:
        head = _HEAD.pack(
            total, magic, body_crc, queue_id, flag, queue_offset, commit_log_offset, sys_flag,
            born_timestamp,
        )  # fmt: skip
        mid = _I64.pack(store_timestamp)
        tail = _TAIL.pack(reconsume_times, prepared_transaction_offset, len(body))
    except struct.error as exc:
        raise ConfigError(f"a field does not fit its stored width: {exc}") from None
    props_len = len(props_bytes).to_bytes(2, "big")
    return b"".join(
        (head, born, mid, store, tail, body, topic_len, topic_bytes, props_len, props_bytes)
    )
