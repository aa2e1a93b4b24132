"""The fast path of the send and ack calls: requests encoded, answers decoded by hand.

betterproto builds and walks a dataclass per nested message on both sides of a call;
on the producer that cost about 1 ms of CPU per message here. The hot requests
(SendMessageRequest with its Messages, AckMessageRequest) are therefore written straight
to protobuf bytes in field order, proto3 defaults omitted, and their answers
(SendMessageResponse, AckMessageResponse) read in one pass. grpclib's codec only calls
``SerializeToString`` on a request and ``FromString`` on a reply type, so
``RawRequest`` and the ``Fast*Response`` classes stand in for the betterproto
types. ``tests/unit/test_grpc_fast_encode.py`` checks both against betterproto.
"""

from __future__ import annotations

from collections.abc import Iterable

from aiorocket.errors import MessageDecodeError
from aiorocket.grpc._convert import Outgoing
from aiorocket.grpc._fast import ByEncoding, _skip, _varint
from aiorocket.namespace import wrap

__all__ = [
    "AckEntry",
    "FastAckResponse",
    "FastSendResponse",
    "RawRequest",
    "SendEntry",
    "Status",
    "ack_request",
    "encode_message",
    "send_request",
    "with_attempt_id",
]


def _uvarint(v: int) -> bytes:
    if v < 0x80:
        return bytes((v,))
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def _int(v: int) -> bytes:
    """int32/int64/enum value: negatives as their 64-bit two's complement."""
    return _uvarint(v & 0xFFFFFFFFFFFFFFFF if v < 0 else v)


def _len(key: int, payload: bytes) -> bytes:
    return (
        bytes((key,)) + _uvarint(len(payload)) + payload
        if key < 0x80
        else (_uvarint(key) + _uvarint(len(payload)) + payload)
    )


def _str(key: int, value: str) -> bytes:
    return _len(key, value.encode())


def _timestamp(ms: int) -> bytes:
    seconds, rest = divmod(ms, 1000)
    out = b""
    if seconds:
        out += b"\x08" + _int(seconds)
    if rest:
        out += b"\x10" + _int(rest * 1_000_000)
    return out


def _resource(namespace: str, name: str) -> bytes:
    if not namespace:
        return _str(0x12, name) if name else b""
    # The name in the namespace too: the Apache Proxy (5.2+) ignores resource_namespace
    # and uses the name as given; a Proxy that wraps it itself leaves it as it is.
    return _str(0x0A, namespace) + _str(0x12, wrap(namespace, name))


def encode_message(out: Outgoing) -> bytes:
    """The v2 ``Message`` of ``out`` as protobuf bytes (what betterproto would write)."""
    sysp = b""
    if out.tag is not None:
        sysp += _str(0x0A, out.tag)  # 1, optional: written even when empty
    for key in out.keys:
        sysp += _str(0x12, key)  # 2
    if out.message_id:
        sysp += _str(0x1A, out.message_id)  # 3
    sysp += b"\x28\x01"  # 5 body_encoding IDENTITY
    if out.message_type:
        sysp += b"\x30" + _int(out.message_type)  # 6
    sysp += _len(0x3A, _timestamp(out.born_ms))  # 7 born_timestamp
    if out.born_host:
        sysp += _str(0x42, out.born_host)  # 8
    if out.delivery_ms is not None:
        sysp += _len(0x5A, _timestamp(out.delivery_ms))  # 11
    if out.message_group is not None:
        sysp += b"\x8a\x01" + _uvarint(len(g := out.message_group.encode())) + g  # 17
    if out.recovery_s is not None:  # 19 orphaned_transaction_recovery_duration
        duration = b"\x08" + _int(out.recovery_s) if out.recovery_s else b""
        sysp += b"\x9a\x01" + _uvarint(len(duration)) + duration
    if out.lite_topic is not None:
        sysp += b"\xaa\x01" + _uvarint(len(lt := out.lite_topic.encode())) + lt  # 21
    if out.priority is not None:
        sysp += b"\xb0\x01" + _int(out.priority)  # 22
    body = _len(0x0A, _resource(out.namespace, out.topic))  # 1 topic
    for k, v in out.user_properties.items():  # 2 map entries
        body += _len(0x12, _str(0x0A, k) + _str(0x12, v))
    body += _len(0x1A, sysp)  # 3 system_properties
    if out.body:
        body += _len(0x22, out.body)  # 4
    return body


class RawRequest:
    """Request bytes already encoded; grpclib's codec asks for ``SerializeToString``."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data

    def SerializeToString(self) -> bytes:
        return self.data


def with_attempt_id(receive_request: bytes, attempt_id: str) -> RawRequest:
    """An encoded ReceiveMessageRequest without ``attempt_id`` plus that field (8):
    protobuf fields may come in any order."""
    return RawRequest(receive_request + _str(0x42, attempt_id))


def send_request(messages: Iterable[bytes]) -> RawRequest:
    """SendMessageRequest{messages} from encoded Messages."""
    return RawRequest(b"".join(_len(0x0A, m) for m in messages))


#: one-byte varints, by value: a length below 128 without a call
_ONE_BYTE = [bytes((i,)) for i in range(0x80)]


def ack_request(
    namespace: str, group: str, topic: str, entries: Iterable[tuple[str, str, str | None]]
) -> RawRequest:
    """AckMessageRequest{group, topic, entries[(message_id, receipt_handle, lite_topic)]}
    (``lite_topic`` None but for a lite message: the Proxy accepts a lite message's ack
    without it and ignores it, so the message comes back).

    An entry's fields are framed inline (8 Python calls an entry through ``_str`` and
    ``_len`` before; the push consumer acks every message: benchmarks/README.md, gRPC,
    "Round 9"), and the entries joined once (``+=`` copied the request so far per entry)."""
    parts = [_len(0x0A, _resource(namespace, group)), _len(0x12, _resource(namespace, topic))]
    one = _ONE_BYTE
    for message_id, handle, lite_topic in entries:
        entry = b""
        if message_id:
            mid = message_id.encode()
            n = len(mid)
            entry = b"\x0a" + (one[n] if n < 0x80 else _uvarint(n)) + mid
        if handle:
            rh = handle.encode()
            n = len(rh)
            entry += b"\x12" + (one[n] if n < 0x80 else _uvarint(n)) + rh
        if lite_topic is not None:
            entry += _str(0x1A, lite_topic)  # 3, optional: written even when empty
        n = len(entry)
        parts.append(b"\x1a" + (one[n] if n < 0x80 else _uvarint(n)) + entry)
    return RawRequest(b"".join(parts))


# -- answers -------------------------------------------------------------------------


class Status:
    """A decoded ``Status`` (plain: betterproto objects cost more than the call here)."""

    __slots__ = ("code", "message")

    def __init__(self, code: int = 0, message: str = "") -> None:
        self.code = code
        self.message = message


class SendEntry:
    """A decoded ``SendResultEntry``."""

    __slots__ = ("message_id", "offset", "recall_handle", "status", "transaction_id")

    def __init__(self) -> None:
        self.status = Status()
        self.message_id = self.transaction_id = self.recall_handle = ""
        self.offset = 0


class AckEntry:
    """A decoded ``AckMessageResultEntry``: the status at once, the message id and
    receipt handle only when read (a warning about a failed entry is their one use)."""

    __slots__ = ("_data", "_handle", "_id", "status")

    def __init__(self, data: bytes = b"") -> None:
        self.status = Status()
        self._data = data
        self._id = self._handle = (0, 0)

    @property
    def message_id(self) -> str:
        return self._data[self._id[0] : self._id[1]].decode(errors="replace")

    @property
    def receipt_handle(self) -> str:
        return self._data[self._handle[0] : self._handle[1]].decode(errors="replace")


#: Decoded statuses by their bytes: an ack answer repeats one OK status per entry.
_STATUSES: ByEncoding[Status] = ByEncoding(lambda raw: _status(raw, 0, len(raw)))


def _ack_entry(data: bytes, pos: int, end: int) -> AckEntry:
    entry = AckEntry(data)
    while pos < end:
        key = data[pos]  # keys and most lengths are one byte: inline (round 9)
        if key < 0x80:
            pos += 1
        else:
            key, pos = _varint(data, pos)
        if key & 7 != 2:
            pos = _skip(data, pos, key & 7)
            continue
        n = data[pos]
        if n < 0x80:
            pos += 1
        else:
            n, pos = _varint(data, pos)
        if pos + n > end:
            raise MessageDecodeError("gRPC answer truncated")
        if key == 0x0A:
            entry._id = (pos, pos + n)
        elif key == 0x12:
            entry._handle = (pos, pos + n)
        elif key == 0x1A:
            entry.status = _STATUSES.get(data[pos : pos + n])
        pos += n
    return entry


def _status(buf: bytes, pos: int, end: int) -> Status:
    code = 0
    message = ""
    while pos < end:
        key, pos = _varint(buf, pos)
        if key == 0x08:
            code, pos = _varint(buf, pos)
        elif key == 0x12:
            n, pos = _varint(buf, pos)
            message = buf[pos : pos + n].decode()
            pos += n
        else:
            pos = _skip(buf, pos, key & 7)
    return Status(code, message)


def _fields(buf: bytes) -> Iterable[tuple[int, int, int]]:
    """(key, start, end) of each length-delimited field; others skipped."""
    pos, end = 0, len(buf)
    try:
        while pos < end:
            key, pos = _varint(buf, pos)
            if key & 7 == 2:
                n, pos = _varint(buf, pos)
                if pos + n > end:
                    raise MessageDecodeError("gRPC answer truncated")
                yield key, pos, pos + n
                pos += n
            else:
                pos = _skip(buf, pos, key & 7)
    except (IndexError, UnicodeDecodeError) as exc:
        raise MessageDecodeError(f"corrupt gRPC answer: {exc}") from exc


class FastSendResponse:
    """A SendMessageResponse: ``status`` and ``entries`` (``SendEntry``)."""

    __slots__ = ("entries", "status")

    def __init__(self) -> None:
        self.status: Status | None = None
        self.entries: list[SendEntry] = []

    @classmethod
    def FromString(cls, data: bytes) -> FastSendResponse:
        self = cls()
        for key, start, end in _fields(data):
            if key == 0x0A:
                self.status = _status(data, start, end)
            elif key == 0x12:
                entry = SendEntry()
                for k, s, e in _fields(data[start:end]):
                    chunk = data[start + s : start + e]
                    if k == 0x0A:
                        entry.status = _status(chunk, 0, len(chunk))
                    elif k == 0x12:
                        entry.message_id = chunk.decode()
                    elif k == 0x1A:
                        entry.transaction_id = chunk.decode()
                    elif k == 0x2A:
                        entry.recall_handle = chunk.decode()
                # offset (4) is a varint: read it apart from the strings
                entry.offset = _offset(data, start, end)
                self.entries.append(entry)
        return self


def _offset(buf: bytes, pos: int, end: int) -> int:
    offset = 0
    while pos < end:
        key, pos = _varint(buf, pos)
        if key == 0x20:
            v, pos = _varint(buf, pos)
            offset = v - (1 << 64) if v >= 1 << 63 else v
        else:
            pos = _skip(buf, pos, key & 7)
    return offset


class FastAckResponse:
    """An AckMessageResponse: ``status`` and the entries' statuses."""

    __slots__ = ("entries", "status")

    def __init__(self) -> None:
        self.status: Status | None = None
        self.entries: list[AckEntry] = []

    @classmethod
    def FromString(cls, data: bytes) -> FastAckResponse:
        self = cls()
        try:
            for key, start, end in _fields(data):
                if key == 0x0A:
                    self.status = _status(data, start, end)
                elif key == 0x12:
                    self.entries.append(_ack_entry(data, start, end))
        except (IndexError, UnicodeDecodeError) as exc:
            raise MessageDecodeError(f"corrupt gRPC answer: {exc}") from exc
        return self
