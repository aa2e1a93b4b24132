"""The gRPC ``PopSource``: a 5.x Proxy, through ``aiorocket.grpc.SimpleConsumer``.

Who renews the invisible time: receives ask the Proxy to (``auto_renew``, as the Java
push consumer does): the Apache Proxy then keeps each message invisible until it is
acked or its invisible duration changed, on its own schedule (``defaultInvisibleTimeMills``,
renewed ``renewAheadTimeMillis`` before it ends, for up to ``renewMaxTimeMillis``). A
Proxy that does not (``enableProxyAutoRenew=false``) refuses such a receive with
ILLEGAL_INVISIBLE_TIME; receives then carry ``invisible_duration`` and the client's
renewer renews. The Proxy's renewal is preferred because renewing from the client hits
an Apache RocketMQ defect (5.3-5.5, apache/rocketmq#9583): after
ChangeInvisibleDuration, an ack of any but the first message of a receive batch is
accepted and then ignored, and the message comes back. (Over remoting the client builds
the new check point itself, correctly: ``aiorocket.client.pop``.)

A lite consumer (``lite`` given) is a LITE_PUSH_CONSUMER of its bind topic: it keeps its
lite subscriptions on the Proxy (``sync_lite``), its messages are FIFO per lite topic
(each one's ``message_group`` is its lite topic), every settling request names the lite
topic (the Proxy accepts a lite message's ack without it, and ignores it), and the
client renews: the Proxy's renewal of a lite message fails (see ``__init__``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection
from functools import partial
from typing import TYPE_CHECKING

from aiorocket._log import Logger
from aiorocket.consumer.pop.lite import RESYNC_AFTER_RECONNECT
from aiorocket.consumer.pop.source import AckRefusals
from aiorocket.errors import ProxyResponseError, RocketMQError
from aiorocket.grpc import _pb as pb
from aiorocket.grpc._encode import FastAckResponse, ack_request
from aiorocket.grpc._lite import sync_lite_subscription
from aiorocket.grpc._push_message import pop_message
from aiorocket.grpc._received import message_ext
from aiorocket.grpc._session import backoff_delays, ensure_asyncio
from aiorocket.grpc._simple import SimpleConsumer
from aiorocket.grpc._trace import GrpcTraceSender
from aiorocket.grpc._transport import check_status
from aiorocket.received import PopMessage
from aiorocket.results import failure_delay_level

if TYPE_CHECKING:
    from aiorocket.consumer.handler import Handler
    from aiorocket.consumer.pop.lite import LiteAction, LiteOffset, LiteSubscriptions
    from aiorocket.consumer.pop.source import Early

__all__ = ["BEHIND_RECEIVERS", "MID_STREAM_HAND_ON", "RECEIVERS", "GrpcSource"]

#: hand a receive's messages on as the reads bring them, before the stream's end (off:
#: at the end, the next receive written before their handlers run). Off: against the
#: shared Proxy 1-3% of the messages came before their stream's end, and the runs with
#: it on drained a backlog slower (median 9,499 vs 10,445 msg/s, 3 pairs) and had the
#: worse p99 at 5,000/s in 4 of 4 pairs (benchmarks/README.md, issue 43, goal 5, round 5)
MID_STREAM_HAND_ON = False
#: receive loops at once
RECEIVERS = 2
#: receive loops added while behind (receives come back full): 8 out in all, one per
#: queue of a topic's default 8 on a broker (the broker pops a queue for one request at
#: a time); parked, holding nothing, while the consumer keeps up
BEHIND_RECEIVERS = 6
#: the Proxy's answer to an auto-renewed receive when it does not renew by itself
_ILLEGAL_INVISIBLE_TIME = 40011
#: the Proxy's code for a receipt handle that is no longer valid
_INVALID_RECEIPT_HANDLE = 40013


class GrpcSource:
    """Pops through a Proxy (the ``grpc`` extra).

    Parameters
    ----------
    session:
        The (not yet started) session, a push consumer's ``SimpleConsumer``.
    log:
        The consumer's logger.
    lite:
        A lite consumer's subscriptions (the session subscribes to their bind topic).
    """

    def __init__(
        self, session: SimpleConsumer, log: Logger, lite: LiteSubscriptions | None = None
    ) -> None:
        self.session = session
        self.group = session.group
        self._log = log
        self.server_renews = True
        self.dead_letter_settles = True  # ForwardMessageToDeadLetterQueue acks it
        session.auto_renew = True
        self.fifo = False
        self.server_max_attempts = 0
        self._backoff = backoff_delays(None)
        self.lite = lite
        if lite is not None:
            session.session.on_lite_dropped = lite.on_unsubscribed
            # The 5.5.0 Proxy drops a client's lite subscriptions when its session
            # stream is cut (ClientActivity.handleGrpcCancel), in no order with the new
            # stream's settings: sent again at once, and again shortly after in case
            # the Proxy's removal came after them (RESYNC_AFTER_RECONNECT).
            session.session.on_reconnected = partial(lite.resync_soon, RESYNC_AFTER_RECONNECT)
            # The Apache Proxy's renewal fails for lite messages (5.5.0: it renews the
            # parent topic's queue, the broker answers NO_EXIST, and a message handled
            # longer than its invisible time comes back): the client's renewer renews,
            # naming the lite topic.
            self.server_renews = session.auto_renew = False

    @property
    def client_id(self) -> str:
        return self.session.transport.client_id

    def trace_sender(self) -> GrpcTraceSender:
        return GrpcTraceSender(self.session.transport)

    def answer_verify(self, handler: Handler) -> None:
        """Run the messages of the Proxy's VerifyMessageCommand (its consume-message-
        directly: ``mqadmin queryMsgById -d``) through ``handler``, as Java's push
        consumer does: OK when it succeeded, FAILED_TO_CONSUME_MESSAGE when it failed or
        raised. Nothing is acked or sent back: the message is a copy the Proxy read."""

        async def verify(message: pb.Message) -> pb.Code:
            msg_id = message.system_properties.message_id
            try:  # a body that does not decode fails as a handler would
                msg = pop_message(message_ext(message, broker_name=""))
                level = failure_delay_level(await handler.invoke([msg]), 0)
            except Exception as exc:
                self._log.info("verify_handler_failed", msg_id=msg_id, error=repr(exc))
                return pb.Code.FAILED_TO_CONSUME_MESSAGE
            return pb.Code.OK if level is None else pb.Code.FAILED_TO_CONSUME_MESSAGE

        self.session.session.on_verify = verify

    @property
    def receivers(self) -> int:
        return RECEIVERS

    @property
    def behind_receivers(self) -> int:
        return BEHIND_RECEIVERS

    def receivable_queues(self) -> int:
        return self.session.receivable_queues()

    @property
    def connection(self) -> int:
        return self.session.session.connections

    async def new_connection(self, since: int) -> None:
        await self.session.session.wait_new(since)

    async def run(self) -> None:
        """Nothing: the session keeps itself alive."""

    async def open(self) -> None:
        ensure_asyncio("Consumer")
        session = self.session
        await session.__aenter__()
        sub = session.session.subscription()
        self.fifo = bool(sub is not None and sub.fifo) or self.lite is not None
        if self.lite is not None and sub is not None:
            if sub.lite_subscription_quota is not None:
                self.lite.quota = sub.lite_subscription_quota
            if sub.max_lite_topic_size:
                self.lite.max_length = sub.max_lite_topic_size
        policy = session.session.retry_policy()
        self.server_max_attempts = policy.max_attempts if policy is not None else 0
        self._backoff = backoff_delays(policy)

    async def close(self) -> None:
        await self.session.__aexit__(None, None, None)

    def backoff(self, attempt: int) -> float:
        return self._backoff(attempt)

    def retry_pause(self, attempt: int) -> float:
        return self._backoff(attempt)  # a FIFO group's retry: the server's policy

    async def receive(
        self, max_messages: int, invisible: float, early: Early | None = None
    ) -> list[PopMessage]:
        """A receive whose messages go to ``early``: with ``MID_STREAM_HAND_ON``, as the
        stream brings them (what a read of the connection brought, once the reader has
        decoded all of it: ``SimpleConsumer.receive``'s ``idle``); the rest, or all,
        when the stream ends, fails or is cancelled. All of it in the receive's task:
        the hand-on starts queues and wakes tasks (anyio needs a task)."""
        # Not connected (a Proxy restart): wait for the session, however long, rather
        # than fail receives that would grow the receivers' backoff meanwhile; they go
        # out as soon as the Proxy has the settings again.
        if not self.session.session.ready:
            await self.session.session.wait_ready()
        out: list[PopMessage] = []
        given = 0  # out[:given] went to ``early``

        def hand_early() -> None:
            # The batch's first messages reach the handler while the Proxy still
            # writes the rest (benchmarks/README.md, issue 43, goal 5, round 5).
            nonlocal given
            if given < len(out) and early is not None:
                chunk, given = out[given:], len(out)
                early(chunk)

        def each_lite(m: PopMessage) -> None:
            # a lite topic is delivered in order: one FIFO queue each
            m.message_group = m.lite_topic
            out.append(m)

        try:
            idle = hand_early if early is not None and MID_STREAM_HAND_ON else None
            each = out.append if self.lite is None else each_lite
            await self.session.receive_pop(max_messages, invisible, each=each, idle=idle)
        except ProxyResponseError as err:
            if err.code != _ILLEGAL_INVISIBLE_TIME or not self.session.auto_renew:
                raise
            self.session.auto_renew = self.server_renews = False
            self._log.info("proxy_does_not_renew", renewer="client", invisible_duration=invisible)
            return []
        finally:
            # What the last read decoded, now (also when cancelled or failed: every
            # message ``each`` took is ours, not released by the session).
            hand_early()
        return out

    async def sync_lite(
        self, action: LiteAction, lite_topics: Collection[str], *, offset: LiteOffset | None = None
    ) -> None:
        assert self.lite is not None, "not a lite consumer"
        await sync_lite_subscription(
            self.session, self.lite.bind_topic, pb.LiteSubscriptionAction[action.value],
            lite_topics, None if offset is None else (offset.kind, offset.value),
        )  # fmt: skip

    async def ack(self, topic: str, messages: list[PopMessage]) -> AckRefusals:
        c = self.session
        lite = self.lite is not None
        handles = [(m.message_id, m.receipt_handle, m.lite_topic if lite else None)
                   for m in messages]  # fmt: skip
        req = ack_request(c.transport.namespace, c.group, topic, handles)
        resp = await c.transport.unary("AckMessage", req, FastAckResponse)
        check_status(resp.status, "AckMessage")
        refused: AckRefusals = []
        for entry in resp.entries:
            try:
                check_status(entry.status, "AckMessage")
            except ProxyResponseError as err:  # this entry's, typed as a call's would be
                msg = _entry_message(messages, entry.receipt_handle, entry.message_id)
                if msg is not None:
                    refused.append((msg, err))
        return refused

    async def change_invisible(self, msg: PopMessage, seconds: float) -> None:
        await self.session.change_invisible_duration(msg, seconds)

    async def dead_letter(self, msg: PopMessage, *, attempt: int, max_attempts: int) -> None:
        await self.session.forward_to_dead_letter(
            msg, delivery_attempt=attempt, max_delivery_attempts=max_attempts
        )

    def acks_before_release(self, send: Callable[[], Awaitable[None]]) -> None:
        self.session.session.before_release = send

    def lost(self, err: RocketMQError) -> bool:
        return isinstance(err, ProxyResponseError) and err.code == _INVALID_RECEIPT_HANDLE


def _entry_message(messages: list[PopMessage], handle: str, message_id: str) -> PopMessage | None:
    """The message an ack answer's entry is about (by receipt handle, else by id)."""
    for m in messages:
        if m.receipt_handle == handle:
            return m
    return next((m for m in messages if m.message_id == message_id), None)
