"""The fast ReceiveMessageResponse decoder decodes exactly what the betterproto path does."""

from __future__ import annotations

import dataclasses
import zlib
from datetime import datetime, timedelta, timezone

import pytest

pytest.importorskip("betterproto")

from hypothesis import given, settings
from hypothesis import strategies as st

from aiorocket.errors import MessageDecodeError
from aiorocket.grpc import _fast
from aiorocket.grpc import _pb as pb
from aiorocket.grpc._encode import _uvarint
from aiorocket.grpc._fast import FastPopReceiveResponse, FastReceiveResponse, decode_message
from aiorocket.grpc._push_message import pop_message
from aiorocket.grpc._received import ReceivedMessage, message_ext
from aiorocket.protocol.message_codec import CompressionType, compress_body
from aiorocket.received import PopMessage

EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
text = st.text(max_size=12)
int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)
stamps = st.builds(
    lambda s, us: EPOCH + timedelta(seconds=s, microseconds=us),
    st.integers(0, 2**34),
    st.integers(0, 999_999),
)


@st.composite
def messages(draw: st.DrawFn) -> pb.Message:
    body = draw(st.binary(max_size=64))
    encoding = draw(st.sampled_from([pb.Encoding.IDENTITY, pb.Encoding.GZIP, 0]))
    if encoding == pb.Encoding.GZIP:
        body = zlib.compress(body)
    sysp = pb.SystemProperties(
        tag=draw(st.none() | text),
        keys=draw(st.lists(text, max_size=3)),
        message_id=draw(text),
        body_digest=pb.Digest(type=pb.DigestType.CRC32, checksum=draw(text)),
        body_encoding=encoding,
        message_type=draw(st.sampled_from(list(pb.MessageType))),
        born_timestamp=draw(stamps),
        born_host=draw(text),
        store_timestamp=draw(st.none() | stamps),
        store_host=draw(text),
        delivery_timestamp=draw(st.none() | stamps),
        receipt_handle=draw(st.none() | text),
        queue_id=draw(int32),
        queue_offset=draw(st.none() | int64),
        invisible_duration=draw(st.none() | st.just(timedelta(seconds=30))),
        delivery_attempt=draw(st.none() | st.integers(0, 2**31 - 1)),
        message_group=draw(st.none() | text),
        lite_topic=draw(st.none() | text),
        trace_context=draw(st.none() | text),
    )
    return pb.Message(
        topic=pb.Resource(resource_namespace=draw(text), name=draw(text)),
        user_properties=draw(st.dictionaries(text, text, max_size=4)),
        system_properties=sysp,
        body=body,
    )


def fields(msg: ReceivedMessage) -> dict[str, object]:
    out = {f.name: getattr(msg, f.name) for f in dataclasses.fields(msg)}
    out.pop("_consumer")
    out["properties"] = dict(msg.properties)
    return out


@settings(max_examples=300, deadline=None)
@given(messages())
def test_fast_message_decode_equals_betterproto(msg: pb.Message) -> None:
    wire = bytes(pb.ReceiveMessageResponse(message=msg))
    reference = pb.ReceiveMessageResponse().parse(wire)
    kind, parsed = pb.oneof(reference, "content")
    assert kind == "message"
    fast = FastReceiveResponse.FromString(wire)
    assert fast.status is None and fast.message is not None
    assert fields(fast.message) == fields(message_ext(parsed, broker_name=""))


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(list(pb.Code)), text)
def test_fast_status_decode(code: pb.Code, message: str) -> None:
    wire = bytes(pb.ReceiveMessageResponse(status=pb.Status(code=code, message=message)))
    fast = FastReceiveResponse.FromString(wire)
    assert fast.message is None and fast.status is not None
    assert (fast.status.code, fast.status.message) == (code, message)


def test_a_repeated_status_is_decoded_once_and_the_cache_stays_bounded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every receive's stream starts with the same Status: decoded once (betterproto's
    parse was ~60 calls a receive), equal to betterproto's decode every time; past the
    bound, statuses are still decoded right, just not kept."""
    monkeypatch.setattr(_fast, "_STATUSES", _fast.ByEncoding(_fast._STATUSES._decode, limit=2))
    ok = pb.Status(code=pb.Code.OK, message="OK")
    wire = bytes(pb.ReceiveMessageResponse(status=ok))
    first, again = (FastReceiveResponse.FromString(wire).status for _ in range(2))
    assert first == ok and again is first
    others = [pb.Status(code=pb.Code.MESSAGE_NOT_FOUND, message=f"none {i}") for i in range(4)]
    for status in others * 2:
        got = FastReceiveResponse.FromString(bytes(pb.ReceiveMessageResponse(status=status)))
        assert got.status == status and got.message is None
    assert len(_fast._STATUSES) == 2


def test_unknown_fields_are_skipped() -> None:
    msg = pb.Message(topic=pb.Resource(name="t"), body=b"x",
                     system_properties=pb.SystemProperties(message_id="id"))  # fmt: skip
    inner = bytes(msg) + b"\xa8\x06\x05" + b"\xb2\x06\x02hi"  # fields 101 (varint), 102 (LEN)
    got = decode_message(inner)
    assert (got.topic, got.body, got.message_id) == ("t", b"x", "id")


def test_delivery_timestamp_response_carries_nothing() -> None:
    wire = bytes(pb.ReceiveMessageResponse(delivery_timestamp=EPOCH + timedelta(seconds=5)))
    fast = FastReceiveResponse.FromString(wire)
    assert fast.message is None and fast.status is None


@pytest.mark.parametrize("cut", [1, 5, 20])
def test_truncated_input_is_a_decode_error(cut: int) -> None:
    msg = pb.Message(topic=pb.Resource(name="topic"), body=b"body" * 10,
                     system_properties=pb.SystemProperties(message_id="id", tag="t"))  # fmt: skip
    wire = bytes(pb.ReceiveMessageResponse(message=msg))
    with pytest.raises(MessageDecodeError):
        FastReceiveResponse.FromString(wire[:-cut])


# The push consumer's messages decoded straight into PopMessage (issue 43, goal 5b,
# round 9): the same fields as the ReceivedMessage they were copied from before.
wide_stamps = st.builds(  # negative seconds too: their varint is 10 bytes
    lambda s, us: EPOCH + timedelta(seconds=s, microseconds=us),
    st.integers(-(2**34), 2**35),
    st.integers(0, 999_999),
)
codecs = st.sampled_from([None, *CompressionType])


@st.composite
def pop_wires(draw: st.DrawFn) -> tuple[bytes, pb.Message]:
    """A ReceiveMessageResponse's bytes (its body compressed by any codec the Proxy
    labels GZIP, unknown fields appended to the message and its system properties)."""
    msg = draw(messages())
    sp = msg.system_properties
    sp.born_timestamp = draw(wide_stamps)
    sp.store_timestamp = draw(st.none() | wide_stamps)
    codec = draw(codecs)
    if codec is not None:
        msg.body = compress_body(draw(st.binary(max_size=200)), codec)
        sp.body_encoding = pb.Encoding.GZIP
    unknown = draw(st.sampled_from([b"", b"\xa8\x06\x05", b"\xb2\x06\x02hi\xb8\x06\x80\x01"]))
    sysp = bytes(sp) + unknown  # field numbers 101-103: unknown to both decoders
    rest = bytes(pb.Message(topic=msg.topic, user_properties=msg.user_properties, body=msg.body))
    inner = rest + b"\x1a" + _uvarint(len(sysp)) + sysp + unknown
    return bytes(pb.ReceiveMessageResponse()) + b"\x12" + _uvarint(len(inner)) + inner, msg


def pop_fields(msg: PopMessage) -> dict[str, object]:
    out = {f.name: getattr(msg, f.name) for f in dataclasses.fields(msg)}
    out["properties"] = dict(msg.properties)
    return out


@settings(max_examples=200, deadline=None)
@given(pop_wires())
def test_pop_decode_equals_the_received_message_copied(wire_msg: tuple[bytes, pb.Message]) -> None:
    wire, _ = wire_msg
    reference = pb.ReceiveMessageResponse().parse(wire)
    kind, parsed = pb.oneof(reference, "content")
    assert kind == "message"
    fast = FastPopReceiveResponse.FromString(wire)
    assert fast.status is None and fast.error is None and type(fast.message) is PopMessage
    expected = pop_message(message_ext(parsed, broker_name=""))
    assert pop_fields(fast.message) == pop_fields(expected)
    # and the ReceivedMessage path still decodes the same message as betterproto does
    got = FastReceiveResponse.FromString(wire).message
    assert got is not None and fields(got) == fields(message_ext(parsed, broker_name=""))


@pytest.mark.parametrize("codec", list(CompressionType))
def test_an_undecodable_compressed_body_is_a_pop_message_to_settle(codec: CompressionType) -> None:
    """A body labelled compressed that its codec cannot read (here cut short): the
    PopMessage comes with the error, every field but the body readable (an LZ4 body
    once failed the whole receive)."""
    body = compress_body(b"x" * 4096 + bytes(range(256)), codec)[:-7]
    msg = pb.Message(
        topic=pb.Resource(name="t"), body=body,
        system_properties=pb.SystemProperties(
            message_id="id", receipt_handle="rh", delivery_attempt=3,
            body_encoding=pb.Encoding.GZIP,
        ),
    )  # fmt: skip
    fast = FastPopReceiveResponse.FromString(bytes(pb.ReceiveMessageResponse(message=msg)))
    assert isinstance(fast.error, _fast.UndecodableMessage)
    assert fast.message is not None and type(fast.message) is PopMessage
    assert (fast.message.message_id, fast.message.receipt_handle) == ("id", "rh")
    assert (fast.message.delivery_attempt, fast.message.body) == (3, body)
