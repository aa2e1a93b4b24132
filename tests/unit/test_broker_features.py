"""The broker releases behind aiorocket.protocol.features: version codes, the feature a
request or a message's properties needs, and the one typed error for an older broker."""

from __future__ import annotations

import pytest

from aiorocket.client.broker import response_error
from aiorocket.errors import BrokerResponseError, UnsupportedBrokerFeatureError
from aiorocket.message import Message
from aiorocket.protocol import features
from aiorocket.protocol.command import RemotingCommand
from aiorocket.protocol.message_codec import encode_properties


@pytest.mark.parametrize(
    ("version", "code"),
    # MQVersion.Version ordinals, read from rocketmq-common 5.5.0
    [("4.9.7", 407), ("5.0.0", 413), ("5.3.2", 477), ("5.3.3", 479), ("5.4.0", 493),
     ("5.5.0", 513)],
)
def test_version_codes_and_names(version: str, code: int) -> None:
    assert features.version_code(version) == code
    assert features.version_name(code) == version
    assert features.is_4x(code) == version.startswith("4.")


def test_the_feature_of_a_message_is_read_from_its_properties() -> None:
    def of(msg: Message) -> features.BrokerFeature | None:
        return features.feature_of_properties(encode_properties(msg.wire_properties()))

    assert of(Message("t", b"", tags="a", delay_level=3, properties={"x": "TIMER_"})) is None
    assert of(Message("t", b"", deliver_time_ms=1)) is features.TIMER
    assert of(Message("t", b"", priority=1)) is features.PRIORITY
    assert of(Message("t", b"", lite_topic="l")) is features.LITE
    # A user property merely named like one is no feature.
    assert of(Message("t", b"", properties={"my_SYS_MSG_PRIORITY_": "1"})) is None


def test_a_feature_request_refused_by_an_older_broker_is_one_typed_error() -> None:
    resp = RemotingCommand(code=3, remark="request type 200050 not supported", version=407)
    err = response_error(resp, 200050, "127.0.0.1:10911")
    assert isinstance(err, UnsupportedBrokerFeatureError) and not err.retriable
    assert str(err) == (
        "POP consumption: needs RocketMQ 5.0.0 or later; the broker at 127.0.0.1:10911 "
        "runs 4.9.7"
    )
    # The same code from a broker new enough, or for another request, is the broker's own.
    assert isinstance(response_error(RemotingCommand(code=3, version=513), 200050),
                      BrokerResponseError)  # fmt: skip
    assert type(response_error(RemotingCommand(code=3, version=407), 10)) is BrokerResponseError


def test_a_4x_plain_acl_refusal_is_access_denied_not_a_retriable_system_error() -> None:
    from aiorocket.errors import AccessDeniedError, error_for_response

    remark = (
        "org.apache.rocketmq.acl.common.AclException: Check signature failed for "
        "accessKey=user4997, org.apache.rocketmq.acl.plain.PlainPermissionManager"
    )
    err = error_for_response(1, remark, 310)
    assert isinstance(err, AccessDeniedError) and not err.retriable
    assert error_for_response(1, "store error", 310).retriable  # a SYSTEM_ERROR still is
