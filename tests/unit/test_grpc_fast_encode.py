"""The hand-written send/ack encoders and answer decoders agree with betterproto."""

from __future__ import annotations

import pytest

pytest.importorskip("betterproto")

from hypothesis import given, settings
from hypothesis import strategies as st

from aiorocket.grpc import _pb as pb
from aiorocket.grpc._convert import Outgoing, to_pb_message
from aiorocket.grpc._encode import (
    FastAckResponse,
    FastSendResponse,
    ack_request,
    encode_message,
    send_request,
)

text = st.text(max_size=12)
codes = st.sampled_from(list(pb.Code))


@st.composite
def outgoing(draw: st.DrawFn) -> Outgoing:
    return Outgoing(
        topic=draw(text),
        namespace=draw(text),
        user_properties=draw(st.dictionaries(text, text, max_size=4)),
        tag=draw(st.none() | text),
        keys=draw(st.lists(text, max_size=3)),
        message_id=draw(text),
        message_type=draw(st.sampled_from([int(t) for t in pb.MessageType])),
        born_ms=draw(st.integers(0, 2**44)),
        born_host=draw(text),
        message_group=draw(st.none() | text),
        delivery_ms=draw(st.none() | st.integers(0, 2**44)),
        body=draw(st.binary(max_size=64)),
    )


@settings(max_examples=300, deadline=None)
@given(st.lists(outgoing(), min_size=1, max_size=3))
def test_send_request_equals_betterproto(outs: list[Outgoing]) -> None:
    fast = send_request(encode_message(o) for o in outs).SerializeToString()
    typed = pb.SendMessageRequest(messages=[to_pb_message(o) for o in outs])
    assert pb.SendMessageRequest().parse(fast).to_dict() == typed.to_dict()


@settings(max_examples=200, deadline=None)
@given(text, text, text, st.lists(st.tuples(text, text), max_size=4))
def test_ack_request_equals_betterproto(
    ns: str, group: str, topic: str, entries: list[tuple[str, str]]
) -> None:
    fast = ack_request(ns, group, topic, entries).SerializeToString()
    typed = pb.AckMessageRequest(
        group=pb.Resource(resource_namespace=ns, name=group),
        topic=pb.Resource(resource_namespace=ns, name=topic),
        entries=[pb.AckMessageEntry(message_id=m, receipt_handle=h) for m, h in entries],
    )
    assert pb.AckMessageRequest().parse(fast).to_dict() == typed.to_dict()


@settings(max_examples=200, deadline=None)
@given(codes, text, st.lists(st.tuples(codes, text, text, st.integers(-(2**63), 2**63 - 1))))
def test_send_response_decode(
    code: pb.Code, message: str, entries: list[tuple[pb.Code, str, str, int]]
) -> None:
    typed = pb.SendMessageResponse(
        status=pb.Status(code=code, message=message),
        entries=[
            pb.SendResultEntry(status=pb.Status(code=c), message_id=m, transaction_id=t, offset=o)
            for c, m, t, o in entries
        ],
    )
    fast = FastSendResponse.FromString(bytes(typed))
    assert fast.status is not None
    assert (fast.status.code, fast.status.message) == (code, message)
    got = [(e.status.code, e.message_id, e.transaction_id, e.offset) for e in fast.entries]
    assert got == entries


@settings(max_examples=200, deadline=None)
@given(codes, st.lists(st.tuples(codes, text, text)))
def test_ack_response_decode(code: pb.Code, entries: list[tuple[pb.Code, str, str]]) -> None:
    typed = pb.AckMessageResponse(
        status=pb.Status(code=code),
        entries=[
            pb.AckMessageResultEntry(message_id=m, receipt_handle=h, status=pb.Status(code=c))
            for c, m, h in entries
        ],
    )
    fast = FastAckResponse.FromString(bytes(typed))
    assert fast.status is not None and fast.status.code == code
    assert [(e.status.code, e.message_id, e.receipt_handle) for e in fast.entries] == entries
