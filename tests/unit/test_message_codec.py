"""Stored-message codec: records, properties, offset message ids and unique ids."""

from __future__ import annotations

import dataclasses
import ipaddress
import struct
import sys
import zlib
from typing import Any

import lz4.frame
import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aiorocket._unique_id import create_unique_id
from aiorocket.errors import ConfigError, MessageDecodeError
from aiorocket.message import MessageExt
from aiorocket.protocol import message_codec
from aiorocket.protocol.message_codec import (
    MAGIC_V1,
    MAGIC_V2,
    MIN_RECORD_SIZE,
    CompressionType,
    decode_messages,
    decode_offset_message_id,
    decode_properties,
    decompress_body,
    encode_properties,
    offset_message_id,
    pack_host,
)
from aiorocket.protocol.store_record import encode_stored_message
from aiorocket.received import ConsumerMessage


def crc(data: bytes) -> int:
    return zlib.crc32(data) & 0x7FFFFFFF


def raw_record(
    *,
    topic: bytes = b"TopicTest",
    body: bytes = b"hello",
    props: bytes = b"TAGS\x01TagA\x02UNIQ_KEY\x01ABC\x02",
    magic: int = MAGIC_V1,
    sys_flag: int = 0,
    born: bytes = bytes([10, 0, 0, 1]),
    store: bytes = bytes([127, 0, 0, 1]),
    total: int | None = None,
    body_crc: int | None = None,
    body_len: int | None = None,
    topic_len: int | None = None,
    props_len: int | None = None,
    padding: bytes = b"",
) -> bytes:
    """A record built field by field, independently of encode_stored_message."""
    topic_len = len(topic) if topic_len is None else topic_len
    topic_field = (
        struct.pack(">B", topic_len) if magic == MAGIC_V1 else struct.pack(">H", topic_len)
    )
    rest = b"".join(
        [
            struct.pack(">i", crc(body) if body_crc is None else body_crc),
            struct.pack(">i", 3),  # queue id
            struct.pack(">i", 7),  # flag
            struct.pack(">q", 42),  # queue offset
            struct.pack(">q", 0x1234),  # commit-log offset
            struct.pack(">i", sys_flag),
            struct.pack(">q", 1_700_000_000_000),  # born timestamp
            born,
            struct.pack(">i", 1234),
            struct.pack(">q", 1_700_000_000_001),  # store timestamp
            store,
            struct.pack(">i", 10911),
            struct.pack(">i", 2),  # reconsume times
            struct.pack(">q", 99),  # prepared transaction offset
            struct.pack(">i", len(body) if body_len is None else body_len),
            body,
            topic_field,
            topic,
            struct.pack(">H", len(props) if props_len is None else props_len),
            props,
            padding,
        ]
    )
    size = 8 + len(rest) if total is None else total
    return struct.pack(">iI", size, magic) + rest


# --------------------------------------------------------------------------- golden record


def test_messageext_field_order_is_what_the_decoder_passes_positionally() -> None:
    assert [f.name for f in dataclasses.fields(MessageExt)] == [
        "topic", "body", "properties", "queue_id", "queue_offset", "commit_log_offset",
        "flag", "sys_flag", "born_timestamp", "born_host", "store_timestamp", "store_host",
        "reconsume_times", "prepared_transaction_offset", "body_crc", "store_size",
        "broker_name",
    ]  # fmt: skip


def test_hand_built_record_decodes_field_by_field() -> None:
    record = raw_record()
    assert len(record) == MIN_RECORD_SIZE + 5 + 9 + 23  # body, topic, properties
    [msg] = decode_messages(record, broker_name="broker-a", check_crc=True)
    assert msg.topic == "TopicTest"
    assert msg.body == b"hello"
    assert msg.properties == {"TAGS": "TagA", "UNIQ_KEY": "ABC"}
    assert (msg.queue_id, msg.flag, msg.queue_offset, msg.commit_log_offset) == (3, 7, 42, 0x1234)
    assert msg.sys_flag == 0
    assert msg.born_timestamp == 1_700_000_000_000
    assert msg.store_timestamp == 1_700_000_000_001
    assert msg.born_host == "10.0.0.1:1234"
    assert msg.store_host == "127.0.0.1:10911"
    assert (msg.reconsume_times, msg.prepared_transaction_offset) == (2, 99)
    assert msg.body_crc == crc(b"hello")
    assert msg.store_size == len(record)
    assert msg.broker_name == "broker-a"
    assert msg.offset_msg_id == "7F00000100002A9F0000000000001234"
    assert msg.msg_id == "ABC"
    assert msg.tags == "TagA"


def test_encoder_matches_the_hand_built_record() -> None:
    built = encode_stored_message(
        "TopicTest",
        b"hello",
        {"TAGS": "TagA", "UNIQ_KEY": "ABC"},
        queue_id=3,
        flag=7,
        queue_offset=42,
        commit_log_offset=0x1234,
        born_timestamp=1_700_000_000_000,
        born_host="10.0.0.1:1234",
        store_timestamp=1_700_000_000_001,
        store_host="127.0.0.1:10911",
        reconsume_times=2,
        prepared_transaction_offset=99,
    )
    assert built == raw_record()


@dataclasses.dataclass(slots=True, eq=False)
class _Subclass(MessageExt):
    extra: int = 5


def test_message_class_subclass() -> None:
    [msg] = decode_messages(raw_record(), message_class=_Subclass)
    assert isinstance(msg, _Subclass)
    assert (msg.topic, msg.broker_name, msg.extra) == ("TopicTest", "", 5)


def test_accepts_memoryview_and_bytearray() -> None:
    record = raw_record() * 2
    assert len(decode_messages(memoryview(record))) == 2
    assert len(decode_messages(bytearray(record))) == 2
    assert decode_messages(b"") == []


def test_ipv6_hosts_set_flags_and_render_bracketed() -> None:
    record = encode_stored_message(
        "T", b"x", born_host="[2001:db8::1]:5000", store_host="[::1]:10911"
    )
    [msg] = decode_messages(record)
    assert msg.sys_flag & 0x30 == 0x30
    assert msg.born_host == "[2001:db8::1]:5000"
    assert msg.store_host == "[::1]:10911"
    assert len(msg.offset_msg_id) == 56
    assert decode_offset_message_id(msg.offset_msg_id) == ("[::1]:10911", 0)
    [mixed] = decode_messages(encode_stored_message("T", b"x", born_host="[::1]:1"))
    assert mixed.sys_flag & 0x30 == 0x10
    assert mixed.store_host == "127.0.0.1:10911"


def test_magic_version_follows_topic_length() -> None:
    short = encode_stored_message("a" * 127, b"")
    long = encode_stored_message("a" * 128, b"")
    assert struct.unpack_from(">I", short, 4)[0] == MAGIC_V1
    assert struct.unpack_from(">I", long, 4)[0] == MAGIC_V2
    forced = encode_stored_message("short", b"", version=2)
    assert struct.unpack_from(">I", forced, 4)[0] == MAGIC_V2
    topics = [m.topic for m in decode_messages(short + long + forced)]
    assert topics == ["a" * 127, "a" * 128, "short"]
    with pytest.raises(ConfigError):
        encode_stored_message("a" * 128, b"", version=1)
    with pytest.raises(ConfigError):
        encode_stored_message("a", b"", version=3)


def test_encoder_rejects_values_the_format_cannot_carry() -> None:
    with pytest.raises(ConfigError):
        encode_stored_message("T", b"", store_host="broker.local:10911")
    with pytest.raises(ConfigError):
        encode_stored_message("T", b"", {"k": "v" * 40000})
    with pytest.raises(ConfigError):
        encode_stored_message("T", b"", {"k\x01": "v"})
    with pytest.raises(ConfigError):
        encode_stored_message("T", b"", queue_id=2**31)


# --------------------------------------------------------------------------- hypothesis round trip

_prop_text = st.text(
    alphabet=st.characters(codec="utf-8", exclude_characters="\x01\x02"), min_size=1, max_size=20
)
_int32 = st.integers(-(2**31), 2**31 - 1)
_int64 = st.integers(-(2**63), 2**63 - 1)


def _host(ip: ipaddress.IPv4Address | ipaddress.IPv6Address, port: int) -> str:
    return f"[{ip}]:{port}" if ip.version == 6 else f"{ip}:{port}"


_hosts = st.builds(_host, st.ip_addresses(), st.integers(0, 65535))


@st.composite
def stored_messages(draw: st.DrawFn) -> dict[str, Any]:
    return {
        "topic": draw(
            st.one_of(
                st.text(alphabet=st.characters(codec="utf-8"), max_size=40),
                st.text(alphabet=st.characters(codec="utf-8"), min_size=128, max_size=200),
            )
        ),
        "body": draw(st.binary(max_size=2048)),
        "properties": draw(st.dictionaries(_prop_text, _prop_text, max_size=6)),
        "queue_id": draw(_int32),
        "queue_offset": draw(_int64),
        "commit_log_offset": draw(_int64),
        "flag": draw(_int32),
        # any flag bits except COMPRESSED, the host-v6 bits and the compression type
        "sys_flag": draw(_int32) & ~0x731,
        "born_timestamp": draw(_int64),
        "born_host": draw(_hosts),
        "store_timestamp": draw(_int64),
        "store_host": draw(_hosts),
        "reconsume_times": draw(_int32),
        "prepared_transaction_offset": draw(_int64),
        "compression": draw(st.sampled_from([None, *CompressionType])),
    }


def _same_host(a: str, b: str) -> bool:
    return pack_host(a) == pack_host(b)


def _check(msg: MessageExt, spec: dict[str, Any], record: bytes) -> None:
    assert msg.topic == spec["topic"]
    assert msg.body == spec["body"]
    assert msg.properties == spec["properties"]
    for name in (
        "queue_id", "queue_offset", "commit_log_offset", "flag", "born_timestamp",
        "store_timestamp", "reconsume_times", "prepared_transaction_offset",
    ):  # fmt: skip
        assert getattr(msg, name) == spec[name], name
    assert _same_host(msg.born_host, spec["born_host"])
    assert _same_host(msg.store_host, spec["store_host"])
    expected_flag = spec["sys_flag"]
    expected_flag |= 0x10 if msg.born_host.startswith("[") else 0
    expected_flag |= 0x20 if msg.store_host.startswith("[") else 0
    if spec["compression"] is not None:
        expected_flag |= spec["compression"] << 8  # the COMPRESSED bit is cleared
    assert msg.sys_flag == expected_flag
    assert msg.store_size == len(record)
    assert msg.broker_name == "b"


@given(st.lists(stored_messages(), min_size=1, max_size=4))
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_round_trip(specs: list[dict[str, Any]]) -> None:
    records = [encode_stored_message(**spec) for spec in specs]
    msgs = decode_messages(b"".join(records), broker_name="b", check_crc=True)
    assert len(msgs) == len(specs)
    for msg, spec, record in zip(msgs, specs, records, strict=True):
        _check(msg, spec, record)


# --------------------------------------------------------------------------- compression


@pytest.mark.parametrize("compression", list(CompressionType))
def test_compressed_body_is_decompressed_and_flag_cleared(compression: CompressionType) -> None:
    body = b"compressible " * 200
    record = encode_stored_message("T", body, sys_flag=0x2, compression=compression)
    stored_flag = struct.unpack_from(">i", record, 36)[0]
    assert stored_flag == 0x2 | 0x1 | compression << 8
    [msg] = decode_messages(record, check_crc=True)
    assert msg.body == body
    assert msg.sys_flag == 0x2 | compression << 8
    [raw] = decode_messages(record, decompress=False)
    assert msg.body_crc == raw.body_crc == crc(raw.body)  # CRC of the stored (compressed) body
    assert raw.sys_flag == stored_flag
    assert raw.body != body
    assert decompress_body(raw.body, raw.sys_flag) == body


def test_java_style_streams_decode() -> None:
    body = b"java " * 300
    # zstd-jni's ZstdOutputStream writes no content size; several frames may follow.
    zstd_frame = zstandard.ZstdCompressor(level=5, write_content_size=False).compress(body)
    lz4_frame = lz4.frame.compress(body, content_checksum=True)
    cases = [
        (0x1 | 2 << 8, zstd_frame + zstd_frame, body * 2),
        (0x1 | 1 << 8, lz4_frame + lz4_frame, body * 2),
        (0x1, zlib.compress(body), body),  # algorithm 0: pre-4.9.x brokers, means ZLIB
    ]
    for sys_flag, stored, expected in cases:
        record = encode_stored_message("T", stored, sys_flag=sys_flag)
        [msg] = decode_messages(record, check_crc=True)
        assert msg.body == expected


@pytest.mark.parametrize(
    ("algorithm", "stored"),
    [
        (3, b"not zlib at all"),
        (3, zlib.compress(b"x" * 100)[:-4]),
        (1, b"not an lz4 frame"),
        (1, lz4.frame.compress(b"x" * 100)[:-3]),
        (2, b"not a zstd frame"),
        (2, zstandard.ZstdCompressor(write_content_size=False).compress(b"x" * 100)[:-3]),
        (2, zstandard.ZstdCompressor().compress(b"x" * 100) + b"junk"),
        (4, zlib.compress(b"x")),  # no such algorithm
    ],
)
def test_corrupt_compressed_body(algorithm: int, stored: bytes) -> None:
    record = encode_stored_message("T", stored, sys_flag=0x1 | algorithm << 8)
    with pytest.raises(MessageDecodeError):
        decode_messages(record)
    assert decode_messages(record, decompress=False)[0].body == stored


def _record(
    offset: int, body: bytes, sys_flag: int = 0, props: dict[str, str] | None = None
) -> bytes:
    return encode_stored_message(
        "T", body, {"UNIQ_KEY": f"ID{offset}", **(props or {})},
        queue_offset=offset, commit_log_offset=1000 + offset, sys_flag=sys_flag,
    )  # fmt: skip


def test_undecodable_records_are_collected_and_the_others_decoded() -> None:
    body = b"".join([
        _record(0, b"good-0"),
        _record(1, b"not a zstd frame", sys_flag=0x1 | 2 << 8),
        _record(2, b"not an lz4 frame", sys_flag=0x1 | 1 << 8),
        _record(3, zlib.compress(b"x"), sys_flag=0x1 | 5 << 8),  # unknown algorithm
        _record(4, b"good-4"),
    ])  # fmt: skip
    bad_props = bytearray(_record(5, b"bad-props", props={"K": "v"}))
    bad_props[-3:-2] = b"\xff"  # invalid UTF-8 in the last property's value
    body += bytes(bad_props) + _record(6, b"good-6")
    bad: list[message_codec.UndecodableRecord] = []
    good = decode_messages(body, undecodable=bad)
    assert [(m.queue_offset, m.body) for m in good] == [
        (0, b"good-0"), (4, b"good-4"), (6, b"good-6"),
    ]  # fmt: skip
    assert [(r.queue_offset, r.commit_log_offset) for r in bad] == [
        (1, 1001), (2, 1002), (3, 1003), (5, 1005),
    ]  # fmt: skip
    assert [r.msg_id for r in bad[:3]] == ["ID1", "ID2", "ID3"]
    assert bad[3].msg_id in ("ID5", offset_message_id("127.0.0.1:10911", 1005))
    assert all(r.size is not None and "corrupt stored message" in r.error for r in bad)
    with pytest.raises(MessageDecodeError):
        decode_messages(body)  # without the list: the whole body fails, as before


def test_broken_framing_returns_the_records_before_it() -> None:
    bad: list[message_codec.UndecodableRecord] = []
    body = _record(0, b"good-0") + raw_record(magic=0x12345678) + _record(2, b"good-2")
    good = decode_messages(body, undecodable=bad)
    assert [m.queue_offset for m in good] == [0]
    [record] = bad
    assert record.queue_offset is None and record.size is None
    assert "magic" in record.error
    assert decode_messages(b"\x00" * 10, undecodable=bad) == []
    assert bad[-1].queue_offset is None


# --------------------------------------------------------------------------- broken input


def _two_message_buffers() -> list[tuple[bytes, int]]:
    first = encode_stored_message("TopicA", b"a" * 50, {"TAGS": "x", "KEYS": "k1 k2"})
    second = encode_stored_message(
        "B" * 130,
        b"b" * 300,
        {"UNIQ_KEY": create_unique_id()},
        born_host="[fe80::1]:1",
        store_host="[::1]:10911",
        compression=CompressionType.LZ4,
    )
    third = encode_stored_message("é", b"z" * 200, compression=CompressionType.ZSTD)
    fourth = encode_stored_message("T", b"", compression=CompressionType.ZLIB)
    return [(first + second, len(first)), (third + fourth, len(third))]


@pytest.mark.parametrize("case", range(2))
def test_every_truncation_raises_decode_error(case: int) -> None:
    buf, boundary = _two_message_buffers()[case]
    assert len(decode_messages(buf, check_crc=True)) == 2
    for cut in range(1, len(buf)):
        if cut == boundary:
            assert len(decode_messages(buf[:cut])) == 1
            continue
        with pytest.raises(MessageDecodeError):
            decode_messages(buf[:cut], check_crc=True)


@pytest.mark.parametrize("magic", [0, 0xCBD43194, MAGIC_V1 ^ 1, 0xDAA320A8])
def test_bad_magic(magic: int) -> None:
    with pytest.raises(MessageDecodeError, match="magic"):
        decode_messages(raw_record(magic=magic))


def test_totalsize_below_minimum() -> None:
    for total in (0, -5, MIN_RECORD_SIZE - 1):
        buf = raw_record(total=total)
        with pytest.raises(MessageDecodeError, match="TOTALSIZE"):
            decode_messages(buf)


def test_totalsize_beyond_buffer() -> None:
    record = raw_record()
    with pytest.raises(MessageDecodeError, match="TOTALSIZE"):
        decode_messages(raw_record(total=len(record) + 1))
    with pytest.raises(MessageDecodeError, match="TOTALSIZE"):
        decode_messages(raw_record(total=2**31 - 1) + record)


def test_totalsize_smaller_than_fields() -> None:
    record = raw_record()
    # The record claims to end 4 bytes early; the rest would look like the next record.
    with pytest.raises(MessageDecodeError):
        decode_messages(raw_record(total=len(record) - 4))
    # >= the IPv4 minimum, but IPv6 hosts need 24 more fixed bytes.
    v6 = raw_record(sys_flag=0x30, born=bytes(16), store=bytes(16), body=b"", topic=b"", props=b"")
    assert len(decode_messages(v6)) == 1
    with pytest.raises(MessageDecodeError, match="fixed fields"):
        decode_messages(raw_record(sys_flag=0x30, born=bytes(16), store=bytes(16), total=100))


def test_totalsize_larger_than_fields() -> None:
    record = raw_record()
    padded = raw_record(total=len(record) + 4, padding=b"\0\0\0\0")
    with pytest.raises(MessageDecodeError, match="larger"):
        decode_messages(padded)


def test_body_length_beyond_record() -> None:
    with pytest.raises(MessageDecodeError, match="body length"):
        decode_messages(raw_record(body_len=10_000))
    with pytest.raises(MessageDecodeError, match="body length"):
        decode_messages(raw_record(body_len=-1))
    # Within the record, but leaving no room for the topic and properties lengths.
    record = raw_record()
    with pytest.raises(MessageDecodeError):
        decode_messages(raw_record(body_len=len(record)) + record)


def test_topic_length_beyond_record() -> None:
    with pytest.raises(MessageDecodeError, match="topic length"):
        decode_messages(raw_record(topic_len=200))
    with pytest.raises(MessageDecodeError, match="topic length"):
        decode_messages(raw_record(magic=MAGIC_V2, topic_len=60_000))


def test_properties_length_beyond_record() -> None:
    with pytest.raises(MessageDecodeError, match="properties length"):
        decode_messages(raw_record(props_len=500))
    # Overlong properties reaching into a following, otherwise valid, record.
    with pytest.raises(MessageDecodeError):
        decode_messages(raw_record(props_len=40) + raw_record())


def test_crc_mismatch_only_with_check_crc() -> None:
    record = raw_record(body_crc=crc(b"hello") ^ 1)
    assert decode_messages(record)[0].body == b"hello"
    with pytest.raises(MessageDecodeError, match="CRC"):
        decode_messages(record, check_crc=True)


def test_invalid_utf8_in_topic() -> None:
    with pytest.raises(MessageDecodeError, match="UTF-8"):
        decode_messages(raw_record(topic=b"bad\xff\xfe"))


def test_invalid_utf8_in_properties() -> None:
    with pytest.raises(MessageDecodeError, match="UTF-8"):
        decode_messages(raw_record(props=b"TAGS\x01\xc3\x28\x02"))


def test_corrupt_second_record_fails_the_whole_body() -> None:
    with pytest.raises(MessageDecodeError, match="at byte"):
        decode_messages(raw_record() + raw_record(magic=0))


@given(st.binary(max_size=600))
@settings(max_examples=500, deadline=None)
def test_arbitrary_bytes_only_raise_decode_error(data: bytes) -> None:
    for candidate in (data, struct.pack(">iI", len(data) + 8, MAGIC_V1) + data):
        try:
            result = decode_messages(candidate, check_crc=True)
        except MessageDecodeError:
            continue
        assert isinstance(result, list)


@given(st.data())
@settings(max_examples=500, deadline=None)
def test_mutated_records_only_raise_decode_error(data: st.DataObject) -> None:
    buf, _ = data.draw(st.sampled_from(_two_message_buffers()))
    mutable = bytearray(buf)
    for _ in range(data.draw(st.integers(1, 4))):
        mutable[data.draw(st.integers(0, len(buf) - 1))] = data.draw(st.integers(0, 255))
    try:
        result = decode_messages(bytes(mutable), check_crc=data.draw(st.booleans()))
    except MessageDecodeError:
        return
    assert isinstance(result, list)


# --------------------------------------------------------------------------- properties


@given(st.dictionaries(_prop_text, _prop_text, max_size=10))
def test_properties_round_trip(props: dict[str, str]) -> None:
    text = encode_properties(props)
    assert decode_properties(text) == props
    assert decode_properties(text.encode()) == props


def test_properties_wire_form_matches_java() -> None:
    assert encode_properties({}) == ""
    assert encode_properties({"TAGS": "a", "KEYS": "k1 k2"}) == "TAGS\x01a\x02KEYS\x01k1 k2\x02"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("A\x011\x02B\x012", {"A": "1", "B": "2"}),  # no trailing separator
        ("A\x011\x02\x02\x02B\x012\x02", {"A": "1", "B": "2"}),  # empty items
        ("A\x02B\x012\x02", {"B": "2"}),  # item without a name/value separator
        ("\x011\x02A\x01\x02B\x012\x02", {"B": "2"}),  # empty name, empty value
        ("K\x01a\x01b\x02", {"K": "a\x01b"}),  # only the first \x01 separates
        ("K\x011\x02K\x012\x02", {"K": "2"}),  # the later duplicate wins
        ("ключ\x01值\x02", {"ключ": "值"}),
        ("", {}),
    ],
)
def test_decode_properties_is_java_compatible(text: str, expected: dict[str, str]) -> None:
    assert decode_properties(text) == expected


@pytest.mark.parametrize(
    "props",
    [{"a\x01": "v"}, {"a\x02": "v"}, {"a": "v\x01"}, {"a": "\x02v"}, {"ok": "1", "b": "\x01\x02"}],
)
def test_encode_properties_rejects_separators(props: dict[str, str]) -> None:
    with pytest.raises(ConfigError):
        encode_properties(props)
    with pytest.raises(ValueError, match="separator"):
        encode_properties(props)


def test_record_properties_are_parsed_like_java() -> None:
    record = raw_record(props=b"A\x01\x02\x01x\x02B\x012\x02C\x02D\x01a\x01b")
    assert decode_messages(record)[0].properties == {"B": "2", "D": "a\x01b"}


def test_decode_properties_rejects_invalid_utf8_bytes() -> None:
    with pytest.raises(MessageDecodeError):
        decode_properties(b"A\x01\xff\x02")


# --------------------------------------------------------------------------- offset message ids


def test_offset_message_id_layout() -> None:
    assert offset_message_id("127.0.0.1:10911", 0x1234) == "7F00000100002A9F0000000000001234"
    assert offset_message_id("10.0.0.7:10911", -1) == "0A00000700002A9FFFFFFFFFFFFFFFFF"
    v6 = offset_message_id("[::1]:10911", 5)
    assert v6 == "0" * 30 + "01" + "00002A9F" + "0000000000000005"
    assert decode_offset_message_id("7f00000100002a9f0000000000001234") == (
        "127.0.0.1:10911",
        0x1234,
    )


@given(st.ip_addresses(), st.integers(0, 65535), _int64)
def test_offset_message_id_round_trip(
    ip: ipaddress.IPv4Address | ipaddress.IPv6Address, port: int, offset: int
) -> None:
    msg_id = offset_message_id(_host(ip, port), offset)
    assert len(msg_id) == (32 if ip.version == 4 else 56)
    assert msg_id == msg_id.upper()
    host, decoded_offset = decode_offset_message_id(msg_id)
    assert decoded_offset == offset
    assert _same_host(host, _host(ip, port))


@pytest.mark.parametrize("host", ["", "1.2.3.4", "1.2.3.4:x", "1.2.3.4:70000", "name:80", "[::1]"])
def test_offset_message_id_rejects_non_numeric_hosts(host: str) -> None:
    with pytest.raises(ValueError):
        offset_message_id(host, 0)


@pytest.mark.parametrize(
    "msg_id", ["", "7F000001", "Z" * 32, "7F00000100002A9F000000000000123 ", "7F" * 20]
)
def test_decode_offset_message_id_rejects_garbage(msg_id: str) -> None:
    with pytest.raises(ValueError):
        decode_offset_message_id(msg_id)


def test_message_ext_ids() -> None:
    [with_uniq] = decode_messages(raw_record())
    [without] = decode_messages(raw_record(props=b""))
    assert with_uniq.msg_id == "ABC"
    assert without.msg_id == without.offset_msg_id == "7F00000100002A9F0000000000001234"


def test_topics_of_consecutive_records_are_each_their_own() -> None:
    """The decoder reuses the previous record's topic when the bytes are the same
    (ceiling.py): a change of topic, of its length or back again is still seen, and an
    invalid one after a valid one of the same length still fails."""
    topics = [b"aa", b"ab", b"aa", b"aaa", b"aa", b"", b"aa"]
    msgs = decode_messages(b"".join(raw_record(topic=t) for t in topics))
    assert [m.topic for m in msgs] == [t.decode() for t in topics]
    with pytest.raises(MessageDecodeError, match="UTF-8"):
        decode_messages(raw_record(topic=b"a\xff") + raw_record(topic=b"a\xff"))
    with pytest.raises(MessageDecodeError, match="UTF-8"):
        decode_messages(raw_record(topic=b"ab") + raw_record(topic=b"a\xff"))
    # The usual path reads each record's topic with the last topic's length: a shorter
    # topic in the last record (that read would pass the end), a longer one, one whose
    # length byte alone differs, and the same bytes at another length.
    for topics in ([b"a" * 60, b""], [b"", b"b" * 60], [b"ab", b"abc"], [b"abc", b"ab"]):
        for props in (b"", b"TAGS\x01x\x02"):
            data = b"".join(raw_record(topic=t, props=props) for t in topics)
            assert [m.topic for m in decode_messages(data)] == [t.decode() for t in topics]
            assert _fields(_decoded(data)) == _fields(_checked(data))


# ------------------------------------------------- the usual records' path (ceiling.py)


def _checked(data: bytes) -> list[MessageExt] | str:
    """The records of ``data`` decoded by the field-by-field checked path alone (the
    reference for the usual records' path), or its error."""
    out: list[MessageExt] = []
    try:
        message_codec._decode_checked(out, data, 0, "b", False, True, MessageExt)
    except MessageDecodeError as exc:
        return str(exc)
    return out


def _decoded(data: bytes) -> list[MessageExt] | str:
    try:
        return decode_messages(data, broker_name="b")
    except MessageDecodeError as exc:
        return str(exc)


def _fields(result: list[MessageExt] | str) -> object:
    if isinstance(result, str):
        return result
    return [
        [getattr(m, f.name) for f in dataclasses.fields(m) if f.name != "properties"]
        + [dict(m.properties)]
        for m in result
    ]


def _mixed_records() -> bytes:
    """Usual records (V1, IPv4, uncompressed, ASCII properties) around each kind the
    usual path leaves to the checked one, with hosts and topics that change."""
    return b"".join(
        [
            encode_stored_message("T", b"a" * 10, {"TAGS": "x"}, born_host="10.0.0.1:1"),
            encode_stored_message("T", b"", {}, born_host="10.0.0.1:1", queue_offset=1),
            encode_stored_message("U", b"b", {"K": "v"}, born_host="10.0.0.2:65535"),
            encode_stored_message("B" * 130, b"c", {}),  # V2 magic
            encode_stored_message("U", b"d", {}, store_host="[::1]:10911"),  # IPv6
            encode_stored_message("U", b"e" * 300, {}, compression=CompressionType.ZLIB),
            encode_stored_message("U", b"f", {"K": "é"}),  # non-ASCII properties
            encode_stored_message("é", b"g", {"TAGS": "y"}, store_host="1.2.3.4:0"),
            encode_stored_message("é", b"h", {"TAGS": "y"}, store_host="1.2.3.4:0"),
        ]
    )


def test_usual_and_checked_paths_decode_alike() -> None:
    data = _mixed_records()
    usual = decode_messages(data, broker_name="b")
    assert len(usual) == 9
    assert _fields(usual) == _fields(_checked(data))
    assert [m.born_host for m in usual[:3]] == ["10.0.0.1:1", "10.0.0.1:1", "10.0.0.2:65535"]
    assert usual[7].store_host == usual[8].store_host == "1.2.3.4:0"
    assert message_codec._decode_usual([], data, 0, len(data), "b", MessageExt) > 0  # it took some


def _usual_records() -> bytes:
    """Usual records only, their topics' lengths changing (the usual path reads a
    topic with the last one's length first) and their hosts too."""
    topics = ["T", "T", "TT", "", "TU", "é", "TT", "T" * 40, "U"]
    return b"".join(
        encode_stored_message(t, bytes([i]) * i, {"K": str(i)} if i % 2 else {},
                              born_host=f"10.0.0.{i % 3}:1", queue_offset=i)
        for i, t in enumerate(topics)
    )  # fmt: skip


def test_usual_records_are_all_taken_by_the_usual_path() -> None:
    data = _usual_records()
    assert message_codec._decode_usual([], data, 0, len(data), "b", MessageExt) == len(data)
    assert _fields(_decoded(data)) == _fields(_checked(data))


@given(st.data(), st.sampled_from([_mixed_records(), _usual_records()]))
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_mutated_records_decode_as_the_checked_path_says(
    data: st.DataObject, records: bytes
) -> None:
    """The usual path never accepts what the checked path rejects, and fails with the
    same error: a mutated or cut body decodes to the same messages or the same error."""
    mutable = bytearray(records)
    for _ in range(data.draw(st.integers(1, 3))):
        mutable[data.draw(st.integers(0, len(mutable) - 1))] = data.draw(st.integers(0, 255))
    candidate = bytes(mutable[: data.draw(st.integers(1, len(mutable)))])
    assert _fields(_decoded(candidate)) == _fields(_checked(candidate))


def _all_fields(m: MessageExt) -> list[object]:
    """Every dataclass field (private ones too): an unset slot raises here."""
    return [getattr(m, f.name) for f in dataclasses.fields(m) if f.name != "properties"] + [
        dict(m.properties)
    ]


def test_consumer_messages_built_in_place_equal_init_built_ones() -> None:
    """_decode_usual builds a ConsumerMessage field by field (ceiling.py): every field,
    private ones included, as its dataclass __init__ sets it, then stamped; records
    the checked path decodes are stamped too; a subclass still gets its __init__."""
    data = _mixed_records()
    queue, settler = object(), object()
    stamp: Any = (queue, 7, settler)
    got = decode_messages(data, broker_name="b", message_class=ConsumerMessage, stamp=stamp)
    want = []
    for m in decode_messages(data, broker_name="b"):
        fields = _all_fields(m)[:-1]
        cm = ConsumerMessage(*fields[:2], m.properties, *fields[2:])
        cm._pq, cm._generation, cm._settler = stamp
        want.append(cm)
    assert [type(m) for m in got] == [ConsumerMessage] * len(want)
    assert [_all_fields(m) for m in got] == [_all_fields(m) for m in want]
    assert {m._generation for m in got} == {7}  # usual and checked records alike
    [plain] = decode_messages(raw_record(), message_class=ConsumerMessage)
    assert _all_fields(plain)[16:-1] == [None, 0, None, False, False, False, None, None, None]

    @dataclasses.dataclass(slots=True, eq=False)
    class Mine(ConsumerMessage):
        extra: int = 5

    [mine] = decode_messages(raw_record(), message_class=Mine, stamp=stamp)
    assert type(mine) is Mine and mine.extra == 5 and mine._generation == 7


@pytest.mark.parametrize(
    "msg_id",
    [
        offset_message_id("127.0.0.1:10911", 0),
        offset_message_id("10.1.2.3:1", 2**63 - 1),
        offset_message_id("[::1]:10911", 123456789),
        offset_message_id("192.168.0.1:10911", 5000),
    ],
)
def test_commit_log_offset_of_is_the_decoded_offset(msg_id: str) -> None:
    from aiorocket._message_id import commit_log_offset_of

    assert commit_log_offset_of(msg_id) == decode_offset_message_id(msg_id)[1]


@pytest.mark.parametrize(
    "bad", ["", "ab", "Z" * 32, "é" * 32, "0" * 31, "0" * 33, "0" * 55, " " * 32]
)
def test_commit_log_offset_of_refuses_what_the_decoder_refuses(bad: str) -> None:
    from aiorocket._message_id import commit_log_offset_of

    with pytest.raises(ValueError) as decoded:
        decode_offset_message_id(bad)
    with pytest.raises(ValueError) as fast:
        commit_log_offset_of(bad)
    assert str(fast.value) == str(decoded.value)


def test_pop_messages_built_in_place_equal_init_built_ones() -> None:
    """Pop over remoting's PopMessage is built field by field too (benchmarks/README.md,
    "Round 9"): every field, its own private ones included, as its dataclass __init__
    sets it, with the ten rarely read fields and the properties read on first access."""
    from aiorocket.received import PopMessage

    data = _mixed_records()
    got = decode_messages(data, broker_name="b", message_class=PopMessage)
    want = []
    for m in decode_messages(data, broker_name="b"):
        fields = _all_fields(m)[:-1]
        want.append(PopMessage(*fields[:2], m.properties, *fields[2:]))
    assert [type(m) for m in got] == [PopMessage] * len(want)
    assert any(hasattr(m, "_head") for m in got)  # the usual path took some
    assert [_all_fields(m) for m in got] == [_all_fields(m) for m in want]
    [plain] = decode_messages(raw_record(), message_class=PopMessage)
    assert hasattr(plain, "_head") and hasattr(plain, "_raw_properties")
    assert (plain.receipt_handle, plain.delivery_attempt, plain.message_id) == ("", 1, plain.msg_id)


@dataclasses.dataclass(slots=True, eq=False)
class _Sub(ConsumerMessage):
    """A subclass of ConsumerMessage: built by its ``__init__`` on the usual path."""

    extra: int = 5


@given(
    st.lists(
        st.tuples(
            st.integers(-(2**31), 2**31 - 1),
            st.sampled_from(["T", "TU", "", "é"]),
            st.binary(max_size=20),
        ),
        min_size=1,
        max_size=5,
    ),
    st.sampled_from(["MessageExt", "ConsumerMessage", "PopMessage", "subclass"]),
)
@settings(max_examples=150, deadline=None)
def test_usual_records_keep_every_sys_flag_bit_as_the_checked_path(
    records: list[tuple[int, str, bytes]], kind: str
) -> None:
    """The usual path tells a usual record by SYSFLAG's low byte alone and takes the
    three fields a message keeps eagerly straight into it (benchmarks/README.md, "Round
    13"): any flag without the IPv6 and compressed bits (0x31) is a usual record, taken
    whole by the usual path, and every class built there has every field, the whole
    flag included, as the checked path decodes it; deferred fields read first too."""
    from aiorocket.received import PopMessage

    cls: type[MessageExt] = {
        "MessageExt": MessageExt, "ConsumerMessage": ConsumerMessage,
        "PopMessage": PopMessage, "subclass": _Sub,
    }[kind]  # fmt: skip
    data = b"".join(
        encode_stored_message(
            topic, body, {"TAGS": "t"}, sys_flag=flag & ~0x31, queue_id=i, queue_offset=2**40 + i,
            reconsume_times=i * 3, born_host=f"10.0.0.{i}:1",
        )
        for i, (flag, topic, body) in enumerate(records)
    )  # fmt: skip
    assert message_codec._decode_usual([], data, 0, len(data), "b", cls) == len(data)
    stamp: Any = (object(), 3, object())
    got = decode_messages(data, broker_name="b", message_class=cls, stamp=stamp)
    want = _checked(data)
    names = [f.name for f in dataclasses.fields(MessageExt) if f.name != "properties"]
    assert [[getattr(m, n) for n in names] for m in got] == [
        [getattr(m, n) for n in names] for m in want
    ]
    assert [dict(m.properties) for m in got] == [dict(m.properties) for m in want]
    assert all(type(m) is cls for m in got)
    if issubclass(cls, ConsumerMessage):
        assert all((m._pq, m._generation, m._settler) == stamp for m in got)  # type: ignore[attr-defined]


# ------------------------------------ records read where they were received (Round 12)


def _in_place(
    chunk: bytes, start: int, end: int, cls: type[MessageExt], undecodable: bool
) -> object:
    bad: list[message_codec.UndecodableRecord] | None = [] if undecodable else None
    try:
        got = decode_messages(
            chunk, broker_name="b", message_class=cls, undecodable=bad, start=start, end=end
        )
    except MessageDecodeError as exc:
        return str(exc), exc.position
    return [_all_fields(m) for m in got], bad


@given(
    st.data(),
    st.sampled_from([_mixed_records(), _usual_records()]),
    st.sampled_from([MessageExt, ConsumerMessage]),
    st.booleans(),
)
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_records_read_in_place_decode_as_their_copy(
    data: st.DataObject, records: bytes, cls: type[MessageExt], undecodable: bool
) -> None:
    """A pull body read where it was received (``start``/``end`` in the bytes of a read,
    frames before and after it) decodes to the same messages, or the same error at the
    same position, or the same undecodable records, as a copy of the body alone: a
    record cut or mutated never takes bytes from past ``end``. Fails on the code before
    Round 12 (``decode_messages`` took no bounds)."""
    from aiorocket.received import PopMessage

    if data.draw(st.booleans()):
        cls = PopMessage
    mutable = bytearray(records)
    for _ in range(data.draw(st.integers(0, 3))):
        mutable[data.draw(st.integers(0, len(mutable) - 1))] = data.draw(st.integers(0, 255))
    body = bytes(mutable[: data.draw(st.integers(1, len(mutable)))])
    before = data.draw(st.binary(max_size=40))
    # after the body: random bytes, or the records whose end was cut off (their rest
    # would complete a cut record if it were read past its end)
    after = data.draw(st.binary(max_size=60) | st.just(records[len(body) :]))
    chunk = before + body + after
    start, end = len(before), len(before) + len(body)
    assert _in_place(chunk, start, end, cls, undecodable) == _in_place(
        body, 0, len(body), cls, undecodable
    )


def test_messages_read_in_place_keep_nothing_of_the_received_bytes() -> None:
    """Each message read where it was received holds copies of its own fields (bytes
    slices), not the read they came in: a message kept does not keep the whole answer
    (nor the answers around it) alive. Fails on the code before Round 12."""
    from aiorocket.received import PopMessage

    records = _usual_records() + _mixed_records()  # usual ones, then the checked path
    chunk = b"x" * 100 + records + b"y" * 100
    baseline = sys.getrefcount(chunk)
    for cls in (MessageExt, ConsumerMessage, PopMessage):
        kept = decode_messages(chunk, message_class=cls, start=100, end=100 + len(records))
        assert len(kept) == 18
        assert sys.getrefcount(chunk) == baseline
        assert all(type(m.body) is bytes for m in kept)
        assert _fields(kept) == _fields(decode_messages(records, message_class=cls))


# ------------------------ records laid out alike read by one unpack each (Round 14)

#: what the records are drawn from: few lengths, so that layouts repeat
_LAYOUT_PARTS = st.tuples(
    st.sampled_from([b"bcdef", b"bcdefg", b""]),  # the body
    st.sampled_from(["T", "U", "é"]),  # the topic (U: T's length, another; é: 2 bytes)
    st.sampled_from([{"K": "v"}, {"K": "vv"}]),  # the properties
)
#: runs of records alike: a layout and how many records in a row have it
_RUNS = st.lists(st.tuples(_LAYOUT_PARTS, st.integers(1, 3)), min_size=1, max_size=6)


def _alike_records(parts: list[tuple[bytes, str, dict[str, str]]]) -> bytes:
    return b"".join(
        encode_stored_message(topic, body, props, queue_id=i % 3, queue_offset=2**33 + i,
                              reconsume_times=i, born_host=f"10.0.0.{i % 2}:1")
        for i, (body, topic, props) in enumerate(parts)
    )  # fmt: skip


def _reference(data: bytes, cls: type[MessageExt]) -> object:
    """What the checked path alone makes of ``data``: each message's fields as
    MessageExt has them, or the error."""
    got = _checked(data)
    if isinstance(got, str):
        return got
    return _stored_fields(got)


def _stored_fields(messages: list[MessageExt]) -> list[list[object]]:
    names = [f.name for f in dataclasses.fields(MessageExt) if f.name != "properties"]
    return [[getattr(m, n) for n in names] + [dict(m.properties)] for m in messages]


@given(
    st.data(),
    _RUNS,
    st.sampled_from(["MessageExt", "ConsumerMessage", "PopMessage", "subclass"]),
)
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_runs_of_records_laid_out_alike_decode_as_the_checked_path(
    data: st.DataObject, runs: list[tuple[tuple[bytes, str, dict[str, str]], int]], kind: str
) -> None:
    """An answer whose first two records are laid out alike (the body's length, the
    topic) is read by one unpack a record while its records keep that layout, their body
    and tail included (benchmarks/README.md, "Round 14"), the rest as before. Any run of
    layouts, the topic, the body's length or the properties' changing anywhere in it,
    mutated or cut, read in place with other bytes or the rest of the records after it,
    or as a copy, decodes to the same messages (every field) or the same error as the
    checked path: a record of another layout is never read as the first two's. An
    equivalence guard: it passes on the code before Round 14, and fails when a record
    of another topic of the same length is read as the layout's."""
    from aiorocket.received import PopMessage

    cls: type[MessageExt] = {
        "MessageExt": MessageExt, "ConsumerMessage": ConsumerMessage,
        "PopMessage": PopMessage, "subclass": _Sub,
    }[kind]  # fmt: skip
    records = _alike_records([part for part, n in runs for _ in range(n)])
    mutable = bytearray(records)
    for _ in range(data.draw(st.integers(0, 2))):
        mutable[data.draw(st.integers(0, len(mutable) - 1))] = data.draw(st.integers(0, 255))
    cut = data.draw(st.none() | st.integers(1, len(mutable)))  # None: whole
    body = bytes(mutable[:cut])
    after = data.draw(st.binary(max_size=60) | st.just(records[len(body) :]))
    chunk = b"\0" * 7 + body + after
    want = _reference(body, cls)
    for read, start, end in ((body, 0, len(body)), (chunk, 7, 7 + len(body))):
        summary: list[int] = []
        try:
            messages = decode_messages(
                read, broker_name="b", message_class=cls, start=start, end=end,
                summary=summary,
            )  # fmt: skip
            got: object = _stored_fields(messages)
        except MessageDecodeError as exc:
            got = str(exc)
        assert got == want
        # the summary, when there is one, is every message's body length ("Round 16")
        assert summary == [] or (
            len(summary) == 1 and cls in (ConsumerMessage, PopMessage) and messages
            and all(len(m.body) == summary[0] for m in messages)
        )  # fmt: skip


def test_a_run_of_alike_records_then_others_decodes_every_field() -> None:
    """The layout's edges, each after a run of three alike records: a topic of the same
    length, a longer body, a shorter one (the last record, at the very end of the
    bytes: the layout would read past them), other properties; the stamp and every
    private default of a ConsumerMessage and a PopMessage as their ``__init__`` sets
    them. Fails when a record of another topic of the same length is read as the
    layout's."""
    from aiorocket.received import PopMessage

    run = [(b"bcdef", "T", {"K": "v"})] * 3
    for other in [(b"bcdef", "U", {"K": "v"}), (b"bcdefg", "T", {"K": "v"}),
                  (b"bcde", "T", {"K": "v"}), (b"bcdef", "T", {"K": "vv"})]:  # fmt: skip
        data = _alike_records([*run, other, *run, other])
        want = _reference(data, MessageExt)
        assert isinstance(want, list) and len(want) == 8
        for cls in (MessageExt, ConsumerMessage, PopMessage, _Sub):
            assert message_codec._decode_usual([], data, 0, len(data), "b", cls) == len(data)
            stamp: Any = (object(), 3, object())
            got = decode_messages(data, broker_name="b", message_class=cls, stamp=stamp)
            assert _stored_fields(got) == want
            if cls is not MessageExt:
                built = [
                    cls(m.topic, m.body, dict(m.properties), m.queue_id, m.queue_offset, 0)
                    for m in got
                ]
                for m, b in zip(got, built, strict=True):
                    # the stamp, then every field of the class's own: defaults alike
                    b._pq, b._generation, b._settler = stamp  # type: ignore[attr-defined]
                    assert [getattr(m, f.name) for f in dataclasses.fields(b)
                            if f.name not in _STORED] == [
                        getattr(b, f.name) for f in dataclasses.fields(b)
                        if f.name not in _STORED]  # fmt: skip


#: the fields a stored record sets (the others are the class's own and defaults)
_STORED = frozenset(f.name for f in dataclasses.fields(MessageExt))


def test_an_answer_read_laid_out_alike_is_summarized_by_its_one_body_length() -> None:
    """The decoder's summary of an answer (benchmarks/README.md, "Round 16"): the one
    body length of its messages when it read every record laid out alike, in place or
    a copy, for ConsumerMessage and PopMessage, also when undecodable records before
    them were set apart; nothing when a record of another layout, or one the checked
    path read, is among them, nor for the other classes. Fails on the code before it
    (no summary)."""
    from aiorocket.received import PopMessage

    alike = [(b"bcdef", "T", {"K": "v"})] * 3
    cases = [
        (alike, [5]),
        ([*alike, (b"bcdefg", "T", {"K": "v"})], []),  # a longer body ends the run
        ([(b"bcdefg", "T", {"K": "v"}), *alike], []),  # the first two differ
        ([*alike, (b"bcdef", "U", {"K": "v"})], []),  # another topic ends it
    ]
    for parts, want in cases:
        data = _alike_records(parts)
        for cls in (ConsumerMessage, PopMessage, MessageExt, _Sub):
            for read, start in ((data, 0), (b"\0" * 3 + data + b"\0" * 9, 3)):
                summary: list[int] = []
                got = decode_messages(read, message_class=cls, start=start,
                                      end=start + len(data), summary=summary)  # fmt: skip
                assert len(got) == len(parts)
                assert summary == (want if cls in (ConsumerMessage, PopMessage) else [])
    # an undecodable first record set apart: the rest, all alike, are summarized
    broken = _record(0, b"not a zstd frame", sys_flag=0x1 | 2 << 8) + _alike_records(alike)
    summary = []
    bad: list[message_codec.UndecodableRecord] = []
    got = decode_messages(broken, message_class=ConsumerMessage, undecodable=bad,
                          summary=summary)  # fmt: skip
    assert (len(got), len(bad), summary) == (3, 1, [5])
    # a compressed record (the checked path) after alike ones: no summary
    data = _alike_records(alike) + raw_record(body=zlib.compress(b"xy" * 50), sys_flag=1)
    summary = []
    got = decode_messages(data, message_class=ConsumerMessage, summary=summary)
    assert (len(got), summary) == (4, [])


# ---------- the properties and the head in the layout (benchmarks/README.md, Round 15)


def _patched(record: bytes, at: int, value: bytes) -> bytes:
    return record[:at] + value + record[at + len(value) :]


def test_the_layouts_edges_at_the_head_and_the_properties_decode_as_the_checked_path() -> None:
    """``_decode_alike`` reads a record's properties in its one unpack when they are as
    long as the first record's, and TOTALSIZE with the magic code as one number; a
    record of another TOTALSIZE stays in the run when it is a usual record whose
    properties are of another length. After three alike records, each of these decodes
    (every field) or fails as the checked path does, read as it is and in place with
    more records after it: properties of another length; the same with the V2 magic or
    a corrupt one; the layout's TOTALSIZE with a properties' length one off either way;
    a TOTALSIZE one more or one less than the fields. An equivalence guard: it fails
    when the magic code of a record of another TOTALSIZE goes unchecked, or a
    properties' length unlike the first record's goes unchecked at the layout's
    TOTALSIZE."""
    from aiorocket.received import PopMessage

    run = _alike_records([(b"bcdef", "T", {"K": "v"})] * 3)
    size = len(run) // 3
    longer = _alike_records([(b"bcdef", "T", {"K": "vvv"})])
    props_len_at = size - len(b"K\x01v\x02") - 2
    others = [
        longer,
        _patched(longer, 4, struct.pack(">I", MAGIC_V2)),
        _patched(longer, 4, b"\xde\xad\xbe\xef"),
        _patched(run[:size], props_len_at, struct.pack(">H", 3)),
        _patched(run[:size], props_len_at, struct.pack(">H", 5)),
        _patched(run[:size], 0, struct.pack(">i", size + 1)),
        _patched(run[:size], 0, struct.pack(">i", size - 1)),
        _patched(run[:size], 4, b"\xde\xad\xbe\xef"),
    ]
    for other in others:
        data = run + other + run
        want = _reference(data, MessageExt)
        for cls in (ConsumerMessage, PopMessage):
            in_place = (b"\0" * 5 + data + run, 5, 5 + len(data))
            for read, start, end in ((data, 0, len(data)), in_place):
                try:
                    got: object = _stored_fields(
                        decode_messages(read, broker_name="b", message_class=cls,
                                        start=start, end=end)
                    )  # fmt: skip
                except MessageDecodeError as exc:
                    got = str(exc)
                assert got == want, (other, cls)
    # the properties of another length are read in the run, as are the records after them
    data = run + longer + run
    alike: Any = ("b", None, 0, None, False, False)
    read = message_codec._decode_alike([], data, 0, len(data), ConsumerMessage, alike, False)
    assert read == len(data)


# ------------------ records of one layout read many at a time (benchmarks/README.md, Round 17)


def _one_layout(n: int, *, first_offset: int = 2**33) -> bytes:
    """``n`` records of one layout (the same TOTALSIZE and fields' lengths), whose
    queue ids, offsets, reconsume times, hosts and properties' values differ."""
    return b"".join(
        encode_stored_message("Tp", bytes([i % 256]) * 40, {"K": f"v{i % 10}"},
                              queue_id=i % 3, queue_offset=first_offset + i,
                              reconsume_times=i % 4, born_host=f"10.0.0.{i % 2}:1",
                              commit_log_offset=10**9 + 7 * i)
        for i in range(n)
    )  # fmt: skip


def _record_size() -> int:
    return len(_one_layout(1))


#: a record's fields that the bulk path checks in each record, as (where, bytes): in a
#: record of _one_layout (40-byte body, topic "Tp", properties "K\x01vN\x02")
_FIELD_PATCHES = [
    (0, struct.pack(">i", 150)),  # TOTALSIZE
    (4, struct.pack(">I", MAGIC_V2)),  # the magic code: V2
    (4, b"\xde\xad\xbe\xef"),  # ... corrupt
    (39, b"\x01"),  # SYSFLAG: compressed (the checked path's)
    (39, b"\x02"),  # SYSFLAG: multi tags (a usual record, another flag than the first's)
    (39, b"\x10"),  # SYSFLAG: an IPv6 born host
    (84, struct.pack(">I", 39)),  # BODYLEN one short
    (84, struct.pack(">I", 41)),  # ... one long
    (129, b"S"),  # the topic's second byte
    (128, b"\x03"),  # the topic's length byte
    (131, struct.pack(">H", 6)),  # the properties' length one long
    (134, b"\xc3"),  # a property's byte not ASCII
]


def _checked_or_error(data: bytes) -> object:
    got = _checked(data)
    return got if isinstance(got, str) else _stored_fields(got)


def _pulled_or_error(
    read: bytes, start: int, end: int, cls: type[MessageExt], offsets: list[Any]
) -> object:
    try:
        return _stored_fields(decode_messages(read, broker_name="b", message_class=cls,
                                              start=start, end=end, offsets=offsets))  # fmt: skip
    except MessageDecodeError as exc:
        return str(exc)


def test_an_answer_of_one_layout_is_read_many_records_at_a_time() -> None:
    """An answer whose records are all of one layout (benchmarks/ceiling.py's) is read
    by ``_decode_bulk``, many records an unpack (32 at a time, and 16 + 8 + 4 + 3 of 31
    records), each message equal to the checked path's (every field, and the stamp and
    defaults of ConsumerMessage and PopMessage as the record-at-a-time path sets them),
    and the answer's offsets are given with it (``decode_messages(offsets=)``). Fails on
    the code before Round 17 (no ``_decode_bulk``, no ``offsets``)."""
    from aiorocket.received import PopMessage

    size = _record_size()
    decode_messages(_one_layout(4), message_class=ConsumerMessage)  # the layout seen
    for n, taken in ((32, [32]), (31, [16, 8, 4]), (70, [64, 4]), (3, [])):
        data = _one_layout(n)
        want = _checked_or_error(data)
        for cls in (ConsumerMessage, PopMessage):
            calls: list[int] = []
            bulk = message_codec._decode_bulk

            def counted(*args: Any, _bulk: Any = bulk, _calls: list[int] = calls) -> int:
                got = _bulk(*args)
                _calls.append(got // size)
                return got

            message_codec._decode_bulk = counted  # type: ignore[assignment]
            try:
                read = b"\0" * 11 + data + b"\0" * 300
                offsets: list[Any] = []
                assert _pulled_or_error(read, 11, 11 + len(data), cls, offsets) == want
            finally:
                message_codec._decode_bulk = bulk  # type: ignore[assignment]
            assert calls == taken
            whole = sum(taken) == n and n > 0
            assert offsets == ([tuple(range(2**33, 2**33 + n))] if whole else [])
            # the defaults and the stamp as the record-at-a-time path sets them
            stamp: Any = (object(), 5, object())
            many = decode_messages(data, broker_name="b", message_class=cls, stamp=stamp)
            one: list[MessageExt] = []
            for i in range(n):  # each record alone: never a bulk read
                one += decode_messages(data[i * size : (i + 1) * size], broker_name="b",
                                       message_class=cls, stamp=stamp)  # fmt: skip
            assert [_all_fields(m) for m in many] == [_all_fields(m) for m in one]


def test_an_answer_of_a_layout_no_answer_had_before_is_read_a_record_at_a_time() -> None:
    """The first answer of a layout is read a record at a time, the next ones of that
    layout many records an unpack: an answer whose records are alike but unlike the
    last answer's compiles no bulk struct (about what its read would save). The same
    messages either way. Fails on the code without ``_BULK_LAYOUTS`` (every answer of
    4 records or more read in bulk)."""
    calls: list[int] = []
    bulk = message_codec._decode_bulk

    def counted(*args: Any) -> int:
        calls.append(args[3])
        return bulk(*args)

    # a body length no other test uses: a layout not seen yet
    data = b"".join(
        encode_stored_message("Tq", bytes([i]) * 333, {"K": "v"}, queue_offset=i)
        for i in range(8)
    )  # fmt: skip
    message_codec._BULK_LAYOUTS.clear()
    message_codec._decode_bulk = counted  # type: ignore[assignment]
    try:
        first = decode_messages(data, broker_name="b", message_class=ConsumerMessage)
        assert calls == []
        second = decode_messages(data, broker_name="b", message_class=ConsumerMessage)
        assert calls == [8]
    finally:
        message_codec._decode_bulk = bulk  # type: ignore[assignment]
    assert [_all_fields(m) for m in first] == [_all_fields(m) for m in second]
    assert _stored_fields(first) == _checked_or_error(data)


@pytest.mark.parametrize(("at", "value"), _FIELD_PATCHES)
def test_a_record_unlike_the_others_in_an_answer_of_one_layout_decodes_as_the_checked_path(
    at: int, value: bytes
) -> None:
    """One record of an answer of one layout (first, in the middle, last) with one
    field of another value: the bulk read takes none of its records, and the answer
    decodes (every field) or fails as the checked path says, as it is and in place
    with more records after it. An equivalence guard: it fails when any one of the
    bulk read's column checks (TOTALSIZE and magic, SYSFLAG, BODYLEN, the topic, the
    properties' length, ASCII properties) is left out."""
    from aiorocket.received import PopMessage

    n, size = 20, _record_size()
    data = _one_layout(n)
    for k in (0, 9, n - 1):
        record = bytearray(data[k * size : (k + 1) * size])
        record[at : at + len(value)] = value
        patched = data[: k * size] + bytes(record) + data[(k + 1) * size :]
        want = _checked_or_error(patched)
        for cls in (ConsumerMessage, PopMessage):
            # the bulk read that would take record k (20 records: 16, then 4) takes none
            first, m = (0, 16) if k < 16 else (16 * size, 4)
            assert message_codec._decode_bulk(
                [], patched, first, m, message_codec._layout(40, 3, 5), (size << 32) + MAGIC_V1,
                40, b"\x02Tp", 5, "Tp", cls, ("b", None, 0, None, False, False),
                cls is PopMessage, None,
            ) == 0  # fmt: skip
            in_place = (b"\0" * 3 + patched + data, 3, 3 + len(patched))
            for read, start, end in ((patched, 0, len(patched)), in_place):
                offsets: list[Any] = []
                assert _pulled_or_error(read, start, end, cls, offsets) == want, (at, k)
                if offsets:
                    assert isinstance(want, list)
                    assert list(offsets[0]) == [row[_QUEUE_OFFSET_AT] for row in want]


#: the place of queue_offset among ``_stored_fields``' columns
_QUEUE_OFFSET_AT = [f.name for f in dataclasses.fields(MessageExt) if f.name != "properties"].index(
    "queue_offset"
)


@given(st.data(), st.integers(4, 70), st.sampled_from(["ConsumerMessage", "PopMessage"]))
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_answers_of_one_layout_mutated_or_cut_decode_as_the_checked_path(
    data: st.DataObject, n: int, kind: str
) -> None:
    """An answer of ``n`` records of one layout, with up to three bytes changed
    anywhere and cut anywhere, read in place between other bytes or before the rest of
    its records, or as it is: the same messages (every field) or the same error as the
    checked path, and when the decoder gives the offsets, they are the messages'. An
    equivalence guard of the bulk read (it passes on the code before Round 17)."""
    from aiorocket.received import PopMessage

    cls: type[MessageExt] = ConsumerMessage if kind == "ConsumerMessage" else PopMessage
    records = _one_layout(n)
    mutable = bytearray(records)
    for _ in range(data.draw(st.integers(0, 3))):
        mutable[data.draw(st.integers(0, len(mutable) - 1))] = data.draw(st.integers(0, 255))
    cut = data.draw(st.none() | st.integers(1, len(mutable)))
    body = bytes(mutable[:cut])
    after = data.draw(st.binary(max_size=40) | st.just(records[len(body) :]))
    want = _checked_or_error(body)
    for read, start, end in ((body, 0, len(body)), (b"\0" * 7 + body + after, 7, 7 + len(body))):
        offsets: list[Any] = []
        got = _pulled_or_error(read, start, end, cls, offsets)
        assert got == want
        if offsets:
            assert isinstance(got, list)
            assert list(offsets[0]) == [row[_QUEUE_OFFSET_AT] for row in got]


@pytest.mark.parametrize("low", [0x01, 0x10, 0x20, 0x31, 0x02])
def test_an_answer_of_one_layout_whose_every_record_has_one_sys_flag_decodes_as_the_checked_path(
    low: int,
) -> None:
    """Every record of an answer of one layout with the same SYSFLAG low byte: a
    compressed body or an IPv6 host (each record then is the checked path's, which
    decodes or refuses it), or multi tags (a usual record: read many at a time). Fails
    when the bulk read does not check the first record's flag."""
    from aiorocket.received import PopMessage

    n, size = 8, _record_size()
    data = bytearray(_one_layout(n))
    for k in range(n):
        data[k * size + 39] = low
    patched = bytes(data)
    want = _checked_or_error(patched)
    for cls in (ConsumerMessage, PopMessage):
        taken = message_codec._decode_bulk(
            [], patched, 0, n, message_codec._layout(40, 3, 5), (size << 32) + MAGIC_V1, 40,
            b"\x02Tp", 5, "Tp", cls, ("b", None, 0, None, False, False), cls is PopMessage,
            None,
        )  # fmt: skip
        assert taken == (0 if low & 0x31 else n * size)
        for read, start, end in (
            (patched, 0, n * size),
            (b"\0" + patched + b"\0", 1, 1 + n * size),
        ):
            assert _pulled_or_error(read, start, end, cls, []) == want
