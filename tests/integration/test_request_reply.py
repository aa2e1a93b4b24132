"""Request-reply over remoting on the real cluster (issue 44): ``Producer.request`` and
``Producer.reply``, the broker's reply push to the requester, timeouts, late replies."""

from __future__ import annotations

import functools
from collections.abc import Callable

import anyio
import pytest

from aiorocket.consumer import ConsumeFromWhere, Consumer, ConsumerMessage
from aiorocket.errors import ReplyTimeoutError, UnsupportedTransportError
from aiorocket.message import Message
from aiorocket.producer import Producer
from aiorocket.testing.broker import LocalRocketMQ
from tests.integration.helpers import eventually

pytestmark = [pytest.mark.anyio, pytest.mark.integration]


async def test_requests_get_their_own_replies(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    """Concurrent requests over both brokers' queues, each answered by a replier
    consuming the topic: every caller gets the reply to its own request."""
    topic, group = unique_name("rr"), unique_name("g")
    await rocketmq.create_topic(topic, queues=2)
    async with Producer(unique_name("rp"), rocketmq.namesrv_addr) as replier:

        async def handle(msg: ConsumerMessage) -> None:
            # request 0's reply is large: compressed, and the push says so (sysFlag)
            times = 5000 if msg.body == b"0" else 1
            await replier.reply(msg, (b"re:" + msg.body) * times, properties={"k": "v"})

        consumer = Consumer(group, rocketmq.namesrv_addr, handler=handle,
                            consume_from_where=ConsumeFromWhere.FIRST_OFFSET)  # fmt: skip
        consumer.subscribe(topic)
        async with consumer, Producer(unique_name("q"), rocketmq.namesrv_addr) as requester:
            got: dict[int, bytes] = {}

            async def ask(i: int) -> None:
                reply = await requester.request(Message(topic, b"%d" % i), timeout=30)
                got[i] = reply.body
                assert reply.properties["k"] == "v"
                assert reply.topic == "DefaultCluster_REPLY_TOPIC"

            async with anyio.create_task_group() as tg:
                for i in range(6):
                    tg.start_soon(ask, i)
            assert got == {i: b"re:%d" % i * (5000 if i == 0 else 1) for i in range(6)}
            replies = requester.replies
            assert replies is not None and replies.waiting == 0 and replies.dropped == 0


async def test_a_late_reply_times_out_and_is_dropped(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    """A replier slower than the timeout: the caller gets ``ReplyTimeoutError``, and the
    reply that comes later is answered and dropped, nothing left waiting."""
    topic, group = unique_name("rr"), unique_name("g")
    await rocketmq.create_topic(topic, queues=1, brokers=[next(iter(rocketmq.broker_addrs))])
    warm, release, replied = anyio.Event(), anyio.Event(), anyio.Event()
    async with Producer(unique_name("rp"), rocketmq.namesrv_addr) as replier:

        async def handle(msg: ConsumerMessage) -> None:
            if msg.body == b"warm":  # the consumer is up: the request is not slowed by that
                warm.set()
                return
            await release.wait()
            await replier.reply(msg, b"late")
            replied.set()

        consumer = Consumer(group, rocketmq.namesrv_addr, handler=handle,
                            consume_from_where=ConsumeFromWhere.FIRST_OFFSET)  # fmt: skip
        consumer.subscribe(topic)
        async with consumer, Producer(unique_name("q"), rocketmq.namesrv_addr) as requester:
            replies = requester.replies
            assert replies is not None
            await requester.send(Message(topic, b"warm"))
            with anyio.fail_after(30):
                await warm.wait()
            with pytest.raises(ReplyTimeoutError, match="no reply"):
                await requester.request(Message(topic, b"slow"), timeout=1.5)
            assert replies.waiting == 0
            release.set()
            with anyio.fail_after(30):
                await replied.wait()
            await eventually(lambda: replies.dropped == 1)
            assert replies.waiting == 0


async def test_request_reply_within_a_namespace(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    """Clients of a namespace: the request's topic is the namespace's, the reply topic
    (the cluster's, which the broker created) is not wrapped."""
    topic, group = unique_name("rr"), unique_name("g")
    await rocketmq.create_topic(f"rrns%{topic}", queues=1,
                                brokers=[next(iter(rocketmq.broker_addrs))])  # fmt: skip
    async with Producer(unique_name("rp"), rocketmq.namesrv_addr, namespace="rrns") as replier:

        async def handle(msg: ConsumerMessage) -> None:
            await replier.reply(msg, b"re:" + msg.body)

        consumer = Consumer(group, rocketmq.namesrv_addr, handler=handle, namespace="rrns",
                            consume_from_where=ConsumeFromWhere.FIRST_OFFSET)  # fmt: skip
        consumer.subscribe(topic)
        async with (
            consumer,
            Producer(unique_name("q"), rocketmq.namesrv_addr, namespace="rrns") as requester,
        ):
            reply = await requester.request(Message(topic, b"ns"), timeout=30)
    assert reply.body == b"re:ns"


async def test_the_requester_is_registered_where_its_reply_can_arrive(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    """A request topic on one broker: the reply may still go to any broker of the
    cluster's reply topic, which pushes it only to a producer registered there, so the
    requester heartbeats those brokers too (and keeps doing so)."""
    topic = unique_name("rr")
    await rocketmq.create_topic(topic, queues=1, brokers=[next(iter(rocketmq.broker_addrs))])
    async with Producer(unique_name("q"), rocketmq.namesrv_addr) as requester:
        with pytest.raises(ReplyTimeoutError):  # nobody answers: only the registration counts
            await requester.request(Message(topic, b"x"), timeout=0.5)
        membership = requester.membership
        assert membership is not None
        assert membership.registered == set(rocketmq.broker_addrs.values())


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # the gRPC transport is asyncio only
async def test_a_request_received_over_grpc_cannot_be_replied_to(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    """A consumer attached through the Proxy gets the request without the properties a
    reply needs (the 5.5.0 Proxy passes no system property to gRPC clients): ``reply``
    raises ``UnsupportedTransportError`` saying so, not a ``ConfigError`` blaming the
    sender."""
    topic, group = unique_name("rr"), unique_name("g")
    await rocketmq.create_topic(topic, queues=1, brokers=[next(iter(rocketmq.broker_addrs))])
    await rocketmq.create_group(group)
    raised: list[BaseException] = []
    seen = anyio.Event()
    async with Producer(unique_name("rp"), rocketmq.namesrv_addr) as replier:

        async def handle(msg: ConsumerMessage) -> None:
            try:
                await replier.reply(msg, b"re")
            except Exception as exc:
                raised.append(exc)
            seen.set()

        consumer = Consumer(group, rocketmq.proxy_grpc, transport="grpc", handler=handle,
                            long_poll_timeout=5)  # fmt: skip
        consumer.subscribe(topic)
        requester = Producer(unique_name("q"), rocketmq.namesrv_addr)
        ask = functools.partial(requester.request, Message(topic, b"x"), timeout=30)
        async with consumer, requester, anyio.create_task_group() as tg:
            tg.start_soon(ask)
            with anyio.fail_after(30):
                await seen.wait()
            tg.cancel_scope.cancel()  # the request's wait is dropped
    assert len(raised) == 1 and isinstance(raised[0], UnsupportedTransportError), raised
    assert "CORRELATION_ID" in str(raised[0]) and "remoting" in str(raised[0])
