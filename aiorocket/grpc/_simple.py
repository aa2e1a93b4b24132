"""SimpleConsumer: pop consumption through the Proxy, driven by the application.

``receive`` long-polls one of the group's assigned brokers for up to ``max_messages``
messages, which stay invisible to the group for ``invisible_duration``; ``ack`` ends a
message, ``change_invisible_duration`` postpones its redelivery. A message neither
acked nor postponed in time is received again (``delivery_attempt`` + 1), so nothing
is lost when the application crashes, is cancelled or loses the connection: it only
comes back later.

The Proxy gives every member of a group the same assignments (one entry per broker) and
spreads messages through pop, so there is no rebalance here: receives go round-robin
over subscribed topics and their assigned brokers.
"""

from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from datetime import timedelta
from types import TracebackType
from typing import Any, Protocol

import anyio

from aiorocket._release import release_all, retried
from aiorocket._settings import check_group, check_invisible_duration
from aiorocket.errors import (
    ClientClosedError,
    ConfigError,
    ConnectionClosedError,
    ProtocolError,
    ProxyResponseError,
    ProxyUnavailableError,
    RequestTimeoutError,
    RocketMQError,
)
from aiorocket.grpc import _pb as pb
from aiorocket.grpc._encode import FastAckResponse, RawRequest, ack_request, with_attempt_id
from aiorocket.grpc._fast import (
    FastPopReceiveResponse,
    FastReceiveResponse,
    M,
    _ReceiveResponse,
)
from aiorocket.grpc._received import ReceivedMessage
from aiorocket.grpc._session import Session, backoff_delays
from aiorocket.grpc._transport import GrpcOptions, GrpcTransport, check_status
from aiorocket.received import PopMessage

__all__ = ["MAX_BATCH", "Receipt", "SimpleConsumer"]

_ASSIGNMENT_TTL = 5.0  # the Java push consumer re-queries assignments every 5 s
MAX_BATCH = 32  # the Proxy's cap on one receive


class Receipt(Protocol):
    """What settling a received message over gRPC needs of it."""

    topic: str
    message_id: str
    receipt_handle: str

    @property
    def lite_topic(self) -> str | None:
        """A lite message's lite topic: its settling requests must name it."""


class SimpleConsumer:
    """Receives, acks and postpones messages of a consumer group through a Proxy.

    ```python
    async with SimpleConsumer("g", "127.0.0.1:8081", {"orders": "*"}) as consumer:
        for msg in await consumer.receive(16, invisible_duration=30):
            handle(msg.body)
            await msg.ack()
    ```

    Parameters
    ----------
    group:
        the consumer group.
    endpoint:
        the Proxy's gRPC ``host:port``.
    subscriptions:
        topic → tag expression (``"*"``, ``"a||b"``).
    await_duration:
        long-polling time of a receive with nothing to deliver (the Proxy clamps it to
        5-20 s).
    request_timeout:
        deadline of every other call, and the margin added to a receive's.
    options:
        TLS, namespace, ACL credentials.
    client_id:
        the ``x-mq-client-id`` (default ``ip@pid#random``).
    """

    #: what the Proxy is told this client is (the push consumer reuses this class).
    client_type = pb.ClientType.SIMPLE_CONSUMER
    #: ask the Proxy to keep received messages invisible until they are settled (the
    #: push consumer's receives; a Proxy that does it ignores ``invisible_duration``)
    auto_renew = False

    def __init__(
        self,
        group: str,
        endpoint: str,
        subscriptions: Mapping[str, str],
        *,
        await_duration: float = 20.0,
        request_timeout: float = 3.0,
        options: GrpcOptions | None = None,
        client_id: str | None = None,
        client_type: pb.ClientType | None = None,
    ) -> None:
        check_group(group, "consumer")
        if client_type is not None:
            self.client_type = client_type
        if not subscriptions:
            raise ConfigError("a SimpleConsumer needs at least one subscription")
        if not await_duration > 0:
            raise ConfigError(f"await_duration must be positive, got {await_duration!r}")
        self.group = group
        self.await_duration = await_duration
        self.transport = GrpcTransport.create(
            endpoint, options, client_id=client_id, request_timeout=request_timeout
        )
        self._subs: dict[str, str] = dict(subscriptions)
        #: encoded ReceiveMessageRequests without their attempt id (_receive_request)
        self._receive_requests: dict[tuple[Any, ...], tuple[pb.MessageQueue, bytes]] = {}
        self._subscription = pb.Subscription()
        self.session = Session(self.transport, self.client_type, self._subscription, group=group)
        self._subscription.group = self.session.resource(group)
        self._fill_subscription()
        self._assignments: dict[str, tuple[float, list[pb.MessageQueue]]] = {}
        #: topics whose assignments are being asked for in the background
        self._refreshing: set[str] = set()
        self._rr = itertools.count()
        #: receives under way per (topic, broker): see ``_pick``
        self._receiving: dict[tuple[str, str], int] = {}
        #: whether a topic is received now (a push consumer's pauses); all are without
        self.receivable: Callable[[str], bool] | None = None
        #: per (topic, broker): attempt ids of receives that got no message, for the
        #: next receives there (``_take_attempt``)
        self._attempts: dict[tuple[str, str], list[str]] = {}
        self._started = False
        #: received messages that could not be decoded (dead-lettered, released or
        #: left), since the start; ``on_undecodable`` is called for each too
        self.undecodable_total = 0
        self.on_undecodable: Callable[[], None] | None = None

    def _fill_subscription(self) -> None:
        self._subscription.subscriptions = [
            pb.SubscriptionEntry(
                topic=self.session.resource(topic),
                expression=pb.FilterExpression(type=pb.FilterType.TAG, expression=expr or "*"),
            )
            for topic, expr in self._subs.items()
        ]

    async def __aenter__(self) -> SimpleConsumer:
        if self._started:
            raise ClientClosedError("a SimpleConsumer can be started once")
        self._started = True
        await self.session.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.session.__aexit__(exc_type, exc, tb)

    def _check_open(self) -> None:
        if not self._started or self.session.closed:
            raise ClientClosedError("SimpleConsumer is not started or closed")

    @property
    def subscriptions(self) -> dict[str, str]:
        return dict(self._subs)

    async def subscribe(self, topic: str, expression: str = "*") -> None:
        """Add (or change) a subscription; the Proxy learns it before this returns."""
        self._check_open()
        self._subs[topic] = expression
        self._fill_subscription()
        await self.session.resync_settings()

    async def unsubscribe(self, topic: str) -> None:
        self._check_open()
        self._subs.pop(topic, None)
        self._fill_subscription()
        await self.session.resync_settings()

    # -- receiving -----------------------------------------------------------------

    def receivable_queues(self) -> int:
        """The Proxy's assignments of the subscribed topics, as last queried (and no
        older than a few refreshes: a topic whose query now fails counts 0)."""
        now = time.monotonic()
        return sum(
            len(queues)
            for topic, (at, queues) in self._assignments.items()
            if topic in self._subs and now - at < 3 * _ASSIGNMENT_TTL
        )

    async def _assignment(self, topic: str) -> list[pb.MessageQueue]:
        """The Proxy's assignments of ``topic``: the last ones known, asked for again in
        the background once older than ``_ASSIGNMENT_TTL`` (as the Java push consumer's
        queues are its last scan's); only a topic never asked waits for the answer. A
        receive after an outage (a Proxy restart) does not wait for the query then."""
        hit = self._assignments.get(topic)
        if hit is None:
            return await self._query_assignment(topic)
        if time.monotonic() - hit[0] >= _ASSIGNMENT_TTL and topic not in self._refreshing:
            self._refreshing.add(topic)
            self.session.start_soon(lambda: self._refresh_assignment(topic))
        return hit[1]

    async def _refresh_assignment(self, topic: str) -> None:
        try:
            await self._query_assignment(topic)
        except RocketMQError as err:  # kept as it was; asked again by the next receive
            self.session.log.debug("assignment_refresh_failed", topic=topic, error=str(err))
        finally:
            self._refreshing.discard(topic)

    async def _query_assignment(self, topic: str) -> list[pb.MessageQueue]:
        now = time.monotonic()
        req = pb.QueryAssignmentRequest(
            topic=self.session.resource(topic),
            group=self.session.resource(self.group),
            endpoints=self.transport.endpoints(),
        )
        resp = await self.transport.unary("QueryAssignment", req, pb.QueryAssignmentResponse)
        check_status(resp.status, "QueryAssignment")
        queues = [a.message_queue for a in resp.assignments]
        if not queues:
            raise ProxyResponseError(
                int(pb.Code.FORBIDDEN), f"no readable queue of {topic} for {self.group}",
                name="FORBIDDEN", rpc="QueryAssignment",
            )  # fmt: skip
        self._assignments[topic] = (now, queues)
        return queues

    async def receive(
        self, max_messages: int = 16, invisible_duration: float = 30.0,
        *, each: Callable[[ReceivedMessage], None] | None = None,
        idle: Callable[[], None] | None = None,
    ) -> list[ReceivedMessage]:  # fmt: skip
        """Up to ``max_messages`` (1-32) messages, invisible to the group for
        ``invisible_duration`` seconds (10 s to 12 h, the Proxy's bounds: else
        ConfigError); waits up to
        ``await_duration`` for one to arrive, and returns ``[]`` when none did.

        ``each``: called with every (decodable) message as soon as it is read off the
        stream, before the stream's end (the Proxy writes a batch message by message):
        each message given to it is the caller's from then on, even when the receive
        then fails or is cancelled (it is not made visible again here); the returned
        list still holds every message, in the order given. ``idle``: called (in the
        receive's task) whenever every message that has arrived so far was given to
        ``each`` and the stream has not ended: the next one is not here yet."""
        return await self._receive(
            FastReceiveResponse, max_messages, invisible_duration, each, idle
        )

    async def receive_pop(
        self, max_messages: int, invisible_duration: float,
        *, each: Callable[[PopMessage], None] | None = None,
        idle: Callable[[], None] | None = None,
    ) -> list[PopMessage]:  # fmt: skip
        """As ``receive``, the messages decoded straight into the push consumer's
        ``PopMessage`` (not a ``ReceivedMessage`` copied into one: ~30 Python calls a
        message, benchmarks/README.md, gRPC, "Round 9")."""
        return await self._receive(
            FastPopReceiveResponse, max_messages, invisible_duration, each, idle
        )

    async def _receive(
        self, response: type[_ReceiveResponse[M]], max_messages: int,
        invisible_duration: float, each: Callable[[M], None] | None,
        idle: Callable[[], None] | None,
    ) -> list[M]:  # fmt: skip
        self._check_open()
        if not 1 <= max_messages <= MAX_BATCH:
            raise ConfigError(f"max_messages must be 1..{MAX_BATCH}, got {max_messages!r}")
        check_invisible_duration(invisible_duration)
        timeout = self.await_duration + self.transport.request_timeout
        if not self.session.ready:  # (not awaited when it is: a receive's every call counts)
            await self._session_ready(timeout)
        n = next(self._rr)
        topics = list(self._subs)
        receivable = self.receivable
        if receivable is not None:
            topics = [t for t in topics if receivable(t)]
            if not topics:
                return []  # all paused: the caller waits for a resume
        topic = topics[n % len(topics)]
        mq = self._pick(topic, await self._assignment(topic), n // len(topics))
        broker = mq.broker.name
        # Again: the session may have been taken down meanwhile (``Session.release_held``).
        if not self.session.ready:
            await self._session_ready(timeout)
        out: list[M] = []
        #: messages whose body does not decode, until settled (``_settle_undecodable``)
        bad: list[tuple[M, str]] = []
        key = (topic, broker)
        attempt = self._take_attempt(key)
        req = self._receive_request(topic, mq, max_messages, invisible_duration, attempt)
        self._receiving[key] = self._receiving.get(key, 0) + 1
        broken: list[bool] = []  # the stream broke before the Proxy ended it (``_read``)
        # No await since the check: a release's termination waits for this request.
        written = self.session.admit()
        try:
            try:
                try:
                    await self._read(response, req, timeout, broker, out, bad, each, idle,
                                     broken, written)  # fmt: skip
                finally:
                    written()  # (given up)
                    if not out and not bad:
                        self._attempts.setdefault(key, []).append(attempt)
            except RocketMQError as err:
                if self._holds_what_it_wrote(err, broken):
                    # What the Proxy wrote after the break never arrived, and it renews
                    # those messages for this client: until its close, otherwise.
                    self.session.release_held_soon()
                if not out and not bad:
                    raise
                # The stream broke (a reset, the deadline, a corrupt frame) after some
                # messages came. They are ours: handed on, not dropped (an auto-renewing
                # Proxy would keep them invisible for this client for hours, otherwise).
                # The next receive meets the fault again if it lasts.
                self.session.log.warning(
                    "receive_stream_broken", topic=topic, broker=broker, received=len(out),
                    undecodable=len(bad), error=str(err),
                )  # fmt: skip
            if bad:
                await self._settle_undecodable(bad)
        except BaseException:
            # Cancelled (the close, a caller's timeout) with messages in hand that nobody
            # will get: visible to the group again at once (those given to ``each`` are
            # the caller's already).
            await self._release(([] if each is not None else out) + [m for m, _ in bad])
            raise
        finally:
            self._receiving[key] -= 1
        return out

    def _take_attempt(self, key: tuple[str, str]) -> str:
        """The attempt id of a receive from ``key`` (topic, broker): one a receive there
        used without getting a message, else a new one.

        The broker recognises a pop repeated under the same attempt id and answers it
        with what the first one popped (a FIFO queue's messages above all: the attempt
        that owns its order state). So an attempt id is kept across failed receives
        (the answer may have been lost: a reset stream, the deadline) and empty ones,
        and dropped once a receive got a message, as the Java push consumer does since
        5.2.1 (rocketmq-clients#1321: it drew a new one after any failure but a deadline,
        and after empty answers). Each is used by one receive at a time: two receives
        under way never share one."""
        spare = self._attempts.get(key)
        return spare.pop() if spare else str(uuid.uuid4())

    def _holds_what_it_wrote(self, err: RocketMQError, broken: list[bool]) -> bool:
        """Whether a receive that failed with ``err`` may have left messages the Proxy
        renews for this client that it never got: an auto-renewed receive whose stream
        broke before its end (a reset, the deadline, a corrupt frame; ``broken``: the
        client broke it off, as for a message it cannot read or an answer over
        ``MAX_REPLY``). An error status is the Proxy's own answer (it wrote no message
        after it). Receives that are not
        auto-renewed (a simple consumer's, a lite consumer's: the client renews those)
        leave nothing held beyond their invisible duration: the 5.5.0 Proxy registers a
        receipt handle for renewal only when the receive asks (ReceiveMessageActivity:
        ``enableProxyAutoRenew && request.autoRenew``)."""
        if not self.auto_renew:
            return False
        return bool(broken) or isinstance(
            err, ConnectionClosedError | RequestTimeoutError | ProtocolError
        )

    async def _read(
        self, response: type[_ReceiveResponse[M]], req: RawRequest, timeout: float,
        broker: str, out: list[M], bad: list[tuple[M, str]],
        each: Callable[[M], None] | None = None,
        idle: Callable[[], None] | None = None, broken: list[bool] | None = None,
        written: Callable[[], None] | None = None,
    ) -> None:  # fmt: skip
        """Read one receive stream into ``out`` (and undecodable messages into ``bad``),
        message by message: what came before an error is in the lists when it raises
        (what had arrived unread when the read was cut off too: ``_rescue``); ``each``
        gets every message of ``out`` as it is appended, ``idle`` is called when the
        next read would wait for the connection (``WireStream.pending``); ``broken``
        gets True when the read ends in an error before the Proxy ended the stream;
        ``written`` is called once the request is written (``Session.admit``)."""
        async with self.transport.server_stream(
            "ReceiveMessage", req, response, timeout=timeout
        ) as stream:
            if written is not None:
                written()
            try:
                async for resp in stream:
                    msg = resp.message
                    if resp.status is not None:
                        if resp.status.code == pb.Code.MESSAGE_NOT_FOUND:
                            continue
                        check_status(resp.status, "ReceiveMessage")
                    elif msg is not None:
                        if isinstance(msg, ReceivedMessage):  # a PopMessage: its runtime's
                            msg._consumer = self
                        msg.broker_name = broker
                        if resp.error is None:
                            out.append(msg)
                            if each is not None:
                                each(msg)
                            if idle is not None and not stream.pending():
                                idle()  # the next message is not here yet
                        else:
                            bad.append((msg, str(resp.error)))
                    elif resp.error is not None:
                        self._unsettleable(broker, str(resp.error))
            except ProxyResponseError:
                raise  # the Proxy's status: its answer, nothing written after it
            except BaseException:
                if broken is not None and not stream.answered():
                    broken.append(True)
                self._rescue(stream.arrived(), broker, out, bad, each)
                raise

    def _rescue(
        self, arrived: list[_ReceiveResponse[M]], broker: str,
        out: list[M], bad: list[tuple[M, str]],
        each: Callable[[M], None] | None,
    ) -> None:  # fmt: skip
        """Take the messages that had arrived, unread, when the read stopped: ours as the
        ones read, not left to come back after their invisible time (or, auto-renewed,
        the session's end). An asyncio cancellation (``task.cancel()``, ``wait_for``)
        in the instant their bytes came cuts the reader off after the connection woke
        it (anyio's scopes wait until it has run)."""
        for resp in arrived:
            msg = resp.message
            if msg is None:
                if resp.error is not None:
                    self._unsettleable(broker, str(resp.error))
                continue  # a status: the end's, which the error stands for
            if isinstance(msg, ReceivedMessage):
                msg._consumer = self
            msg.broker_name = broker
            if resp.error is not None:
                bad.append((msg, str(resp.error)))
                continue
            out.append(msg)
            if each is not None:
                each(msg)

    def _unsettleable(self, broker: str, error: str) -> None:
        """A message of which not even the receipt handle is readable: nothing to
        settle it with. It comes back after its invisible time (an auto-renewed one
        when this client's session ends)."""
        self._count_undecodable()
        self.session.log.error("undecodable_message", broker=broker, action="none", error=error)

    def _count_undecodable(self) -> None:
        self.undecodable_total += 1
        if self.on_undecodable is not None:
            self.on_undecodable()

    async def _settle_undecodable(self, bad: list[tuple[M, str]]) -> None:
        """Settle messages whose body cannot be decoded (an unknown codec, a corrupt
        body): retrying them cannot help, as for a remoting consumer's undecodable
        record (``aiorocket.consumer.undecodable``), so each goes to the group's
        dead-letter queue. Refused there, it is released with the server's retry
        backoff (it comes back later, and is tried again). Only when that fails too is
        it left as it is (logged ``action="held"``): it comes back after its invisible
        time, or, auto-renewed (``auto_renew``, the push consumer's), once this client's
        session ends. Removed from ``bad`` as each is settled."""
        policy = self.session.retry_policy()
        backoff = backoff_delays(policy)
        while bad:
            msg, error = bad[0]
            self._count_undecodable()
            try:
                await self.forward_to_dead_letter(
                    msg, delivery_attempt=msg.delivery_attempt,
                    max_delivery_attempts=(policy.max_attempts if policy else 0)
                    or msg.delivery_attempt,
                )  # fmt: skip
                action = "dead_lettered"
            except RocketMQError as err:
                self.session.log.warning("dead_letter_failed", topic=msg.topic,
                                         msg_id=msg.message_id, error=str(err))  # fmt: skip
                try:
                    await self.change_invisible_duration(msg, backoff(msg.delivery_attempt))
                    action = "released"
                except RocketMQError:
                    action = "held"  # see the docstring: back later, not at once
            del bad[0]
            self.session.log.error(
                "undecodable_message", topic=msg.topic, msg_id=msg.message_id,
                attempt=msg.delivery_attempt, action=action, error=error,
            )  # fmt: skip

    async def _release(self, messages: list[M]) -> None:
        """Make received ``messages`` visible again at once (within one request timeout,
        shielded: it runs when the receive is cancelled); a release whose connection was
        lost under it (a silent one the keepalive abandoned while the close cut the
        receive) goes again on a new one, as the pop settler's do (``retried``); what
        fails comes back after its invisible time (a lite consumer's: 5.5.0 does not
        release them at the client's termination)."""
        if not messages:
            return

        def failed(msg: M, err: RocketMQError) -> None:
            self.session.log.warning("release_failed", topic=msg.topic,
                                     msg_id=msg.message_id, error=str(err))  # fmt: skip

        left = await release_all(
            messages, lambda m: retried(lambda: self.change_invisible_duration(m, 0.0)),
            self.transport.request_timeout, on_error=failed,
        )  # fmt: skip
        self.session.log.info("received_messages_released", n=len(messages) - len(left),
                              held=len(left))  # fmt: skip

    async def _session_ready(self, timeout: float) -> None:
        """Wait (up to ``timeout``) until the Proxy knows this client on the current
        connection: a receive sent before the settings fails (``Session.wait_ready``)."""
        if self.session.ready:
            return
        with anyio.move_on_after(timeout):
            await self.session.wait_ready()
        if not self.session.ready:
            raise ProxyUnavailableError(
                f"ReceiveMessage to {self.transport.endpoint}: no session with the Proxy "
                f"within {timeout}s (its telemetry stream is down: {self.session.last_error})"
            )

    def _pick(self, topic: str, queues: list[pb.MessageQueue], turn: int) -> pb.MessageQueue:
        """The assigned queue (one per broker) with the fewest receives under way, the
        round-robin's turn first among equals. Receives that all wait on one broker would
        miss what arrives on another until their long poll ends (a lite consumer's two
        receives parked on one broker left the other broker's lite messages for 15 s)."""
        start = turn % len(queues)
        order = queues[start:] + queues[:start]
        return min(order, key=lambda q: self._receiving.get((topic, q.broker.name), 0))

    def _receive_request(
        self, topic: str, mq: pb.MessageQueue, max_messages: int, invisible_duration: float,
        attempt_id: str,
    ) -> RawRequest:  # fmt: skip
        """ReceiveMessageRequest: everything but the attempt id encoded once per queue
        and settings (betterproto's encoder took a sixth of the push consumer's CPU,
        benchmarks/README.md, gRPC), then the attempt id appended: protobuf fields may
        come in any order."""
        expression = self._subs.get(topic) or "*"  # subscribe() may change it
        key = (id(mq), max_messages, invisible_duration, self.await_duration, topic, expression,
               self.auto_renew)  # fmt: skip
        fixed = self._receive_requests.get(key)
        if fixed is None or fixed[0] is not mq:
            if len(self._receive_requests) > 1024:  # assignments change: stay bounded
                self._receive_requests.clear()
            req = pb.ReceiveMessageRequest(
                group=self.session.resource(self.group),
                message_queue=mq,
                filter_expression=pb.FilterExpression(
                    type=pb.FilterType.TAG, expression=expression
                ),
                batch_size=max_messages,
                # Auto-renewed: the Proxy's own invisible time (a Proxy that does not
                # renew refuses the receive: ILLEGAL_INVISIBLE_TIME, see the push runtime).
                invisible_duration=(
                    None if self.auto_renew else timedelta(seconds=invisible_duration)
                ),
                auto_renew=self.auto_renew,
                long_polling_timeout=timedelta(seconds=self.await_duration),
            )
            fixed = (mq, bytes(req))
            self._receive_requests[key] = fixed
        return with_attempt_id(fixed[1], attempt_id)

    async def ack(self, message: ReceivedMessage | Iterable[ReceivedMessage]) -> None:
        """Acknowledge one message, or several of one topic in one request."""
        self._check_open()
        msgs = [message] if isinstance(message, ReceivedMessage) else list(message)
        if not msgs:
            return
        topic = msgs[0].topic
        if any(m.topic != topic for m in msgs):
            raise ConfigError("messages acked together must share one topic")
        req = ack_request(
            self.transport.namespace, self.group, topic,
            [(m.message_id, m.receipt_handle, m.lite_topic) for m in msgs],
        )  # fmt: skip
        resp = await self.transport.unary("AckMessage", req, FastAckResponse)
        check_status(resp.status, "AckMessage")
        for entry in resp.entries:
            check_status(entry.status, "AckMessage")

    async def change_invisible_duration(self, message: Receipt, seconds: float) -> None:
        """Make ``message`` visible again ``seconds`` from now; its receipt handle is
        replaced by the new one the Proxy returns (ack with the message afterwards)."""
        self._check_open()
        req = pb.ChangeInvisibleDurationRequest(
            group=self.session.resource(self.group),
            topic=self.session.resource(message.topic),
            receipt_handle=message.receipt_handle,
            invisible_duration=timedelta(seconds=seconds),
            message_id=message.message_id,
            lite_topic=message.lite_topic,
        )
        resp = await self.transport.unary(
            "ChangeInvisibleDuration", req, pb.ChangeInvisibleDurationResponse
        )
        check_status(resp.status, "ChangeInvisibleDuration")
        if resp.receipt_handle:
            message.receipt_handle = resp.receipt_handle

    async def forward_to_dead_letter(
        self, message: Receipt, *, delivery_attempt: int, max_delivery_attempts: int
    ) -> None:
        """Move ``message`` to the group's dead-letter queue (``%DLQ%<group>``)."""
        self._check_open()
        req = pb.ForwardMessageToDeadLetterQueueRequest(
            group=self.session.resource(self.group),
            topic=self.session.resource(message.topic),
            receipt_handle=message.receipt_handle,
            message_id=message.message_id,
            delivery_attempt=delivery_attempt,
            max_delivery_attempts=max_delivery_attempts,
            lite_topic=message.lite_topic,
        )
        resp = await self.transport.unary(
            "ForwardMessageToDeadLetterQueue", req, pb.ForwardMessageToDeadLetterQueueResponse
        )
        check_status(resp.status, "ForwardMessageToDeadLetterQueue")
