"""The fast decode path of the receive stream: protobuf bytes → ``ReceivedMessage``.

betterproto's generic decoder walks field metadata and builds a dataclass per nested
message (Resource, SystemProperties, Timestamp, Digest, map entries...), which costs
far more than the receive path can pay per message. This decoder is specialised for
the three hot messages (ReceiveMessageResponse → Message → SystemProperties): one pass
over the bytes, fields read by hand, the result built directly as the
``ReceivedMessage`` the application gets. Unknown or unused fields are skipped by
wire type, so a newer Proxy's additions are harmless.

It must decode exactly what the betterproto path (``message_ext`` over the
``_pb`` dataclasses) does; ``tests/unit/test_grpc_fast_decode.py`` checks that with
hypothesis.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar, Generic, Literal, TypeVar, overload

from aiorocket.errors import MessageDecodeError
from aiorocket.grpc import _pb as pb
from aiorocket.grpc._convert import decode_body, properties_of
from aiorocket.grpc._received import ReceivedMessage
from aiorocket.received import PopMessage

__all__ = [
    "ByEncoding",
    "FastPopReceiveResponse",
    "FastReceiveResponse",
    "UndecodableMessage",
    "decode_message",
]

_U64 = 1 << 64
_I63 = 1 << 63


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    b = buf[pos]
    if b < 0x80:
        return b, pos + 1
    result = b & 0x7F
    shift = 7
    pos += 1
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise MessageDecodeError("varint longer than 10 bytes")


def _signed(v: int) -> int:
    """int32/int64 fields: a negative value arrives as its 64-bit two's complement."""
    return v - _U64 if v >= _I63 else v


def _skip(buf: bytes, pos: int, wire: int) -> int:
    if wire == 0:
        return _varint(buf, pos)[1]
    if wire == 2:
        n, pos = _varint(buf, pos)
        return pos + n
    if wire == 1:
        return pos + 8
    if wire == 5:
        return pos + 4
    raise MessageDecodeError(f"unsupported wire type {wire}")


def _timestamp_ms(buf: bytes, pos: int, end: int) -> int:
    seconds = nanos = 0
    while pos < end:
        key = buf[pos]
        pos += 1
        if key == 0x08 or key == 0x10:
            # The value's varint read inline: two timestamps a message were 8 ``_varint``
            # calls and 4 ``_signed`` ones, a twentieth of the push consumer's Python
            # calls a message (benchmarks/README.md, gRPC, "Round 9").
            v = shift = 0
            while True:
                b = buf[pos]
                pos += 1
                v |= (b & 0x7F) << shift
                if b < 0x80:
                    break
                shift += 7
                if shift > 63:
                    raise MessageDecodeError("varint longer than 10 bytes")
            if key == 0x08:
                seconds = v - _U64 if v >= _I63 else v
            else:  # an int32: the low 32 bits, signed
                nanos = v & 0xFFFFFFFF
                if nanos >= 1 << 31:
                    nanos -= 1 << 32
        else:
            key, pos = _varint(buf, pos - 1)
            pos = _skip(buf, pos, key & 7)
    # As betterproto's datetime (microsecond precision), then whole milliseconds.
    return (seconds * 1_000_000 + nanos // 1000) // 1000


def _str(buf: bytes, pos: int) -> tuple[str, int]:
    n = buf[pos]
    if n < 0x80:
        pos += 1
    else:
        n, pos = _varint(buf, pos)
    end = pos + n
    return buf[pos:end].decode(), end


def _resource_name(buf: bytes, pos: int, end: int) -> str:
    name = ""
    while pos < end:
        key, pos = _varint(buf, pos)
        if key == 0x12:
            name, pos = _str(buf, pos)
        else:
            pos = _skip(buf, pos, key & 7)
    return name


def _map_entry(buf: bytes, pos: int, end: int) -> tuple[str, str]:
    k = v = ""
    while pos < end:
        key = buf[pos]
        if key < 0x80:
            pos += 1
        else:
            key, pos = _varint(buf, pos)
        if key == 0x0A:
            k, pos = _str(buf, pos)
        elif key == 0x12:
            v, pos = _str(buf, pos)
        else:
            pos = _skip(buf, pos, key & 7)
    return k, v


@overload
def decode_message(
    buf: bytes, pos: int = 0, end: int | None = None, pop: Literal[False] = False
) -> ReceivedMessage: ...
@overload
def decode_message(buf: bytes, pos: int, end: int | None, pop: Literal[True]) -> PopMessage: ...
@overload
def decode_message(
    buf: bytes, pos: int, end: int | None, pop: bool
) -> ReceivedMessage | PopMessage: ...
def decode_message(
    buf: bytes, pos: int = 0, end: int | None = None, pop: bool = False
) -> ReceivedMessage | PopMessage:
    """Decode a v2 ``Message`` (``buf[pos:end]``) into a ``ReceivedMessage``, or with
    ``pop`` into the push consumer's ``PopMessage`` (the fields ``pop_message`` copies
    from a ``ReceivedMessage``: built directly, that copy's ~30 Python calls a message
    are saved; benchmarks/README.md, gRPC, "Round 9")."""
    if end is None:
        end = len(buf)
    elif end > len(buf):
        raise MessageDecodeError("gRPC message truncated")
    topic = ""
    user: dict[str, str] = {}
    body = b""
    tag: str | None = None
    keys: list[str] = []
    message_id = born_host = store_host = ""
    receipt_handle = ""
    message_group: str | None = None
    lite_topic: str | None = None
    encoding = queue_id = queue_offset = 0
    born_ms = store_ms = delivery_ms = 0
    attempt = 0
    try:
        while pos < end:
            key = buf[pos]  # keys and most lengths are one byte: read those inline
            if key < 0x80:
                pos += 1
            else:
                key, pos = _varint(buf, pos)
            if key == 0x1A:  # 3: system_properties
                n = buf[pos]
                if n < 0x80:
                    pos += 1
                else:
                    n, pos = _varint(buf, pos)
                send = pos + n
                if send > end:
                    raise MessageDecodeError("system properties overrun the message")
                while pos < send:
                    key = buf[pos]
                    if key < 0x80:
                        pos += 1
                    else:
                        key, pos = _varint(buf, pos)
                    field = key >> 3
                    wire = key & 7
                    if wire == 2:
                        n = buf[pos]
                        if n < 0x80:
                            pos += 1
                        else:
                            n, pos = _varint(buf, pos)
                        fend = pos + n
                        if fend > send:
                            raise MessageDecodeError("system property overruns its message")
                        if field == 3:
                            message_id = buf[pos:fend].decode()
                        elif field == 12:
                            receipt_handle = buf[pos:fend].decode()
                        elif field == 1:
                            tag = buf[pos:fend].decode()
                        elif field == 2:
                            keys.append(buf[pos:fend].decode())
                        elif field == 7:
                            born_ms = _timestamp_ms(buf, pos, fend)
                        elif field == 9:
                            store_ms = _timestamp_ms(buf, pos, fend)
                        elif field == 8:
                            born_host = buf[pos:fend].decode()
                        elif field == 10:
                            store_host = buf[pos:fend].decode()
                        elif field == 17:
                            message_group = buf[pos:fend].decode()
                        elif field == 11:
                            delivery_ms = _timestamp_ms(buf, pos, fend)
                        elif field == 21:
                            lite_topic = buf[pos:fend].decode()
                        pos = fend
                    elif wire == 0:
                        v = buf[pos]
                        if v < 0x80:
                            pos += 1
                        else:
                            v, pos = _varint(buf, pos)
                        if field == 14:
                            queue_offset = _signed(v)
                        elif field == 13:
                            queue_id = _int32(v)
                        elif field == 16:
                            attempt = _int32(v)
                        elif field == 5:
                            encoding = _int32(v)
                    else:
                        pos = _skip(buf, pos, wire)
                if pos != send:
                    raise MessageDecodeError("system properties overrun")
            elif key == 0x22:  # 4: body
                n = buf[pos]  # a length below 16 KiB is two bytes at most: inline
                if n < 0x80:
                    pos += 1
                elif buf[pos + 1] < 0x80:
                    n = (n & 0x7F) | buf[pos + 1] << 7
                    pos += 2
                else:
                    n, pos = _varint(buf, pos)
                if pos + n > end:
                    raise MessageDecodeError("body overruns the message")
                body = buf[pos : pos + n]
                pos += n
            elif key == 0x12:  # 2: user_properties entry
                n, pos = _varint(buf, pos)
                k, v2 = _map_entry(buf, pos, pos + n)
                user[k] = v2
                pos += n
            elif key == 0x0A:  # 1: topic
                n, pos = _varint(buf, pos)
                topic = _resource_name(buf, pos, pos + n)
                pos += n
            else:
                pos = _skip(buf, pos, key & 7)
    except (IndexError, UnicodeDecodeError) as exc:
        raise MessageDecodeError(f"corrupt gRPC message: {exc}") from exc
    if pos != end:
        raise MessageDecodeError("gRPC message overruns its length")
    attempt = attempt or 1
    make = PopMessage if pop else ReceivedMessage
    msg = make(
        topic=topic,
        body=body,
        properties=properties_of(user, tag, keys, message_id, message_group, lite_topic),
        queue_id=queue_id,
        queue_offset=queue_offset,
        commit_log_offset=0,
        born_timestamp=born_ms,
        born_host=born_host,
        store_timestamp=store_ms,
        store_host=store_host,
        reconsume_times=attempt - 1,
        receipt_handle=receipt_handle,
        delivery_attempt=attempt,
        message_group=message_group,
    )
    if isinstance(msg, ReceivedMessage):
        msg.message_id = message_id
        msg.delivery_timestamp = delivery_ms
    else:  # a PopMessage has no delivery time; its message_id is a property over this
        msg._message_id = message_id
    if encoding == pb.Encoding.GZIP:
        try:
            msg.body = decode_body(body, encoding)
        except MessageDecodeError as exc:
            # Everything but the body is known: the receiver can still settle it.
            raise UndecodableMessage(str(exc), msg) from exc
    return msg


class UndecodableMessage(MessageDecodeError):
    """A received message whose body cannot be decoded; ``message`` is the rest of it
    (receipt handle, ids, topic, attempt), its ``body`` as it came."""

    def __init__(self, error: str, message: ReceivedMessage | PopMessage) -> None:
        super().__init__(error)
        self.message = message


def _int32(v: int) -> int:
    """An int32 field: the low 32 bits, signed (as protobuf decoders truncate)."""
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v >= 1 << 31 else v


T = TypeVar("T")


class ByEncoding(Generic[T]):
    """Values decoded from bytes, one instance per distinct encoding (callers only read
    them): a Status repeats in every receive and every ack entry, nearly always the same
    few. Bounded: a Proxy's error texts may vary; those past ``limit`` are decoded each
    time."""

    __slots__ = ("_decode", "_kept", "limit")

    def __init__(self, decode: Callable[[bytes], T], limit: int = 64) -> None:
        self._decode = decode
        self._kept: dict[bytes, T] = {}
        self.limit = limit

    def __len__(self) -> int:
        return len(self._kept)

    def get(self, raw: bytes) -> T:
        value = self._kept.get(raw)
        if value is None:
            value = self._decode(raw)
            if len(self._kept) < self.limit:
                self._kept[raw] = value
        return value


#: the Statuses a receive's stream starts with: betterproto's parse and its first field
#: reads cost ~60 Python calls a receive (issue 43, goal 5b, round 7).
_STATUSES: ByEncoding[pb.Status] = ByEncoding(lambda raw: pb.Status().parse(raw))


M = TypeVar("M", ReceivedMessage, PopMessage)


class _ReceiveResponse(Generic[M]):
    """One ``ReceiveMessageResponse`` decoded by the fast path (the base of
    ``FastReceiveResponse`` and ``FastPopReceiveResponse``, which differ only in the type
    of the message they decode).

    Exactly one of ``status`` (a betterproto ``Status``, shared by every response that
    carried the same bytes: read it, never change it) and
    ``message`` is set; a ``delivery_timestamp`` response has neither. The receive
    stream calls ``FromString`` with the raw bytes of each streamed response.

    A message that does not decode sets ``error`` instead of failing the stream (the
    messages around it are good, and the receive must hand them on): with ``message``
    too when only its body is unreadable (an ``UndecodableMessage``: it can still be
    settled), alone when the message itself is corrupt.
    """

    __slots__ = ("error", "message", "status")

    #: decode messages as ``PopMessage`` (else ``ReceivedMessage``)
    _POP: ClassVar[bool] = False

    def __init__(self) -> None:
        self.status: pb.Status | None = None
        self.message: M | None = None
        self.error: MessageDecodeError | None = None

    @classmethod
    def FromString(cls, data: bytes) -> _ReceiveResponse[M]:
        self = cls()
        pos = 0
        end = len(data)
        pop = cls._POP
        try:
            while pos < end:
                # the key and a message's length read inline (round 9, as decode_message's)
                key = data[pos]
                if key < 0x80:
                    pos += 1
                else:
                    key, pos = _varint(data, pos)
                if key == 0x12:
                    n = data[pos]
                    if n >= 0x80 and data[pos + 1] < 0x80:
                        n = (n & 0x7F) | data[pos + 1] << 7
                        pos += 2
                    else:
                        n, pos = _varint(data, pos)
                    if pos + n > end:
                        raise MessageDecodeError("ReceiveMessageResponse truncated")
                    try:
                        # the class's own type by ``_POP`` (mypy cannot tie the two)
                        self.message = decode_message(data, pos, pos + n, pop)  # type: ignore[assignment]
                    except UndecodableMessage as exc:
                        self.message, self.error = exc.message, exc  # type: ignore[assignment]
                    except MessageDecodeError as exc:
                        self.message, self.error = None, exc
                    self.status = None
                    pos += n
                elif key == 0x0A:
                    n, pos = _varint(data, pos)
                    if pos + n > end:
                        raise MessageDecodeError("ReceiveMessageResponse truncated")
                    self.status = _STATUSES.get(data[pos : pos + n])
                    self.message = None
                    pos += n
                else:
                    pos = _skip(data, pos, key & 7)
        except IndexError as exc:
            raise MessageDecodeError(f"corrupt ReceiveMessageResponse: {exc}") from exc
        return self


class FastReceiveResponse(_ReceiveResponse[ReceivedMessage]):
    """A response whose message is a ``ReceivedMessage`` (``SimpleConsumer.receive``)."""

    __slots__ = ()


class FastPopReceiveResponse(_ReceiveResponse[PopMessage]):
    """A response whose message is the push consumer's ``PopMessage``
    (``SimpleConsumer.receive_pop``)."""

    __slots__ = ()
    _POP = True
