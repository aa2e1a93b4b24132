"""Request-reply's pieces without a broker (issue 44): the reply message, the request
code a reply goes in, the push handler, and gRPC's refusal."""

from __future__ import annotations

import pytest
import structlog

from aiorocket.client.broker import _send_code
from aiorocket.errors import ConfigError, UnsupportedTransportError
from aiorocket.message import Message, MessageExt
from aiorocket.producer import Producer, create_reply
from aiorocket.producer.reply import Replies
from aiorocket.protocol.codes import RequestCode, ResponseCode
from aiorocket.protocol.command import RemotingCommand
from aiorocket.protocol.message_codec import encode_properties
from aiorocket.received import PopMessage

pytestmark = pytest.mark.anyio


def _received(**props: str) -> MessageExt:
    return MessageExt("t", b"q", props, queue_id=0, queue_offset=0, commit_log_offset=0)


def test_a_reply_carries_the_request_properties_to_the_cluster_reply_topic() -> None:
    request = _received(CLUSTER="C1", CORRELATION_ID="c", REPLY_TO_CLIENT="me", TTL="3000")
    reply = create_reply(request, b"r", properties={"x": "y"})
    assert reply.topic == "C1_REPLY_TOPIC"
    assert reply.properties == {
        "x": "y", "MSG_TYPE": "reply", "CORRELATION_ID": "c", "REPLY_TO_CLIENT": "me",
        "TTL": "3000",
    }  # fmt: skip


def test_only_a_request_can_be_replied_to() -> None:
    with pytest.raises(ConfigError, match=r"not a request .*CORRELATION_ID, REPLY_TO_CLIENT"):
        create_reply(_received(CLUSTER="C1"), b"r")


def test_a_request_received_over_grpc_says_the_proxy_cannot_reply() -> None:
    """The Proxy hands a gRPC consumer no CLUSTER, CORRELATION_ID or REPLY_TO_CLIENT:
    its messages are refused as a transport's limit, not as a message not a request."""
    msg = PopMessage("t", b"q", {"UNIQ_KEY": "u"}, queue_id=0, queue_offset=0, commit_log_offset=0)
    msg.message_id = "proxy-id"
    with pytest.raises(UnsupportedTransportError, match="received over gRPC"):
        create_reply(msg, b"r")


def test_a_reply_goes_as_send_reply_message() -> None:
    reply = encode_properties({"UNIQ_KEY": "u", "MSG_TYPE": "reply"})
    assert _send_code(reply, False) is RequestCode.SEND_REPLY_MESSAGE_V2
    assert _send_code(encode_properties({"MY_MSG_TYPE": "reply"}), False) is (
        RequestCode.SEND_MESSAGE_V2
    )
    assert _send_code(reply, True) is RequestCode.SEND_BATCH_MESSAGE


class _Conn:
    address = "127.0.0.1:10911"


def _push(correlation_id: str, body: bytes = b"r") -> RemotingCommand:
    props = encode_properties({"CORRELATION_ID": correlation_id, "MSG_TYPE": "reply"})
    ext = {"topic": "C_REPLY_TOPIC", "properties": props, "sysFlag": "0", "queueId": "1",
           "bornHost": "/127.0.0.1:1234", "storeTimestamp": "5"}  # fmt: skip
    cmd = RemotingCommand.request(RequestCode.PUSH_REPLY_MESSAGE_TO_CLIENT, ext, body)
    cmd.opaque = 7
    return cmd


async def test_a_pushed_reply_reaches_its_waiter_and_an_unknown_one_is_dropped() -> None:
    replies = Replies(structlog.get_logger())
    with replies.expect("a") as waiter:
        answer = await replies.on_push(_Conn(), _push("a"))  # type: ignore[arg-type]
        assert answer is not None and answer.code == ResponseCode.SUCCESS and answer.opaque == 7
        reply = await replies.wait(waiter, "a", 1)
        assert (reply.body, reply.queue_id, reply.born_host) == (b"r", 1, "127.0.0.1:1234")
    # after the block (the caller timed out or was cancelled) the reply is late
    answer = await replies.on_push(_Conn(), _push("a"))  # type: ignore[arg-type]
    assert answer is not None and answer.code == ResponseCode.SUCCESS
    assert (replies.dropped, replies.waiting) == (1, 0)


async def test_request_reply_is_refused_over_grpc() -> None:
    producer = Producer("g", proxy="127.0.0.1:8081")
    with pytest.raises(UnsupportedTransportError, match="request-reply"):
        await producer.request(Message("t", b"x"))
    with pytest.raises(UnsupportedTransportError, match="request-reply"):
        await producer.reply(_received(), b"x")
