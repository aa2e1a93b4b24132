"""Decoders of network input raise only aiorocket's typed errors: a short fuzz campaign
(the long one: scripts/fuzz_decoders.py) and the crashes fuzzing found."""

from __future__ import annotations

import struct

import pytest

from aiorocket.errors import ProtocolError
from aiorocket.protocol import fastjson
from aiorocket.protocol.frame import FrameDecoder
from aiorocket.protocol.route import TopicRoute
from aiorocket.testing.fuzz import TARGETS, fuzz


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_short_fuzz_campaign_raises_only_typed_errors(target: str) -> None:
    report = fuzz(1500, seed=20, targets=[target])
    assert not report.crashes, [c.error for c in report.crashes]
    assert report.typed_errors[target] > 0  # the inputs do reach the error paths


# Crashes found by scripts/fuzz_decoders.py (each failed before its fix).


def test_fastjson_object_key_with_keys_of_mixed_types_is_a_protocol_error() -> None:
    # Object keys are frozen by sorting their items: 1 and "a" do not compare.
    with pytest.raises(ProtocolError):
        fastjson.loads(b'{{"a":1,1:"b"}:5}')


@pytest.mark.parametrize("body", [b"[" * 5000, b'{"a":' * 3000], ids=["array", "object"])
def test_json_nested_deeper_than_the_stack_is_a_protocol_error(body: bytes) -> None:
    with pytest.raises(ProtocolError):
        TopicRoute.from_json("t", body)
    with pytest.raises(ProtocolError):
        fastjson.loads(body)
    with pytest.raises(ProtocolError):
        FrameDecoder().feed(struct.pack(">II", 4 + len(body), len(body)) + body)


@pytest.mark.parametrize(
    "body",
    [
        # found by the 1,000,000-input run (seed 23): brokerDatas an object, not a list
        b'{"queueDatas":[],"brokerDatas":{"queueDatas":[],"brokerDatas":[]}}',
        b'{"queueDatas":["broker-a"],"brokerDatas":[]}',
        b'{"queueDatas":[],"brokerDatas":[{"brokerName":"b","brokerAddrs":["x"]}]}',
    ],
    ids=["brokerDatas-object", "queueDatas-of-strings", "brokerAddrs-list"],
)
def test_route_lists_of_the_wrong_shape_are_a_protocol_error(body: bytes) -> None:
    with pytest.raises(ProtocolError, match="malformed"):
        TopicRoute.from_json("t", body)
