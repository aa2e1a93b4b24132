"""Stored-message codec: the records in a PULL_MESSAGE body, properties and message ids.

A pull body is a concatenation of commit-log records, all big-endian (apache/rocketmq
``MessageDecoder``):

```text
int32 TOTALSIZE   int32 MAGICCODE   int32 BODYCRC   int32 QUEUEID   int32 FLAG
int64 QUEUEOFFSET   int64 PHYSICALOFFSET   int32 SYSFLAG   int64 BORNTIMESTAMP
BORNHOST (4 or 16 IP bytes + int32 port)   int64 STORETIMESTAMP
STOREHOST (4 or 16 IP bytes + int32 port)   int32 RECONSUMETIMES
int64 PREPARED_TRANSACTION_OFFSET   int32 BODYLEN + body
TOPICLEN (int8 for magic V1, int16 for V2) + topic   int16 PROPERTIESLEN + properties
```

Decoding is strict where Java is lenient: every record must be exactly TOTALSIZE bytes,
and any truncated, overlong or malformed field raises ``MessageDecodeError`` for the
whole body (Java silently returns the records before the first bad one).
As in Java, a decompressed message has the COMPRESSED bit (0x1) cleared in ``sys_flag``
(the compression-type bits are kept) and ``body_crc`` stays the CRC of the stored
(compressed) body. The topic length is read unsigned in V1 (Java reads a signed byte,
but brokers switch to V2 above 127 bytes anyway).
"""

from __future__ import annotations

import enum
import functools
import socket
import struct
import threading
import zlib
from collections.abc import Callable, ItemsView, Iterator, KeysView, Mapping, Sequence, ValuesView
from dataclasses import dataclass, field, replace
from itertools import chain, repeat
from typing import TYPE_CHECKING, Any, TypeVar, cast, overload

import lz4.frame
import zstandard

import aiorocket.message as _message

# The message ids live in the neutral core (MessageExt computes them); re-exported here.
from aiorocket._message_id import decode_offset_message_id, offset_message_id, pack_host
from aiorocket._message_id import host_str as _host_str
from aiorocket.errors import ConfigError, MessageDecodeError
from aiorocket.message import MessageExt
from aiorocket.received import ConsumerMessage, PopMessage

__all__ = [
    "MAGIC_V1",
    "MAGIC_V2",
    "MAX_PROPERTIES_BYTES",
    "MAX_TOPIC_BYTES",
    "MIN_RECORD_SIZE",
    "NAME_VALUE_SEPARATOR",
    "PROPERTY_SEPARATOR",
    "SYSFLAG_BORNHOST_V6",
    "SYSFLAG_COMPRESSED",
    "SYSFLAG_COMPRESSION_MASK",
    "SYSFLAG_MULTI_TAGS",
    "SYSFLAG_STOREHOST_V6",
    "V1_MAX_TOPIC_BYTES",
    "CompressionType",
    "StoredProperties",
    "UndecodableRecord",
    "compress_body",
    "decode_messages",
    "decode_offset_message_id",
    "decode_properties",
    "decompress_body",
    "decompress_sniffed",
    "encode_properties",
    "offset_message_id",
    "pack_host",
]

MAGIC_V1 = 0xDAA320A7  # -626843481 as a Java int
MAGIC_V2 = 0xDAA320AB  # -626843477; 2-byte topic length, used for topics > 127 bytes
V1_MAX_TOPIC_BYTES = 127
MAX_TOPIC_BYTES = 32767
MAX_PROPERTIES_BYTES = 32767  # Java writes the length as a signed short

SYSFLAG_COMPRESSED = 0x1
SYSFLAG_MULTI_TAGS = 0x2
SYSFLAG_BORNHOST_V6 = 0x10
SYSFLAG_STOREHOST_V6 = 0x20
SYSFLAG_COMPRESSION_MASK = 0x7 << 8

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"


class CompressionType(enum.IntEnum):
    """Body compression algorithm, stored in ``(sys_flag >> 8) & 7`` (0 also means ZLIB)."""

    LZ4 = 1  # LZ4 *frame* format (Java: net.jpountz.lz4.LZ4FrameOutputStream)
    ZSTD = 2  # zstd frames (Java: zstd-jni ZstdOutputStream, no content size in header)
    ZLIB = 3  # zlib-wrapped deflate (Java: java.util.zip.DeflaterOutputStream)


# Fixed part up to and including BORNTIMESTAMP (48 bytes).
_HEAD = struct.Struct(">iIiiiqqiq")
# BORNHOST .. BODYLEN, indexed by (sys_flag >> 4) & 3: born v6 is bit 0, store v6 bit 1.
_TAILS = (
    struct.Struct(">4siq4siiqi"),
    struct.Struct(">16siq4siiqi"),
    struct.Struct(">4siq16siiqi"),
    struct.Struct(">16siq16siiqi"),
)
_FIXED_V4 = struct.Struct(">iIiiiqqiq4siq4siiqi")  # _HEAD + _TAILS[0]: IPv4 hosts
# The same fixed part (88 bytes), as _decode_usual reads it: first the fields it needs
# (TOTALSIZE, MAGICCODE, QUEUEID, QUEUEOFFSET, SYSFLAG, RECONSUMETIMES, BODYLEN), then,
# only for a class other than ConsumerMessage (which decodes them on first access), the
# others, each host's address and port as one 8-byte string (compared with the last
# record's in one step). The magic code signed and the body's length unsigned: the
# magic's int is then one digit (compared by the interpreter's int fast path) and a
# negative length cannot pass (a "negative" one is above 2**31 and runs past the record).
# Of SYSFLAG only its low byte, which holds the bits that send a record to the checked
# path (0x31), looked up in _UNUSUAL_FLAGS (a subscript and a bool, where ``& 0x31``
# was a generic int operation); the rest reads the whole of it (benchmarks/ceiling.py;
# benchmarks/README.md, "Round 13").
_USUAL_EAGER = struct.Struct(">ii4xi4xq11xB32xi8xI")
_MAGIC_V1_SIGNED = MAGIC_V1 - (1 << 32)
_UNUSUAL_FLAGS = tuple(bool(low & 0x31) for low in range(256))
_USUAL_REST = struct.Struct(">8xi4xi8xqiq8sq8s4xq")
_U16 = struct.Struct(">H")


@functools.cache  # at most 256 (a V1 topic's length is one byte)
def _topic_tail(topic_len: int) -> struct.Struct:
    """A V1 record's fields after the body, for a topic of ``topic_len`` bytes: its
    length byte and the topic as one string (compared with the last record's in one
    step), and the properties' length."""
    return struct.Struct(f">{topic_len + 1}sH")


_TOPIC_TAIL_EMPTY = _topic_tail(0)


# A usual record's fixed part as _decode_alike reads it: _USUAL_EAGER's fields but
# TOTALSIZE and MAGICCODE read as one signed 64-bit int (TOTALSIZE * 2**32 + the magic
# code, unsigned), compared with the layout's in one step: one int a record, not two.
_ALIKE_EAGER = ">q" + _USUAL_EAGER.format[3:]


@functools.lru_cache(maxsize=64)
def _layout(body_len: int, lead_len: int, props_len: int) -> struct.Struct:
    """A usual record of a ``body_len``-byte body, a ``lead_len``-byte topic lead (the
    length byte and the topic) and ``props_len`` bytes of properties, as
    ``_decode_alike`` reads it in one unpack: the fields of _ALIKE_EAGER, then the
    body, the lead, the properties' length and the properties."""
    return struct.Struct(f"{_ALIKE_EAGER}{body_len}s{lead_len}sH{props_len}s")


# The fields of one record of a layout (``_layout``) and the places in them of those
# ``_decode_bulk`` reads a column of: TOTALSIZE and the magic, the queue id and offset,
# SYSFLAG's low byte, the reconsume times, BODYLEN, the body, the topic's lead, the
# properties' length and the properties.
_FIELDS = 10
_HEAD_AT, _QID_AT, _QOFF_AT, _FLAGS_AT, _RECONSUME_AT = 0, 1, 2, 3, 4
_BODY_LEN_AT, _BODY_AT, _LEAD_AT, _PROPS_LEN_AT, _PROPS_AT = 5, 6, 7, 8, 9
#: the fewest records read by one unpack (``_decode_bulk``), and the most
_BULK_MIN, _BULK_MAX = 4, 64
#: records of a bulk unpack for as many records left: the largest power of two not
#: above it (at most _BULK_MAX), so that few bulk structs are made for any answers
_BULK_N = tuple(
    min(1 << (left.bit_length() - 1), _BULK_MAX) if left else 0 for left in range(_BULK_MAX + 1)
)


#: the layouts (``_layout``'s structs) of answers decoded since the last clear: an answer
#: is read many records an unpack only when an earlier one had its layout, so that an
#: answer whose records are alike but unlike the last answer's (one body length an
#: answer) compiles no bulk struct (~8 µs for 32 records on the 2-core test machine:
#: about what one answer's bulk read saves); cleared when it holds _BULK_LAYOUTS_MAX
_BULK_LAYOUTS: set[struct.Struct] = set()
_BULK_LAYOUTS_MAX = 64


@functools.lru_cache(maxsize=32)
def _bulk(layout: struct.Struct, n: int) -> tuple[struct.Struct, struct.Struct]:
    """``n`` records of ``layout`` one after the other, read by one unpack: their
    fields (``layout``'s), and their fixed parts (a ``bytes`` each)."""
    fixed = _USUAL_EAGER.size
    one = f"{fixed}s{layout.size - fixed}x"  # a record's fixed part, the rest skipped
    return (struct.Struct(">" + layout.format[1:] * n),
            struct.Struct(">" + one * (n - 1) + f"{fixed}s"))  # fmt: skip


# TOTALSIZE and BODYLEN, to tell whether an answer's first two records are laid out alike
_SIZES = struct.Struct(">i80xI")
_HEAD_SIZE = _HEAD.size
# Smallest legal record: V1 magic, IPv4 hosts, empty body, topic and properties.
MIN_RECORD_SIZE = _HEAD_SIZE + _TAILS[0].size + 1 + 2  # 91, as in Java

if TYPE_CHECKING:
    from aiorocket.received import QueueView, Settler

    #: what each ConsumerMessage of a pull is stamped with: its queue, the queue's
    #: generation when the pull was sent, and the settler
    Stamp = tuple[QueueView | None, int, Settler | None]

_inet_ntoa = socket.inet_ntoa


def _fail(pos: int, what: str) -> MessageDecodeError:
    return MessageDecodeError(f"corrupt stored message at byte {pos}: {what}", position=pos)


@dataclass(frozen=True, slots=True)
class UndecodableRecord:
    """A record of a pull body that could not be decoded, with what could be read of it.

    ``queue_offset``, ``commit_log_offset`` and ``queue_id`` are None when even the
    record's fixed header was unreadable; then the records after it are lost too
    (``size`` is None). ``topic`` and ``properties`` are what could be read of them
    (empty when nothing; a property's invalid UTF-8 replaced), for what a pop needs to
    settle the record (its check point). ``msg_id`` is the UNIQ_KEY when the properties
    were readable, else the broker's offset message id, else empty. ``index`` is its
    place among the answer's records (0: the first), for answers that list a field per
    record in order (a lite pop's delivery counts).
    """

    error: str
    queue_offset: int | None = None
    commit_log_offset: int | None = None
    store_host: str = ""
    msg_id: str = ""
    size: int | None = None
    queue_id: int | None = None
    topic: str = ""
    properties: Mapping[str, str] = field(default_factory=dict, hash=False)
    index: int | None = None


def decode_messages(
    body: bytes | bytearray | memoryview,
    *,
    broker_name: str = "",
    check_crc: bool = False,
    decompress: bool = True,
    message_class: type[MessageExt] = MessageExt,
    undecodable: list[UndecodableRecord] | None = None,
    stamp: Stamp | None = None,
    start: int = 0,
    end: int | None = None,
    summary: list[int] | None = None,
    offsets: list[Sequence[int]] | None = None,
) -> list[MessageExt]:
    """Decode the concatenated store records of a PULL_MESSAGE (FOUND) response body.

    ``check_crc`` verifies BODYCRC against the stored body; ``decompress=False`` keeps
    compressed bodies (and the COMPRESSED bit) as stored. ``message_class`` may be a
    MessageExt subclass whose extra fields all have defaults. Raises
    ``MessageDecodeError`` for any truncated or corrupt input, unless
    ``undecodable`` is given: then each bad record is appended there and decoding goes
    on with the next one (its framing, TOTALSIZE and magic code, is intact), or stops
    (it is not), returning the records decoded. ``stamp``: with ``message_class``
    ConsumerMessage or a subclass, the queue, generation and settler each message gets.
    ``start`` and ``end``: the records are ``body[start:end]``, read where they are
    (``RemotingCommand.body_in_place``); positions in errors count from ``start``.
    ``summary``: when every message returned was read as a record laid out alike
    (ConsumerMessage and PopMessage: one body length, ``_decode_alike``), that body
    length is appended to it, so the consumer's accounting need not read each
    message's (benchmarks/README.md, "Round 16"); nothing otherwise. ``offsets``: when
    every message returned was read so (``_decode_bulk``), their queue offsets in order
    are appended to it, as one sequence, so that the consumer's accounting need not
    read each message's either ("Round 17"); nothing otherwise.
    """
    data = body if type(body) is bytes else bytes(body)
    out: list[MessageExt] = []
    pos = start
    if start or (end is not None and end != len(data)):
        # The records read where they were received, each message's fields copied
        # out (bytes slices, which keep nothing else of ``data`` alive), not the whole
        # body first (benchmarks/ceiling.py; benchmarks/README.md, "Round 12"). The
        # usual records only: from the first other one on (compressed, IPv6, bad...),
        # a copy of the body is read as before, so that nothing past ``end`` is read
        # and errors say what and where as they did.
        stop = len(data) if end is None else end
        if not check_crc:
            pos = _decode_usual(
                out, data, start, stop, broker_name, message_class, stamp, summary, offsets
            )
            if pos == stop:
                return out
        data = data[start:stop]
        pos -= start
    bad = 0
    while True:
        try:
            _decode_into(
                out, data, pos, broker_name, check_crc, decompress, message_class, stamp,
                summary, offsets,
            )  # fmt: skip
            return out
        except MessageDecodeError as exc:
            if undecodable is None or exc.position is None:
                raise
            record, next_pos = _salvage(data, exc.position, str(exc))
            undecodable.append(replace(record, index=len(out) + bad))
            bad += 1
            if next_pos is None:
                return out
            pos = next_pos


def _decode_into(
    out: list[MessageExt],
    data: bytes,
    pos: int,
    broker_name: str,
    check_crc: bool,
    decompress: bool,
    message_class: type[MessageExt],
    stamp: Stamp | None,
    summary: list[int] | None = None,
    offsets: list[Sequence[int]] | None = None,
) -> None:
    """Decode the records from ``pos`` into ``out`` (``summary``, ``offsets``:
    ``decode_messages``'s).

    Once per message (benchmarks/ceiling.py; benchmarks/README.md, "Round 4 (issue 43,
    goal 1)": ~80 fewer bytecodes a record): the usual record, V1 magic, IPv4 hosts,
    uncompressed, ASCII properties, is decoded here with one consistency check, that
    its fields add up to its TOTALSIZE; every length is unsigned or checked >= 0, so
    that check also bounds each field within the record. At the first record that is
    anything else (or inconsistent), ``_decode_checked`` takes over from it: it checks
    each field on its own and raises the precise error, so a bad record fails exactly
    as before, and nothing of it was kept here.
    """
    end = len(data)
    if not check_crc:
        pos = _decode_usual(
            out, data, pos, end, broker_name, message_class, stamp, summary, offsets
        )
    if pos < end:
        start = len(out)
        _decode_checked(out, data, pos, broker_name, check_crc, decompress, message_class)
        if stamp is not None and issubclass(message_class, ConsumerMessage):
            for m in cast("list[ConsumerMessage]", out[start:]):
                m._pq, m._generation, m._settler = stamp


def _decode_usual(
    out: list[MessageExt],
    data: bytes,
    pos: int,
    end: int,
    broker_name: str,
    message_class: type[MessageExt],
    stamp: Stamp | None = None,
    summary: list[int] | None = None,
    offsets: list[Sequence[int]] | None = None,
) -> int:
    """The fast path of ``_decode_into``: decode usual records from ``pos`` to ``end``;
    return the position of the first record it did not decode (``end`` after the last).
    Bytes past ``end`` may be read but never decoded: a record is taken only when its
    fields add up to its TOTALSIZE within ``end``.

    A ConsumerMessage (the pull consumer's, exactly that class) is built here field by
    field, stamped with ``stamp``: calling its ``__init__`` (a frame, 19 arguments) and
    then stamping it cost ~1,500 instructions a message more (benchmarks/README.md,
    "Round 4 (issue 43, goal 1)"). So is a PopMessage (pop over remoting; "Round 9"),
    whose ten fields and properties are then read on first access too. Their fields and
    defaults are the dataclasses': a unit test compares every field with the
    ``__init__``-built message's.
    """
    # PopMessage too (pop over remoting): its own fields' defaults stored below
    pop = message_class is PopMessage
    consumer = message_class is ConsumerMessage or pop
    queue, generation, settler = (None, 0, None) if stamp is None else stamp
    # a subclass of ConsumerMessage: built by its __init__, then stamped
    stamped = stamp is not None and not consumer and issubclass(message_class, ConsumerMessage)
    # What every ConsumerMessage of the answer gets alike, stored from one tuple: six
    # values by one unpack, where a load and a store each were six bytecode pairs more
    # (benchmarks/ceiling.py; benchmarks/README.md, "Round 13"). broker_name, the stamp,
    # then the dataclass's defaults of _settled and _held; its other defaults are left
    # unset (aiorocket.received.UNSET_DEFAULTS; "Round 15").
    alike = (broker_name, queue, generation, settler, False, False)
    if consumer:
        fresh = not out  # the answer's first records: a summary may speak for them all
        # the queue offsets of the records _decode_bulk took, a sequence each time
        columns: list[Sequence[int]] | None = [] if offsets is not None and fresh else None
        pos = _decode_alike(out, data, pos, end, message_class, alike, pop, columns)
        if pos == end:
            if fresh and out:
                if summary is not None:
                    # every record read laid out alike, of one body length (decode_messages)
                    summary.append(len(out[0].body))
                if columns and offsets is not None and sum(map(len, columns)) == len(out):
                    # ... and by _decode_bulk, which read their offsets too (decode_messages)
                    offsets.append(
                        columns[0] if len(columns) == 1 else tuple(chain.from_iterable(columns))
                    )
            return pos  # all of them: nothing for the loop below, nor its names, to do
    unpack_eager = _USUAL_EAGER.unpack_from
    unpack_rest = _USUAL_REST.unpack_from
    fixed = _USUAL_EAGER.size
    magic_v1 = _MAGIC_V1_SIGNED
    unusual = _UNUSUAL_FLAGS
    new_props = new_msg = object.__new__
    init_msg = message_class.__init__
    # Consecutive records mostly share hosts and topic: reuse the last rendered strings.
    last_born = last_store = b""
    born = store = topic = ""
    # The topic's length byte and the topic as one string, and the properties' length,
    # for the last topic's length: one unpack and one compare with the last record's
    # (benchmarks/README.md, "Round 7 (issue 43, goals 1-2)" and "Round 13"); read
    # again by the struct of the new length when they differ. None: no record yet.
    last_lead: bytes | None = None
    unpack_tail = _TOPIC_TAIL_EMPTY.unpack_from
    tail_size = _TOPIC_TAIL_EMPTY.size
    try:
        while pos < end:
            # (typed as the consumer's: the other classes' fields are a subset)
            msg: ConsumerMessage = new_msg(message_class)  # type: ignore[assignment]
            # the three eager fields a message keeps straight into its slots, a load and
            # a store less each (ceiling.py; "Round 13"); the message is dropped if the
            # record is not a usual one
            (total, magic, msg.queue_id, msg.queue_offset, flags_low, msg.reconsume_times,
             body_len) = unpack_eager(data, pos)  # fmt: skip
            rec_end = pos + total
            # IPv6 hosts (0x30) and compressed bodies (0x1) take the checked path.
            if magic != magic_v1 or unusual[flags_low] or rec_end > end:
                break
            b = pos + fixed  # the body
            t = b + body_len  # the topic's length byte
            try:
                lead, props_len = unpack_tail(data, t)
            except struct.error:  # the last record's topic may be the shorter one
                lead = b""  # never a lead (it has the length byte): read again below
            if lead != last_lead:
                # another topic (or length): its length byte, read all the same; a
                # record cut short raises below, and the checked path says how
                tail = _topic_tail(data[t])
                unpack_tail = tail.unpack_from
                tail_size = tail.size
                lead, props_len = unpack_tail(data, t)
                topic = lead[1:].decode()
                last_lead = lead
            p = t + tail_size  # the properties
            # (the properties' length, mostly below 257, is a cached int: no new one)
            if rec_end - p != props_len:
                break  # the fields do not add up to TOTALSIZE
            raw_props = data[p:rec_end]
            if not raw_props.isascii():
                break
            if consumer:
                msg.topic = topic
                msg.body = data[b:t]
                # the StoredProperties over them made when first read (aiorocket.message,
                # "Fields read on first access"; benchmarks/README.md, "Round 9")
                msg._raw_properties = raw_props  # type: ignore[misc]
                # the other ten fields are read from the record's fixed bytes when
                # first asked for (aiorocket.message, "Fields read on first access")
                # (in _StoredHead's __slots__: mypy counts only the dataclass's own)
                msg._head = data[pos:b]  # type: ignore[misc]
                (msg.broker_name, msg._pq, msg._generation, msg._settler, msg._settled,
                 msg._held) = alike  # fmt: skip
                if pop:  # PopMessage's own fields, as its __init__ sets them
                    pm: PopMessage = msg  # type: ignore[assignment]
                    (pm.receipt_handle, pm.delivery_attempt, pm.message_group,
                     pm._message_id, pm._renewal, pm._ack_tries, pm._ack_state, pm._copies,
                     pm._nacking) = _POP_OWN  # fmt: skip
            else:
                (crc, flag, cl_offset, sys_flag, born_ts, born_raw, store_ts, store_raw,
                 prepared) = unpack_rest(data, pos)  # fmt: skip
                if born_raw != last_born:
                    born = _raw_host_str(born_raw)
                    last_born = born_raw
                if store_raw != last_store:
                    store = _raw_host_str(store_raw)
                    last_store = store_raw
                props = new_props(StoredProperties)
                props._raw = raw_props
                props._parsed = None
                # fmt: off
                init_msg(
                    msg, topic, data[b:t], props, msg.queue_id,
                    msg.queue_offset, cl_offset, flag, sys_flag, born_ts, born, store_ts,
                    store, msg.reconsume_times, prepared, crc, total, broker_name,
                )
                # fmt: on
                if stamped:
                    msg._pq, msg._generation, msg._settler = queue, generation, settler
            out.append(msg)
            pos = rec_end
    except (struct.error, IndexError, UnicodeDecodeError):
        pass  # short or corrupt: the checked path says how
    return pos


#: PopMessage's own fields as its dataclass ``__init__`` sets them (``_decode_usual``):
#: receipt_handle, delivery_attempt, message_group, _message_id, _renewal, _ack_tries,
#: _ack_state, _copies, _nacking
_POP_OWN = ("", 1, None, "", None, 0, 0, None, False)


def _decode_alike(
    out: list[MessageExt],
    data: bytes,
    pos: int,
    end: int,
    message_class: type[MessageExt],
    alike: tuple[Any, ...],
    pop: bool,
    columns: list[Sequence[int]] | None = None,
) -> int:
    """``_decode_usual``'s records from ``pos`` while they are laid out as the first
    two (the body's length, the topic): each read by one unpack, its body, the fields
    after it and (when they are as long as the first record's) its properties included,
    where its fixed part and its tail were two unpacks and its body and properties
    slices (benchmarks/ceiling.py; benchmarks/README.md, "Round 14" and "Round 15").
    Returns the position of the first record it did not decode, ``pos`` when the first
    two differ (answers of varied sizes: ``_decode_usual`` reads them all, as before,
    and this costs them two small unpacks an answer). A record whose properties are of
    another length (KEYS of varied lengths) stays in the run: its properties are sliced
    as before. ConsumerMessage and PopMessage only, stored as ``_decode_usual`` stores
    them: a record that is not usual, or of another layout, is left to it. ``columns``:
    each time ``_decode_bulk`` takes records, their offsets are appended to it."""
    try:
        total, body_len = _SIZES.unpack_from(data, pos)
        if _SIZES.unpack_from(data, pos + total)[1] != body_len:
            return pos
        t = pos + _USUAL_EAGER.size + body_len  # the topic's length byte
        lead = data[t : t + data[t] + 1]
        topic = lead[1:].decode()
        # the first record's properties' length, as its TOTALSIZE says (a wrong one is
        # not as the record's own field says: the first record breaks the run below)
        props_at = t - pos + len(lead) + 2
        whole = _layout(body_len, len(lead), max(total - props_at, 0))
    except (struct.error, IndexError, UnicodeDecodeError, ValueError, OverflowError):
        return pos  # short or corrupt: _decode_usual says how
    unpack_whole = whole.unpack_from
    size = whole.size
    props_len_alike = size - props_at
    # a record of this layout begins with these 8 bytes: its TOTALSIZE, the V1 magic
    total_magic = (size << 32) + MAGIC_V1
    fixed = _USUAL_EAGER.size
    # Records of exactly this layout, one after the other (all of an answer of messages
    # of one size): many read by one unpack and checked a column at a time
    # (_decode_bulk), when an earlier answer had this layout; what it does not take is
    # read a record at a time below.
    seen = whole in _BULK_LAYOUTS
    if not seen:
        if len(_BULK_LAYOUTS) >= _BULK_LAYOUTS_MAX:
            _BULK_LAYOUTS.clear()
        _BULK_LAYOUTS.add(whole)
    while seen:
        left = (end - pos) // size
        if left < _BULK_MIN:
            break
        n = _BULK_N[left] if left < _BULK_MAX else _BULK_MAX
        try:
            # the last of them is where a record of this size would be: a cheap sign
            # that they all are (each is checked all the same)
            if _SIZES.unpack_from(data, pos + (n - 1) * size)[0] != size:
                break
        except struct.error:
            break
        taken = _decode_bulk(
            out, data, pos, n, whole, total_magic, body_len, lead, props_len_alike,
            topic, message_class, alike, pop, columns,
        )  # fmt: skip
        if not taken:
            break
        pos += taken
    unusual = _UNUSUAL_FLAGS
    new_msg = object.__new__
    try:
        while pos < end:
            msg: ConsumerMessage = new_msg(message_class)  # type: ignore[assignment]
            # the fields a message keeps straight into its slots, as _decode_usual's
            (head, msg.queue_id, msg.queue_offset, flags_low, msg.reconsume_times, body_len_now,
             msg.body, lead_now, props_len, raw_props) = unpack_whole(data, pos)  # fmt: skip
            if unusual[flags_low] or body_len_now != body_len or lead_now != lead:
                break  # not a usual record, or of another layout
            # (the properties' length, mostly below 257, is a cached int: no new one)
            if head == total_magic and props_len == props_len_alike:
                rec_end = pos + size
                if rec_end > end:
                    break
            else:  # another TOTALSIZE: properties of another length, or not usual
                rec_end = pos + (head >> 32)
                p = pos + props_at
                if head & 0xFFFFFFFF != MAGIC_V1 or rec_end > end or rec_end - p != props_len:
                    break  # not a usual record, or its fields do not add up
                raw_props = data[p:rec_end]
            if not raw_props.isascii():
                break
            msg.topic = topic
            msg._raw_properties = raw_props  # type: ignore[misc]
            msg._head = data[pos : pos + fixed]  # type: ignore[misc]
            (msg.broker_name, msg._pq, msg._generation, msg._settler, msg._settled,
             msg._held) = alike  # fmt: skip
            if pop:
                pm: PopMessage = msg  # type: ignore[assignment]
                (pm.receipt_handle, pm.delivery_attempt, pm.message_group,
                 pm._message_id, pm._renewal, pm._ack_tries, pm._ack_state, pm._copies,
                 pm._nacking) = _POP_OWN  # fmt: skip
            out.append(msg)
            pos = rec_end
    except struct.error:
        pass  # a record shorter than the layout at the end of the bytes: _decode_usual's
    return pos


def _decode_bulk(
    out: list[MessageExt],
    data: bytes,
    pos: int,
    n: int,
    layout: struct.Struct,
    total_magic: int,
    body_len: int,
    lead: bytes,
    props_len: int,
    topic: str,
    message_class: type[MessageExt],
    alike: tuple[Any, ...],
    pop: bool,
    columns: list[Sequence[int]] | None,
) -> int:
    """``_decode_alike``'s next ``n`` records at ``pos`` (``data`` holds them), when
    every one is a usual record of ``layout`` (its TOTALSIZE and magic ``total_magic``,
    its body ``body_len`` bytes, its topic's lead ``lead``, ``props_len`` bytes of ASCII
    properties, SYSFLAG's low byte as the first one's and not one that sends a record to
    the checked path): they are then read by one unpack, checked a field's column at a
    time in C (``tuple.count``), their messages made by one ``map`` and their fields
    stored from the columns; returns the bytes taken (``n`` records), or 0 when any of
    them is not such a record: nothing is kept, and ``_decode_alike`` reads them one at
    a time, as it did (benchmarks/ceiling.py; benchmarks/README.md, "Round 17").

    The checks are the per-record loop's, on every record: a record whose TOTALSIZE is
    the layout's and whose properties' length is too has its fields add up to it, so
    the records lie one after the other, each within the bytes. ``columns``: their
    offsets are appended to it, as one tuple."""
    fields, fixed_parts = _bulk(layout, n)
    vals = fields.unpack_from(data, pos)
    f = _FIELDS
    flags = vals[_FLAGS_AT::f]
    if (
        vals[_HEAD_AT::f].count(total_magic) != n
        or vals[_BODY_LEN_AT::f].count(body_len) != n
        or vals[_LEAD_AT::f].count(lead) != n
        or vals[_PROPS_LEN_AT::f].count(props_len) != n
        or _UNUSUAL_FLAGS[flags[0]]
        or flags.count(flags[0]) != n
    ):
        return 0
    props = vals[_PROPS_AT::f]
    if not all(map(bytes.isascii, props)):
        return 0
    # each record's fixed bytes (the deferred fields', aiorocket.message)
    heads = fixed_parts.unpack_from(data, pos)
    queue_offsets = vals[_QOFF_AT::f]
    # (typed as the consumer's, as _decode_usual's: PopMessage's fields are a superset)
    msgs: list[ConsumerMessage] = list(map(object.__new__, repeat(message_class, n)))  # type: ignore[arg-type]
    # the targets are assigned in order: each message first, then its fields
    for (msg, msg.queue_id, msg.queue_offset, msg.reconsume_times, msg.body,
         msg._raw_properties, msg._head) in zip(
            msgs, vals[_QID_AT::f], queue_offsets, vals[_RECONSUME_AT::f],
            vals[_BODY_AT::f], props, heads, strict=True):  # fmt: skip
        msg.topic = topic
        (msg.broker_name, msg._pq, msg._generation, msg._settler, msg._settled,
         msg._held) = alike  # fmt: skip
        if pop:
            pm: PopMessage = msg
            (pm.receipt_handle, pm.delivery_attempt, pm.message_group,
             pm._message_id, pm._renewal, pm._ack_tries, pm._ack_state, pm._copies,
             pm._nacking) = _POP_OWN  # fmt: skip
    out += msgs
    if columns is not None:
        columns.append(queue_offsets)
    return n * layout.size


def _raw_host_str(raw: bytes) -> str:
    """ "ip:port" of an IPv4 address and its int32 port, as the 8 bytes stored."""
    return f"{_inet_ntoa(raw[:4])}:{int.from_bytes(raw[4:], 'big', signed=True)}"


def _decode_checked(
    out: list[MessageExt],
    data: bytes,
    pos: int,
    broker_name: str,
    check_crc: bool,
    decompress: bool,
    message_class: type[MessageExt],
) -> None:
    end = len(data)
    append = out.append
    unpack_v4 = _FIXED_V4.unpack_from
    ntoa = _inet_ntoa
    new_props = new_msg = object.__new__
    init_msg = message_class.__init__
    # Consecutive records mostly share hosts: reuse the last rendered strings.
    last_born = last_store = (b"", -1)
    born = store = topic = ""
    last_topic = b""  # the raw bytes of ``topic`` (an empty topic decodes to "")
    last_topic_len = 0
    try:
        while pos < end:
            if end - pos < MIN_RECORD_SIZE:
                raise _fail(pos, f"truncated: {end - pos} bytes left, a record needs >= 91")
            # Optimistically unpack the IPv4 layout (the record is >= 91 bytes, so it fits).
            (total, magic, crc, queue_id, flag, queue_offset, cl_offset, sys_flag, born_ts,
             born_ip, born_port, store_ts, store_ip, store_port, reconsume, prepared,
             body_len) = unpack_v4(data, pos)  # fmt: skip
            rec_end = pos + total
            if total < MIN_RECORD_SIZE:
                raise _fail(pos, f"TOTALSIZE {total} below the minimum {MIN_RECORD_SIZE}")
            if rec_end > end:
                raise _fail(pos, f"TOTALSIZE {total} exceeds the {end - pos} bytes left")
            if magic == MAGIC_V1:
                topic_len_size = 1
            elif magic == MAGIC_V2:
                topic_len_size = 2
            else:
                raise _fail(pos, f"unknown magic code 0x{magic:08X}")
            if sys_flag & 0x30:
                tail = _TAILS[(sys_flag >> 4) & 3]
                p = pos + _HEAD_SIZE + tail.size
                if p + topic_len_size + 2 > rec_end:
                    raise _fail(pos, f"TOTALSIZE {total} too small for the fixed fields")
                (born_ip, born_port, store_ts, store_ip, store_port, reconsume, prepared,
                 body_len) = tail.unpack_from(data, pos + _HEAD_SIZE)  # fmt: skip
                born = _host_str(born_ip, born_port)
                store = _host_str(store_ip, store_port)
                last_born = last_store = (b"", -1)
            else:
                p = pos + _FIXED_V4.size
                if p + topic_len_size + 2 > rec_end:
                    raise _fail(pos, f"TOTALSIZE {total} too small for the fixed fields")
                if born_port != last_born[1] or born_ip != last_born[0]:
                    born = f"{ntoa(born_ip)}:{born_port}"
                    last_born = (born_ip, born_port)
                if store_port != last_store[1] or store_ip != last_store[0]:
                    store = f"{ntoa(store_ip)}:{store_port}"
                    last_store = (store_ip, store_port)
            if body_len < 0 or p + body_len + topic_len_size + 2 > rec_end:
                raise _fail(pos, f"body length {body_len} runs past the record")
            msg_body = data[p : p + body_len]
            p += body_len
            if topic_len_size == 1:
                topic_len = data[p]
                p += 1
            else:
                topic_len = _U16.unpack_from(data, p)[0]
                p += 2
            if p + topic_len + 2 > rec_end:
                raise _fail(pos, f"topic length {topic_len} runs past the record")
            # Consecutive records mostly share the topic too: compare in place, decode
            # only a new one (a slice and a decode less per message: ceiling.py).
            if topic_len != last_topic_len or not data.startswith(last_topic, p):
                last_topic = data[p : p + topic_len]
                last_topic_len = topic_len
                topic = last_topic.decode()
            p += topic_len
            props_len = (data[p] << 8) | data[p + 1]
            p += 2
            if p + props_len != rec_end:
                if p + props_len > rec_end:
                    raise _fail(pos, f"properties length {props_len} runs past the record")
                raise _fail(pos, f"TOTALSIZE {total} larger than the record's fields")
            raw_props = data[p:rec_end]
            # ASCII (the usual case) cannot fail to decode later; anything else is
            # decoded now so that invalid UTF-8 still fails the whole body here.
            # StoredProperties(raw) without its __init__ frame, once per message (ceiling.py)
            props = new_props(StoredProperties)
            props._raw = raw_props if raw_props.isascii() else raw_props.decode()
            props._parsed = None
            if body_len:
                if check_crc and (zlib.crc32(msg_body) & 0x7FFFFFFF) != crc:
                    raise _fail(pos, f"body CRC mismatch (stored {crc})")
                if decompress and sys_flag & SYSFLAG_COMPRESSED:
                    msg_body = _decompress_at(pos, msg_body, sys_flag)
                    sys_flag &= ~SYSFLAG_COMPRESSED
            # Positional for speed; the field order is pinned by a unit test. The class's
            # __init__ called as a plain function: the interpreter runs it in its own
            # loop, where calling the class enters it from C (ceiling.py: ~5% of the
            # client's instructions a message).
            msg = new_msg(message_class)
            # fmt: off
            init_msg(
                msg, topic, msg_body, props, queue_id, queue_offset, cl_offset, flag,
                sys_flag, born_ts, born, store_ts, store, reconsume, prepared, crc, total,
                broker_name,
            )
            # fmt: on
            append(msg)
            pos = rec_end
    except MessageDecodeError:
        raise
    except UnicodeDecodeError as exc:
        raise _fail(pos, f"invalid UTF-8 in topic or properties ({exc.reason})") from exc
    except (struct.error, IndexError, ValueError, OverflowError) as exc:  # defensive net
        raise _fail(pos, f"{type(exc).__name__}: {exc}") from exc


def _salvage(data: bytes, pos: int, error: str) -> tuple[UndecodableRecord, int | None]:
    """What can be read of the bad record at ``pos``, and where the next one starts
    (None when the record's own length or magic code cannot be trusted)."""
    end = len(data)
    if end - pos < MIN_RECORD_SIZE:
        return UndecodableRecord(error), None
    total, magic, _crc, queue_id, _flag, queue_offset, cl_offset, sys_flag, _born_ts = (
        _HEAD.unpack_from(data, pos)
    )
    if magic not in (MAGIC_V1, MAGIC_V2) or not MIN_RECORD_SIZE <= total <= end - pos:
        return UndecodableRecord(error), None
    rec_end = pos + total
    store_host = msg_id = topic = ""
    props: dict[str, str] = {}
    tail = _TAILS[(sys_flag >> 4) & 3]
    p = pos + _HEAD_SIZE + tail.size
    if p <= rec_end:
        _bip, _bport, _sts, store_ip, store_port, _re, _prep, body_len = tail.unpack_from(
            data, pos + _HEAD_SIZE
        )
        store_host = _host_str(store_ip, store_port)
        try:
            msg_id = offset_message_id(store_host, cl_offset)
        except ValueError:  # a port out of range: this part of the header is garbage
            store_host = ""
        topic, props = _topic_and_properties(data, p, rec_end, body_len, magic)
        msg_id = props.get("UNIQ_KEY") or msg_id
    record = UndecodableRecord(
        error, queue_offset, cl_offset, store_host, msg_id, total, queue_id, topic, props
    )
    return record, rec_end


def _topic_and_properties(
    data: bytes, p: int, rec_end: int, body_len: int, magic: int
) -> tuple[str, dict[str, str]]:
    """The topic and properties of a bad record, if they can still be found."""
    try:
        p += body_len
        if magic == MAGIC_V1:
            topic_len = data[p]
            p += 1
        else:
            topic_len = _U16.unpack_from(data, p)[0]
            p += 2
        topic = data[p : p + topic_len].decode(errors="replace")
        p += topic_len
        props_len = _U16.unpack_from(data, p)[0]
        if body_len < 0 or p + 2 + props_len != rec_end:
            return "", {}
        raw = data[p + 2 : rec_end].decode(errors="replace")
        return topic, decode_properties(raw)
    except (IndexError, struct.error):
        return "", {}


def _decompress_at(pos: int, data: bytes, sys_flag: int) -> bytes:
    try:
        return decompress_body(data, sys_flag)
    except MessageDecodeError as exc:
        raise _fail(pos, str(exc)) from exc


def _each_frame(data: bytes, decompress_one: Callable[[bytes], tuple[bytes, bytes]]) -> bytes:
    """Decompress concatenated frames (Java's stream readers accept several)."""
    parts = []
    while data:
        part, rest = decompress_one(data)
        if len(rest) >= len(data):
            raise MessageDecodeError("compressed body has no complete frame")
        parts.append(part)
        data = rest
    return b"".join(parts)


def _lz4_frame(data: bytes) -> tuple[bytes, bytes]:
    out, used = lz4.frame.decompress(data, return_bytes_read=True)
    return out, data[used:]


_ZSTD_LOCAL = threading.local()


def _zstd_frame(data: bytes) -> tuple[bytes, bytes]:
    # zstd-jni's ZstdOutputStream omits the content size, so ZstdDecompressor.decompress
    # cannot be used; a decompressobj can. Decompressors are not thread-safe: one per thread.
    decompressor = getattr(_ZSTD_LOCAL, "decompressor", None)
    if decompressor is None:
        decompressor = _ZSTD_LOCAL.decompressor = zstandard.ZstdDecompressor()
    dobj = decompressor.decompressobj()
    out = dobj.decompress(data)
    if not dobj.eof:
        raise MessageDecodeError("compressed body is truncated")
    return out, dobj.unused_data


def decompress_body(data: bytes, sys_flag: int) -> bytes:
    """Decompress a stored body with the algorithm named in ``sys_flag`` bits 8-10."""
    algorithm = (sys_flag >> 8) & 7
    try:
        if algorithm in (0, 3):
            return zlib.decompress(data)
        if algorithm == 1:
            return _each_frame(data, _lz4_frame)
        if algorithm == 2:
            return _each_frame(data, _zstd_frame)
    except MessageDecodeError:
        raise
    except Exception as exc:  # zlib.error, lz4's RuntimeError, zstandard.ZstdError, ...
        raise MessageDecodeError(f"cannot decompress body (algorithm {algorithm}): {exc}") from exc
    raise MessageDecodeError(f"unknown compression algorithm {algorithm} in sys_flag")


#: the first bytes of each codec's output (zlib's are checked by ``_is_zlib``)
_LZ4_FRAME_MAGIC = b"\x04\x22\x4d\x18"
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_GZIP_MAGIC = b"\x1f\x8b"


def _is_zlib(data: bytes) -> bool:
    """A zlib header (RFC 1950): deflate (CM 8), and CMF*256+FLG a multiple of 31."""
    return len(data) >= 2 and data[0] & 0x0F == 8 and (data[0] << 8 | data[1]) % 31 == 0


def decompress_sniffed(data: bytes) -> bytes:
    """Decompress a body whose codec is known only from its own first bytes.

    The 5.x Proxy labels every compressed stored body GZIP, whatever its sys_flag says
    (5.5.0 GrpcConverter: ``sysFlag & COMPRESSED`` → ``Encoding.GZIP``), while remoting
    producers (ours and Java's) compress with zlib, LZ4 frames or zstd frames. Each
    format starts with its own magic, so the body names its codec: zlib header, LZ4
    frame ``04 22 4D 18``, zstd ``28 B5 2F FD`` (and a real gzip member, ``1F 8B``).
    ``MessageDecodeError`` for anything else, or a body its codec cannot read."""
    head = data[:4]
    try:
        if head == _LZ4_FRAME_MAGIC:
            return _each_frame(data, _lz4_frame)
        if head == _ZSTD_MAGIC:
            return _each_frame(data, _zstd_frame)
        if _is_zlib(data):
            return zlib.decompress(data)
        if head[:2] == _GZIP_MAGIC:
            return zlib.decompress(data, wbits=31)
    except MessageDecodeError:
        raise
    except Exception as exc:  # zlib.error, lz4's RuntimeError, zstandard.ZstdError, ...
        raise MessageDecodeError(f"cannot decompress body: {exc}") from exc
    raise MessageDecodeError(f"compressed body of an unknown codec (starts {head.hex()})")


def compress_body(body: bytes, compression: CompressionType, level: int = 5) -> bytes:
    """Compress a body the way the Java producer does (its default level is 5)."""
    if compression == CompressionType.ZLIB:
        return zlib.compress(body, level)
    if compression == CompressionType.LZ4:
        return bytes(lz4.frame.compress(body))
    if compression == CompressionType.ZSTD:
        return bytes(zstandard.ZstdCompressor(level=level).compress(body))
    raise ConfigError(f"unknown compression type {compression!r}")


def decode_properties(data: bytes | str) -> dict[str, str]:
    """Parse ``name\\x01value\\x02...`` like Java's ``string2messageProperties``.

    Items without a separator or with an empty name or value are dropped; a value may
    contain ``\\x01`` (only the first one separates); a later duplicate name wins.
    """
    if not isinstance(data, str):
        try:
            data = data.decode()
        except UnicodeDecodeError as exc:
            raise MessageDecodeError(f"invalid UTF-8 in properties ({exc.reason})") from exc
    props: dict[str, str] = {}
    for item in data.split(PROPERTY_SEPARATOR):
        name, _, value = item.partition(NAME_VALUE_SEPARATOR)
        if name and value:
            props[name] = value
    return props


_T = TypeVar("_T")


class StoredProperties(Mapping[str, str]):
    """A stored message's properties, parsed (like ``decode_properties``) on first use.

    Parsing them was the largest per-message cost of decoding a pull, and most handlers
    read few messages' properties, so the decoder keeps the validated raw text instead.
    Equal to any mapping with the same items; copies and pickles as a plain dict.
    """

    __slots__ = ("_parsed", "_raw")

    def __init__(self, raw: bytes | str) -> None:
        self._raw = raw  # valid UTF-8: the decoder checked it
        self._parsed: dict[str, str] | None = None

    def _dict(self) -> dict[str, str]:
        parsed = self._parsed
        if parsed is None:
            parsed = self._parsed = decode_properties(self._raw)
            self._raw = ""
        return parsed

    def __getitem__(self, key: str) -> str:
        return self._dict()[key]

    @overload
    def get(self, key: str, /) -> str | None: ...
    @overload
    def get(self, key: str, /, default: str | _T) -> str | _T: ...
    def get(self, key: str, /, default: Any = None) -> Any:
        return self._dict().get(key, default)

    def __contains__(self, key: object) -> bool:
        return key in self._dict()

    def __iter__(self) -> Iterator[str]:
        return iter(self._dict())

    def __len__(self) -> int:
        return len(self._dict())

    def keys(self) -> KeysView[str]:
        return self._dict().keys()

    def values(self) -> ValuesView[str]:
        return self._dict().values()

    def items(self) -> ItemsView[str, str]:
        return self._dict().items()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, StoredProperties):
            return self._dict() == other._dict()
        if isinstance(other, Mapping):
            return self._dict() == dict(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # a mapping, like dict

    def __or__(self, other: Mapping[str, str]) -> dict[str, str]:
        return {**self._dict(), **other}

    def __ror__(self, other: Mapping[str, str]) -> dict[str, str]:
        return {**other, **self._dict()}

    def copy(self) -> dict[str, str]:
        return dict(self._dict())

    def __reduce__(self) -> tuple[type[dict[str, str]], tuple[dict[str, str]]]:
        return dict, (self._dict(),)

    def __repr__(self) -> str:
        return repr(self._dict())


# what a pulled message's ``properties`` is made of when first read: the raw bytes
# ``_decode_usual`` left it (aiorocket.message, "Fields read on first access")
_message.read_raw_properties = StoredProperties


def encode_properties(props: Mapping[str, str]) -> str:
    """``name\\x01value\\x02`` per property, trailing separator included (as Java emits).

    Raises ``ConfigError`` if a name or value contains ``\\x01`` or ``\\x02``.
    Empty names or values are emitted but are dropped by every decoder (Java's too).
    """
    text = "".join([f"{k}\x01{v}\x02" for k, v in props.items()])
    n = len(props)
    if text.count(NAME_VALUE_SEPARATOR) != n or text.count(PROPERTY_SEPARATOR) != n:
        for k, v in props.items():
            if "\x01" in k or "\x02" in k or "\x01" in v or "\x02" in v:
                raise ConfigError(f"property {k!r} contains a reserved separator (\\x01 or \\x02)")
    return text
