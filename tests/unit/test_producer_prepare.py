"""Message preparation: properties, ids, compression, size limits, batch bodies."""

from __future__ import annotations

import os
import zlib

import pytest

from aiorocket.errors import ConfigError, MessageTooLargeError
from aiorocket.message import Message
from aiorocket.producer.batch import decode_records, encode_record, prepare_batch
from aiorocket.producer.config import ProducerConfig
from aiorocket.producer.prepare import (
    SYSFLAG_COMPRESSED,
    encoded_props,
    prepare_message,
    properties_with_id,
    wire_properties,
)
from aiorocket.protocol.message_codec import CompressionType, decode_properties, decompress_body


def test_properties_carry_tags_keys_user_props_schedule_and_a_fresh_id() -> None:
    msg = Message(
        "orders", b"body", tags="paid", keys=["k1", "k2"], properties={"region": "eu"},
        delay_level=3, flag=7,
    )  # fmt: skip
    out = prepare_message(msg, ProducerConfig())
    props = decode_properties(out.properties)
    assert props == {
        "region": "eu", "TAGS": "paid", "KEYS": "k1 k2", "DELAY": "3", "UNIQ_KEY": out.msg_id,
    }  # fmt: skip
    assert len(out.msg_id) == 32
    assert (out.topic, out.body, out.sys_flag, out.flag) == ("orders", b"body", 0, 7)
    assert prepare_message(msg, ProducerConfig()).msg_id != out.msg_id
    assert msg.properties == {"region": "eu"}  # the caller's message is not modified


def test_the_auto_batchers_properties_are_the_plain_sends() -> None:
    # Issue 43, goal 3: the auto-batcher appends a generated id to the encoded rest
    # instead of encoding a dict with it: the same properties, the same checks.
    for msg in (
        Message("t", b"b"),
        Message("t", b"b", tags="a", keys=["k"], properties={"x": "1"}),
        Message("t", b"b", properties={"UNIQ_KEY": ""}),  # empty: replaced
    ):
        text, data, msg_id = properties_with_id(msg)
        assert data == text.encode() and len(msg_id) == 32
        props, _ = wire_properties(msg)
        assert decode_properties(text) == {**props, "UNIQ_KEY": msg_id}
    own = Message("t", b"b", properties={"UNIQ_KEY": "MINE", "y": "2"})
    assert properties_with_id(own) == (*encoded_props(wire_properties(own)[0]), "MINE")
    with pytest.raises(ConfigError):
        properties_with_id(Message("t", b"b", properties={"x": "a\x02b"}))
    with pytest.raises(MessageTooLargeError):
        properties_with_id(Message("t", b"b", properties={"x": "v" * 40_000}))


def test_timer_message_and_caller_chosen_id() -> None:
    msg = Message("t", b"x", deliver_time_ms=1_900_000_000_000, properties={"UNIQ_KEY": "MYID"})
    props = decode_properties(prepare_message(msg, ProducerConfig()).properties)
    assert props["TIMER_DELIVER_MS"] == "1900000000000"
    assert props["UNIQ_KEY"] == "MYID"


@pytest.mark.parametrize("compression", list(CompressionType))
def test_bodies_from_the_threshold_up_are_compressed(compression: CompressionType) -> None:
    cfg = ProducerConfig(compression=compression)
    body = b"rocketmq " * 1000
    out = prepare_message(Message("t", body), cfg)
    assert out.sys_flag == SYSFLAG_COMPRESSED | (compression << 8)
    assert len(out.body) < len(body)
    assert decompress_body(out.body, out.sys_flag) == body
    at_threshold = b"a" * cfg.compress_over
    assert prepare_message(Message("t", at_threshold), cfg).sys_flag & SYSFLAG_COMPRESSED
    below = b"a" * (cfg.compress_over - 1)
    small = prepare_message(Message("t", below), cfg)
    assert (small.body, small.sys_flag) == (below, 0)


def test_zlib_matches_java_deflater_stream() -> None:
    out = prepare_message(Message("t", b"z" * 5000), ProducerConfig())
    assert out.sys_flag == 0x301
    assert zlib.decompress(out.body) == b"z" * 5000


def test_incompressible_body_is_sent_as_is() -> None:
    body = os.urandom(10_000)
    out = prepare_message(Message("t", body), ProducerConfig())
    assert (out.body, out.sys_flag) == (body, 0)


def test_oversized_body_is_rejected_with_a_clear_error() -> None:
    cfg = ProducerConfig()
    assert cfg.max_message_size == 4 * 1024 * 1024
    prepare_message(Message("t", b"x" * cfg.max_message_size), cfg)  # exactly the limit: ok
    with pytest.raises(MessageTooLargeError, match="4194305 bytes exceeds the maximum"):
        prepare_message(Message("t", b"x" * (cfg.max_message_size + 1)), cfg)
    with pytest.raises(MessageTooLargeError):
        prepare_message(Message("t", b"123456"), ProducerConfig(max_message_size=5))


def test_invalid_messages() -> None:
    cfg = ProducerConfig()
    with pytest.raises(ConfigError, match="empty"):
        prepare_message(Message("t", b""), cfg)
    for topic in ("", "has space", "x" * 128, "semi;colon"):
        with pytest.raises(ConfigError):
            prepare_message(Message(topic, b"x"), cfg)
    with pytest.raises(ConfigError, match="either"):
        prepare_message(Message("t", b"x", delay_level=1, deliver_time_ms=1), cfg)
    with pytest.raises(ConfigError):
        prepare_message(Message("t", b"x", delay_level=-1), cfg)
    with pytest.raises(ConfigError, match="separator"):
        prepare_message(Message("t", b"x", properties={"a": "b\x01c"}), cfg)
    with pytest.raises(MessageTooLargeError, match="properties"):
        prepare_message(Message("t", b"x", properties={"big": "v" * 40000}), cfg)


def test_config_validation() -> None:
    for bad in (
        {"retries": -1}, {"max_in_flight": 0}, {"send_timeout": 0}, {"compress_over": 0},
        {"compression": 9}, {"compression_level": 10}, {"shutdown_timeout": -1},
    ):  # fmt: skip
        with pytest.raises(ConfigError):
            ProducerConfig(**bad).validate()  # type: ignore[arg-type]
    ProducerConfig(compression=CompressionType.ZSTD, compression_level=19).validate()


def test_batch_body_is_java_encode_messages() -> None:
    record = encode_record(b"hi", "A\x01B\x02", flag=3)
    # TOTALSIZE 5*4 + 2 (body) + 2 + 4 (properties) = 28; MAGIC 0, CRC 0, FLAG 3, BODYLEN 2
    assert record == (
        b"\x00\x00\x00\x1c" b"\x00\x00\x00\x00" b"\x00\x00\x00\x00" b"\x00\x00\x00\x03"
        b"\x00\x00\x00\x02hi" b"\x00\x04A\x01B\x02"
    )  # fmt: skip
    messages = [Message("t", f"m{i}".encode(), tags="x", flag=i) for i in range(3)]
    out, ids = prepare_batch(messages, ProducerConfig())
    assert out.topic == "t" and out.properties == "" and out.sys_flag == 0
    records = decode_records(out.body)
    assert [(f, b) for f, b, _ in records] == [(0, b"m0"), (1, b"m1"), (2, b"m2")]
    props = [decode_properties(p) for _, _, p in records]
    assert [p["UNIQ_KEY"] for p in props] == ids
    assert len(set(ids)) == 3
    assert all(p["TAGS"] == "x" for p in props)


def test_batch_is_not_compressed_and_is_size_checked_as_a_whole() -> None:
    big = [Message("t", b"a" * 10_000) for _ in range(3)]
    out, _ = prepare_batch(big, ProducerConfig())
    assert [b for _, b, _ in decode_records(out.body)] == [b"a" * 10_000] * 3
    with pytest.raises(MessageTooLargeError, match="split"):
        prepare_batch(big, ProducerConfig(max_message_size=25_000))


def test_invalid_batches() -> None:
    cfg = ProducerConfig()
    with pytest.raises(ConfigError):
        prepare_batch([], cfg)
    with pytest.raises(ConfigError, match="one topic"):
        prepare_batch([Message("a", b"1"), Message("b", b"2")], cfg)
    with pytest.raises(ConfigError, match="delayed"):
        prepare_batch([Message("a", b"1", delay_level=2)], cfg)
    with pytest.raises(ConfigError, match="delayed"):
        prepare_batch([Message("a", b"1", deliver_time_ms=5)], cfg)
    with pytest.raises(ConfigError, match="retry"):
        prepare_batch([Message("%RETRY%g", b"1")], cfg)
    with pytest.raises(ConfigError, match="empty"):
        prepare_batch([Message("a", b"1"), Message("a", b"")], cfg)


def test_a_batch_result_splits_into_ordinary_send_results() -> None:
    # Built by setting the slots (issue 43: the frozen dataclass's __init__ cost 4x as
    # much per message); they must be the same values, equal, hashable, frozen.
    from aiorocket.client.results import SendResult, SendStatus
    from aiorocket.message import MessageQueue
    from aiorocket.producer.batch import split_batch_result

    q = MessageQueue("t", "broker-a", 3)
    stored = SendResult(SendStatus.SEND_OK, "batch-id", q, 10, "O1,O2", "txn")
    split = split_batch_result(stored, ["A", "B"])
    assert split == [
        SendResult(SendStatus.SEND_OK, "A", q, 10, "O1", "txn"),
        SendResult(SendStatus.SEND_OK, "B", q, 11, "O2", "txn"),
    ]
    assert len({hash(r) for r in split}) == 2
    with pytest.raises(AttributeError):
        split[0].msg_id = "changed"  # type: ignore[misc]
    no_offsets = SendResult(SendStatus.FLUSH_DISK_TIMEOUT, "batch-id", q, -1)
    assert [
        (r.queue_offset, r.offset_msg_id, r.status)
        for r in split_batch_result(no_offsets, ["A", "B"])
    ] == [
        (-1, "", SendStatus.FLUSH_DISK_TIMEOUT),
        (-1, "", SendStatus.FLUSH_DISK_TIMEOUT),
    ]


def test_a_single_send_result_is_an_ordinary_frozen_send_result() -> None:
    # ``send_result`` (each single-message answer) fills its slots as an ``_Unfrozen``
    # and changes its class: the object must be one ``SendResult(...)`` would have made.
    import copy
    import dataclasses
    import pickle

    from aiorocket._send_result import send_result
    from aiorocket.client.results import SendResult, SendStatus
    from aiorocket.message import MessageQueue

    q = MessageQueue("t", "broker-a", 3)
    fields = (SendStatus.FLUSH_SLAVE_TIMEOUT, "A", q, 7, "O1", "txn", "handle")
    built, made = send_result(*fields), SendResult(*fields)
    assert type(built) is SendResult
    assert built == made and hash(built) == hash(made) and repr(built) == repr(made)
    assert tuple(getattr(built, f.name) for f in dataclasses.fields(built)) == fields
    assert pickle.loads(pickle.dumps(built)) == made
    assert copy.copy(built) == made
    assert dataclasses.replace(built, queue_offset=8) == SendResult(*fields[:3], 8, *fields[4:])
    with pytest.raises(dataclasses.FrozenInstanceError):
        built.msg_id = "changed"  # type: ignore[misc]
