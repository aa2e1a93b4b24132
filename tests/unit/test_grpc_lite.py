"""Lite messages over gRPC: how a lite message is typed and read back (the Proxy's part is
tests/integration/test_lite.py and test_lite_grpc.py)."""

from __future__ import annotations

import pytest

pytest.importorskip("betterproto")

from aiorocket.errors import ConfigError
from aiorocket.grpc import _pb as pb
from aiorocket.grpc._convert import prepare, to_pb_message
from aiorocket.grpc._fast import FastReceiveResponse
from aiorocket.message import Message


def test_a_lite_message_is_typed_lite_and_read_back_with_its_lite_topic() -> None:
    out = prepare(Message("chat", b"hi", lite_topic="room-42"), max_body_size=1024)
    assert out.message_type == pb.MessageType.LITE and out.lite_topic == "room-42"
    wire = bytes(pb.ReceiveMessageResponse(message=to_pb_message(out)))
    got = FastReceiveResponse.FromString(wire).message
    assert got is not None and got.lite_topic == "room-42"
    plain = prepare(Message("chat", b"hi"), max_body_size=1024)
    assert plain.message_type == pb.MessageType.NORMAL and plain.lite_topic is None


@pytest.mark.parametrize(
    ("message", "kwargs"),
    [
        (Message("chat", b"x", lite_topic="a", priority=1), {}),
        (Message("chat", b"x", lite_topic="a", deliver_time_ms=1), {}),
        (Message("chat", b"x", lite_topic="a"), {"message_group": "g"}),
        (Message("chat", b"x", lite_topic="a"), {"transactional": True}),
        (Message("chat", b"x", lite_topic=""), {}),
    ],
)
def test_a_lite_message_is_of_no_other_type(message: Message, kwargs: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        prepare(message, max_body_size=1024, **kwargs)  # type: ignore[arg-type]


def test_receives_spread_over_the_brokers_with_fewest_under_way() -> None:
    """A receive goes to the assigned broker with the fewest receives under way (two
    receives parked on one broker would leave the other's messages until their long poll
    ends), the round-robin's turn first among equals."""
    from aiorocket.grpc._simple import SimpleConsumer

    consumer = SimpleConsumer("g", "127.0.0.1:1", {"t": "*"})
    queues = [pb.MessageQueue(broker=pb.Broker(name=name)) for name in ("a", "b")]
    assert [consumer._pick("t", queues, turn).broker.name for turn in (0, 1)] == ["a", "b"]
    consumer._receiving[("t", "a")] = 1
    assert [consumer._pick("t", queues, turn).broker.name for turn in (0, 1)] == ["b", "b"]
    consumer._receiving[("t", "b")] = 1
    assert [consumer._pick("t", queues, turn).broker.name for turn in (0, 1)] == ["a", "b"]
