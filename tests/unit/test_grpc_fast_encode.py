"""The hand-written send/ack encoders and answer decoders agree with betterproto."""

from __future__ import annotations

import pytest

pytest.importorskip("betterproto")

from hypothesis import given, settings
from hypothesis import strategies as st

from aiorocket.errors import MessageDecodeError
from aiorocket.grpc import _pb as pb
from aiorocket.grpc._convert import Outgoing, to_pb_message
from aiorocket.grpc._encode import (
    FastAckResponse,
    FastSendResponse,
    ack_request,
    encode_message,
    send_request,
)
from aiorocket.namespace import wrap

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
        priority=draw(st.none() | st.integers(0, 2**31 - 1)),
        recovery_s=draw(st.none() | st.integers(0, 2**40)),
        lite_topic=draw(st.none() | text),
    )


@settings(max_examples=300, deadline=None)
@given(st.lists(outgoing(), min_size=1, max_size=3))
def test_send_request_equals_betterproto(outs: list[Outgoing]) -> None:
    fast = send_request(encode_message(o) for o in outs).SerializeToString()
    typed = pb.SendMessageRequest(messages=[to_pb_message(o) for o in outs])
    assert pb.SendMessageRequest().parse(fast).to_dict() == typed.to_dict()


@settings(max_examples=200, deadline=None)
@given(text, text, text, st.lists(st.tuples(text, text, st.none() | text), max_size=4))
def test_ack_request_equals_betterproto(
    ns: str, group: str, topic: str, entries: list[tuple[str, str, str | None]]
) -> None:
    fast = ack_request(ns, group, topic, entries).SerializeToString()
    typed = pb.AckMessageRequest(
        # the names in the namespace: the Apache Proxy uses the name as given
        group=pb.Resource(resource_namespace=ns, name=wrap(ns, group)),
        topic=pb.Resource(resource_namespace=ns, name=wrap(ns, topic)),
        entries=[
            pb.AckMessageEntry(message_id=m, receipt_handle=h, lite_topic=lt)
            for m, h, lt in entries
        ],
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


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(codes, text, text), min_size=1), st.data())
def test_a_cut_ack_answer_is_a_decode_error(
    entries: list[tuple[pb.Code, str, str]], data: st.DataObject
) -> None:
    wire = bytes(
        pb.AckMessageResponse(
            status=pb.Status(code=pb.Code.OK),
            entries=[
                pb.AckMessageResultEntry(message_id=m, receipt_handle=h, status=pb.Status(code=c))
                for c, m, h in entries
            ],
        )
    )
    cut = data.draw(st.integers(1, len(wire) - 1))
    try:
        fast = FastAckResponse.FromString(wire[:cut])
    except MessageDecodeError:
        return
    # A cut on a field boundary is a shorter, valid answer: never more entries.
    assert len(fast.entries) <= len(entries)


@settings(max_examples=50, deadline=None)
@given(
    topic=st.from_regex(r"[a-z]{1,8}", fullmatch=True),
    expression=st.sampled_from(["*", "a", "a || b"]),
    batch=st.integers(1, 32),
    invisible=st.integers(10, 300),
    queue_id=st.integers(0, 15),
)
def test_a_receive_request_encoded_once_decodes_as_betterproto_would_build_it(
    topic: str, expression: str, batch: int, invisible: int, queue_id: int
) -> None:
    """SimpleConsumer encodes a ReceiveMessageRequest once per queue and settings and
    appends each call's attempt id: the bytes parse as the whole request would."""
    from datetime import timedelta

    from aiorocket.grpc import SimpleConsumer

    consumer = SimpleConsumer("g", "127.0.0.1:1", {topic: expression}, await_duration=7)
    mq = pb.MessageQueue(topic=pb.Resource(name=topic), id=queue_id,
                         broker=pb.Broker(name="broker-a"))  # fmt: skip
    encoded = [
        consumer._receive_request(topic, mq, batch, float(invisible), attempt)
        for attempt in ("a-1", "a-2")
    ]
    parsed = [pb.ReceiveMessageRequest().parse(req.SerializeToString()) for req in encoded]
    for req in parsed:
        assert (req.group.name, req.message_queue.topic.name, req.message_queue.id) == (
            "g", topic, queue_id,
        )  # fmt: skip
        assert (req.filter_expression.type, req.filter_expression.expression) == (
            pb.FilterType.TAG, expression,
        )  # fmt: skip
        assert req.batch_size == batch and not req.auto_renew
        assert req.invisible_duration == timedelta(seconds=invisible)
        assert req.long_polling_timeout == timedelta(seconds=7)
    assert [req.attempt_id for req in parsed] == ["a-1", "a-2"]
    expected = pb.ReceiveMessageRequest(
        group=pb.Resource(name="g"), message_queue=mq,
        filter_expression=pb.FilterExpression(type=pb.FilterType.TAG, expression=expression),
        batch_size=batch, invisible_duration=timedelta(seconds=invisible), auto_renew=False,
        long_polling_timeout=timedelta(seconds=7), attempt_id=parsed[0].attempt_id,
    )  # fmt: skip
    assert parsed[0] == expected


def test_a_changed_subscription_changes_the_encoded_receive_request() -> None:
    """The encoded request is cached per queue and settings, the filter included:
    subscribe() with a new expression must not keep receiving with the old one."""
    from aiorocket.grpc import SimpleConsumer

    consumer = SimpleConsumer("g", "127.0.0.1:1", {"t": "a"})
    mq = pb.MessageQueue(topic=pb.Resource(name="t"), id=0, broker=pb.Broker(name="b"))

    def expression() -> str:
        data = consumer._receive_request("t", mq, 16, 30.0, "a").SerializeToString()
        return pb.ReceiveMessageRequest().parse(data).filter_expression.expression

    assert expression() == "a"
    consumer._subs["t"] = "b"  # what subscribe() does, before telling the Proxy
    assert expression() == "b"


handles = st.text(max_size=12) | st.text(min_size=120, max_size=300)
names = st.text(min_size=1, max_size=12)


@settings(max_examples=60, deadline=None)
@given(names, names, st.lists(st.tuples(handles, handles, st.none() | handles), max_size=70))
def test_ack_request_is_betterprotos_bytes(
    group: str, topic: str, entries: list[tuple[str, str, str | None]]
) -> None:
    """Byte for byte (no namespace: betterproto writes its resource's fields apart), with
    lengths of one and two bytes (a Proxy's receipt handle is ~150 characters) and batches
    as the ack batcher's (up to 64 entries): issue 43, round 9."""
    fast = ack_request("", group, topic, entries).SerializeToString()
    typed = pb.AckMessageRequest(
        group=pb.Resource(name=group),
        topic=pb.Resource(name=topic),
        entries=[
            pb.AckMessageEntry(message_id=m, receipt_handle=h, lite_topic=lt)
            for m, h, lt in entries
        ],
    )
    assert fast == bytes(typed)
