"""Sending over the Proxy: plain, FIFO (message group), delayed, batches, transactions.

``GrpcProducer`` is the transport side of a [`aiorocket.producer.Producer`][] given a
Proxy endpoint (its engine, ``aiorocket.producer.over_grpc``, wraps it). The Proxy picks
the queue itself (FIFO messages by their message group's hash), so a send names only the
topic; a ``SendResult`` carries the queue offset the Proxy reports but no queue
(``queue_id`` -1, broker unknown).

Retries follow the server's producer backoff policy (from the Telemetry settings):
a failed attempt (timed out, throttled or a server-side error) is retried ``retries``
times after the policy's delay, within the send's timeout. An attempt that found the
Proxy unreachable (``ProxyUnavailableError``: refused or reset, as while it restarts)
is not counted: it is retried with the policy's growing delay (10 ms doubling to 1 s
by the Proxy's defaults) until the send's timeout, so a send outlives a Proxy restart
shorter than its timeout (``retries=0`` keeps one attempt). The Java 5.x client
retries at once, ``maxAttempts`` in all, and backs off only when throttled: it gives
up within milliseconds of a Proxy going down. Requests
the Proxy rejects as invalid are not retried. Transactional half messages are never
resent (as in the Java client).

A transactional producer answers the Proxy's RecoverOrphanedTransactionCommand with
its ``on_orphan`` verdict and EndTransaction(source=SERVER_CHECK). The Proxy finds a
producer for a topic's orphaned transactions through the topics its settings publish:
the topics declared with ``Producer(topics=...)`` are in the first settings, so a
restarted producer is asked about its predecessor's orphans before it sends anything;
any other topic joins at its first send (one Telemetry update).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from types import TracebackType
from typing import Protocol

import anyio
import anyio.abc

from aiorocket._log import get_logger
from aiorocket._send_result import SendResult, SendStatus
from aiorocket.errors import (
    ClientClosedError,
    ConfigError,
    ProxyResponseError,
    ProxyUnavailableError,
    RequestTimeoutError,
    RocketMQError,
)
from aiorocket.grpc import _pb as pb
from aiorocket.grpc._batcher import GRPC_BATCH_IN_FLIGHT, GrpcBatcher, Wanted
from aiorocket.grpc._convert import Outgoing, prepare
from aiorocket.grpc._encode import FastSendResponse, SendEntry, encode_message, send_request
from aiorocket.grpc._received import message_ext
from aiorocket.grpc._session import Session, backoff_delays
from aiorocket.grpc._transport import GrpcOptions, GrpcTransport, check_status, with_security
from aiorocket.message import Message, MessageExt, MessageQueue
from aiorocket.security import Credentials, TlsSetting

__all__ = ["GrpcProducer", "OrphanVerdict", "SendSettings"]

#: Answers an orphaned half message: True commit, False roll back, None unknown (ask
#: again later).
OrphanVerdict = Callable[[MessageExt], Awaitable["bool | None"]]


class SendSettings(Protocol):
    """The producer settings this module reads (``ProducerConfig`` has them)."""

    send_timeout: float
    retries: int
    max_message_size: int
    request_timeout: float
    heartbeat_interval: float
    check_concurrency: int
    max_in_flight: int
    auto_batch: bool | None
    batch_max_bytes: int
    batch_in_flight: int | None
    shutdown_timeout: float
    credentials: Credentials | None
    tls: TlsSetting
    namespace: str


@dataclass(frozen=True, slots=True)
class _Sent:
    entry: pb.SendResultEntry
    topic: str


#: Bytes counted per message besides its body when filling a batch (properties, ids).
_OVERHEAD = 200


class GrpcProducer:
    """A producer session with a Proxy (see the module docstring).

    Parameters
    ----------
    group:
        the producer group (v2 has none on the wire: kept for logs only).
    endpoint:
        the Proxy's ``host:port``.
    config:
        the producer settings (``send_timeout``, ``retries``, ``max_message_size``,
        ``request_timeout``, ``check_concurrency``).
    on_orphan:
        answers orphaned-transaction commands (none: they are not answered).
    options:
        TLS, namespace, ACL credentials.
    client_id:
        the ``x-mq-client-id`` (default: ``ip@pid#random``).
    on_answered:
        called with a message and the verdict (True commit) once the Proxy took the
        answer to its check-back.
    stale_after:
        seconds a check-back may wait for a free answering slot; one that waited longer
        is not answered (the broker asks again). None: always answered.
    announce:
        whether a send to a topic not yet declared adds it to the settings (as the Java
        client does). The Proxy makes a client publishing a topic a candidate for the
        check-backs of its transactions: a sender of half messages that another process
        ends passes False, so that they go to that process only.
    """

    def __init__(
        self,
        group: str,
        endpoint: str,
        *,
        config: SendSettings,
        on_orphan: OrphanVerdict | None = None,
        options: GrpcOptions | None = None,
        client_id: str | None = None,
        topics: Sequence[str] = (),
        announce: bool = True,
        on_answered: Callable[[MessageExt, bool], None] | None = None,
        stale_after: float | None = None,
    ) -> None:
        self.group = group
        self._announce = announce
        self._answered = on_answered
        self._stale_after = stale_after
        self.endpoint = endpoint
        self.config = config
        options = with_security(options, config.credentials, config.tls, config.namespace)
        self.transport = GrpcTransport.create(
            endpoint, options, client_id=client_id, request_timeout=config.request_timeout
        )
        self._verdict = on_orphan
        self._publishing = pb.Publishing()
        self.session = Session(
            self.transport,
            pb.ClientType.PRODUCER,
            self._publishing,
            heartbeat_interval=min(config.heartbeat_interval, 10.0),
            on_orphan=self._on_orphan if on_orphan is not None else None,
        )
        self.log = get_logger("producer", group=group, client_id=self.transport.client_id)
        # Declared topics go in the first settings: the Proxy registers this client as
        # their producer at once, and asks it about their orphaned transactions.
        self._topics: set[str] = set(topics)
        self._publishing.topics.extend(self.session.resource(t) for t in topics)
        self._topics_lock = anyio.Lock()
        self._checks = anyio.CapacityLimiter(config.check_concurrency)
        #: requests waiting for the Proxy at once (``max_in_flight``)
        self._slots = anyio.Semaphore(config.max_in_flight)
        self._closed = False
        self._limit_of: pb.Settings | None = None
        self._limit = config.max_message_size
        self._batcher: GrpcBatcher | None = None
        self._batches: anyio.abc.TaskGroup | None = None
        #: the started producer's parts, unwound by the close (aiorocket._tasks)
        self._stack: AsyncExitStack | None = None
        self._started = False

    @property
    def batcher(self) -> GrpcBatcher | None:
        """The auto-batcher (on unless ``auto_batch=False``), with its request and message
        counts."""
        return self._batcher

    async def start(self) -> None:
        if self._started:
            raise ClientClosedError("a producer can be started once")
        self._started = True
        # One stack (aiorocket._tasks): the session, then the batches' task group; a
        # failed start unwinds it here, the close later, in reverse order either way.
        async with AsyncExitStack() as stack:
            await stack.enter_async_context(self.session)
            if self.config.auto_batch is not False:  # None: on over gRPC (ProducerConfig)
                batches = self._batches = anyio.create_task_group()
                await batches.__aenter__()
                stack.push_async_callback(self._end_batches, batches)
                self._batcher = GrpcBatcher(
                    self._send_batched, batches, max_bytes=self.config.batch_max_bytes,
                    in_flight=self.config.batch_in_flight or GRPC_BATCH_IN_FLIGHT,
                )  # fmt: skip
            self._stack = stack.pop_all()

    async def close(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._closed = True
        stack, self._stack = self._stack, None
        if stack is not None:
            await stack.aclose()

    async def _end_batches(self, batches: anyio.abc.TaskGroup) -> None:
        # Requests in flight carry other callers' messages: let them end, bounded.
        batches.cancel_scope.deadline = anyio.current_time() + self.config.shutdown_timeout
        try:
            await batches.__aexit__(None, None, None)
        finally:
            if self._batcher is not None:
                self._batcher.fail_waiting()

    # -- sending -------------------------------------------------------------------

    def _max_body(self) -> int:
        settings = self.session.settings
        if settings is self._limit_of:  # read once per settings: betterproto is slow
            return self._limit
        limit = self.config.max_message_size
        if settings is not None:
            kind, publishing = pb.oneof(settings, "pub_sub")
            if kind == "publishing" and publishing.max_body_size > 0:
                limit = min(limit, publishing.max_body_size)
        self._limit_of, self._limit = settings, limit
        return limit

    async def declare(self, *topics: str) -> None:
        """Publish ``topics`` in the settings now: the Proxy sends this client the
        check-backs of their half messages (from any sender) from then on."""
        for topic in topics:
            await self._ensure_topic(topic, force=True)

    async def _ensure_topic(self, topic: str, force: bool = False) -> None:
        if topic in self._topics or not (self._announce or force):
            return
        async with self._topics_lock:
            if topic in self._topics:
                return
            self._publishing.topics.append(self.session.resource(topic))
            await self.session.resync_settings()
            self._topics.add(topic)

    def _build(
        self, msg: Message, group: str | None, transactional: bool = False,
        recovery_s: int | None = None,
    ) -> Outgoing:  # fmt: skip
        if self._closed or self.session.closed:
            raise ClientClosedError("producer is closed")
        return prepare(
            msg,
            max_body_size=self._max_body(),
            namespace=self.transport.namespace,
            message_group=group,
            transactional=transactional,
            recovery_s=recovery_s,
        )

    async def acquire(self) -> None:
        """Wait for an in-flight slot (``start_send`` takes it before spawning)."""
        await self._slots.acquire()

    def release(self) -> None:
        self._slots.release()

    @property
    def in_flight(self) -> int:
        return self.config.max_in_flight - self._slots.value

    async def send(
        self,
        msg: Message,
        *,
        timeout: float | None = None,
        sharding_key: object = None,
        held: bool = False,
    ) -> SendResult:
        """Send one message; ``held``: the caller already holds an in-flight slot.

        ``timeout`` (default ``send_timeout``) bounds the whole call, the wait for a slot
        included. When it runs out, or the caller is cancelled, no attempt of the
        message starts any more: not a retry of its own request, nor one of a batch it
        shared (the batch's request runs while any of its callers waits, and a retry
        leaves out the messages whose callers have gone: ``aiorocket._riders``). An
        attempt already under way may still have stored it.
        """
        deadline = self._deadline(timeout)
        group = None if sharding_key is None else str(sharding_key)
        pbm = self._build(msg, group)
        # FIFO, timed and lite messages go alone: the Proxy puts a request's messages in
        # the queue of its first one's message group / lite topic.
        alone = group is not None or msg.deliver_time_ms is not None or msg.lite_topic is not None
        batcher = None if alone else self._batcher

        # The slot taken and given back inline, not in a context manager: on the
        # single-message path each layer around the call was a measurable share.
        if not held:
            await self._take_slot(deadline)
        try:
            if batcher is not None:
                with anyio.move_on_after(deadline - time.monotonic()):
                    return await batcher.send(pbm, len(msg.body) + _OVERHEAD, deadline)
                raise RequestTimeoutError(
                    f"send to {msg.topic}: no answer within {self._budget(timeout)}s"
                )
            (result,) = await self._send([pbm], msg.topic, deadline)
            return result
        finally:
            if not held:
                self._slots.release()

    def _budget(self, timeout: float | None) -> float:
        budget = self.config.send_timeout if timeout is None else timeout
        if not budget > 0:
            raise ConfigError(f"timeout must be positive, got {budget!r}")
        return budget

    def _deadline(self, timeout: float | None) -> float:
        """The ``time.monotonic()`` by which a send with ``timeout`` ends."""
        return time.monotonic() + self._budget(timeout)

    async def _take_slot(self, deadline: float) -> None:
        """An in-flight slot, waited for until ``deadline`` at most.

        A free slot is taken without a timer and without yielding to the event loop
        (``Semaphore.acquire`` yields once even then): the send itself is the
        checkpoint, so that a send costs one pass of the loop, not two."""
        try:
            self._slots.acquire_nowait()
            return
        except anyio.WouldBlock:
            pass
        with anyio.move_on_after(deadline - time.monotonic()) as scope:
            await self._slots.acquire()
        if scope.cancelled_caught:
            raise RequestTimeoutError("no in-flight slot freed up before the send's deadline")

    @asynccontextmanager
    async def _slot(self, deadline: float) -> AsyncIterator[None]:
        await self._take_slot(deadline)
        try:
            yield
        finally:
            self._slots.release()

    async def send_batch(
        self, messages: Sequence[Message], *, timeout: float | None = None,
        sharding_key: object = None,
    ) -> list[SendResult]:  # fmt: skip
        if not messages:
            raise ConfigError("send_batch needs at least one message")
        topic = messages[0].topic
        if any(m.topic != topic for m in messages):
            raise ConfigError("a batch's messages must share one topic")
        if len({m.lite_topic for m in messages}) > 1:
            # The Proxy stores a request in the queue of its first message's lite topic:
            # the others' would wait on the wrong broker.
            raise ConfigError("a batch's lite messages must share one lite topic")
        group = None if sharding_key is None else str(sharding_key)
        deadline = self._deadline(timeout)
        pbms = [self._build(m, group) for m in messages]
        async with self._slot(deadline):
            return await self._send(pbms, topic, deadline)

    async def _send_batched(self, wanted: Wanted, topic: str) -> list[SendResult]:
        pbms, deadline = wanted()
        if not pbms:  # every caller left before the request started
            return []
        return await self._send(pbms, topic, deadline, wanted=wanted)

    async def _send(
        self,
        pbms: list[Outgoing],
        topic: str,
        deadline: float,
        *,
        attempts: int | None = None,
        transactional: bool = False,
        wanted: Wanted | None = None,
    ) -> list[SendResult]:
        """Send ``pbms`` in one request, retried by the server's policy until ``deadline``.

        ``wanted`` (a shared batch) gives, before each retry, the messages whose callers
        still wait and the latest of their deadlines: a retry carries only those (none
        left: nothing is sent) and runs until then.
        """
        if topic not in self._topics:
            await self._ensure_topic(topic)
        total = self.config.retries + 1 if attempts is None else attempts
        request = send_request(encode_message(o) for o in pbms)
        attempt = unreachable = 0
        while True:
            attempt += 1
            if attempt > 1 and wanted is not None:
                still, deadline = wanted()
                if not still:
                    return []
                if len(still) != len(pbms):
                    pbms = still
                    request = send_request(encode_message(o) for o in pbms)
            left = deadline - time.monotonic()
            if left <= 0:
                raise RequestTimeoutError(f"send to {topic}: no answer by its deadline")
            try:
                resp = await self.transport.unary(
                    "SendMessage", request, FastSendResponse,
                    timeout=min(left, self.config.request_timeout),
                )  # fmt: skip
                check_status(resp.status, "SendMessage")
                for entry in resp.entries:
                    check_status(entry.status, "SendMessage")
                if not resp.entries:
                    raise ProxyResponseError(0, "no send result", rpc="SendMessage")
            except RocketMQError as exc:
                # The Proxy unreachable (a restart: refused, reset): it answered nothing,
                # so the attempt does not count; back off until the send's deadline
                # (unless the caller wants no resend: retries=0, a half message).
                resend = attempts is None and self.config.retries > 0
                if resend and isinstance(exc, ProxyUnavailableError):
                    unreachable += 1
                    total += 1
                    step = unreachable
                else:
                    step = attempt - unreachable
                if attempt >= total or not exc.retriable:
                    raise
                pause = backoff_delays(self.session.retry_policy())(step)
                if time.monotonic() + pause >= deadline:
                    raise
                self.log.warning("send_retry", topic=topic, attempt=attempt, error=str(exc))
                await anyio.sleep(pause)
                continue
            return _results(topic, pbms, resp.entries, transactional)

    # -- transactions --------------------------------------------------------------

    async def send_half(
        self, msg: Message, *, timeout: float | None = None, recovery_s: int | None = None
    ) -> SendResult:
        """Send ``msg`` as a transactional half message: one attempt, never resent (as in
        the Java client: a second half message would be a second transaction).
        ``recovery_s``: the broker checks it back no sooner, and refuses a client's end
        after that."""
        deadline = self._deadline(timeout)
        pbm = self._build(msg, None, transactional=True, recovery_s=recovery_s)
        async with self._slot(deadline):
            (result,) = await self._send([pbm], msg.topic, deadline, attempts=1,
                                         transactional=True)  # fmt: skip
        return result

    async def end(
        self, topic: str, msg_id: str, txn_id: str, commit: bool, *, checked: bool = False
    ) -> bool:
        """EndTransaction: commit or roll back (``checked``: answering the Proxy's check).
        A failure is logged (the Proxy will ask again) and gives False. True says only
        that the Proxy took it: it forwards an end one way, so the broker may still refuse
        it (a client's end after the recovery duration) or never get it."""
        req = pb.EndTransactionRequest(
            topic=self.session.resource(topic),
            message_id=msg_id,
            transaction_id=txn_id,
            resolution=(
                pb.TransactionResolution.COMMIT if commit else pb.TransactionResolution.ROLLBACK
            ),
            source=(
                pb.TransactionSource.SOURCE_SERVER_CHECK
                if checked
                else pb.TransactionSource.SOURCE_CLIENT
            ),
        )
        try:
            resp = await self.transport.unary("EndTransaction", req, pb.EndTransactionResponse)
            check_status(resp.status, "EndTransaction")
        except RocketMQError as exc:  # the Proxy will ask the checker instead
            self.log.warning("end_transaction_failed", topic=topic, msg_id=msg_id, error=str(exc))
            return False
        return True

    async def recall(self, topic: str, recall_handle: str) -> str:
        """RecallMessage: withdraw a timer message before its delivery time; returns its id."""
        req = pb.RecallMessageRequest(
            topic=self.session.resource(topic), recall_handle=recall_handle
        )
        resp = await self.transport.unary("RecallMessage", req, pb.RecallMessageResponse)
        check_status(resp.status, "RecallMessage")
        return resp.message_id

    async def _on_orphan(self, cmd: pb.RecoverOrphanedTransactionCommand) -> None:
        if self._verdict is None:
            return
        arrived = anyio.current_time()
        async with self._checks:
            if self._stale_after is not None and anyio.current_time() - arrived > self._stale_after:
                # Answered this late, it might land after the broker's next check pass,
                # which asks again about a copy: let that one be answered instead.
                self.log.warning("transaction_check_dropped_stale", waited=round(
                    anyio.current_time() - arrived, 1))  # fmt: skip
                return
            ext = message_ext(cmd.message, broker_name="")
            try:
                commit = await self._verdict(ext)
            except Exception as exc:
                self.log.warning("transaction_check_failed", msg_id=ext.msg_id, error=str(exc))
                return
            if commit is not None:
                taken = await self.end(ext.topic, ext.msg_id, cmd.transaction_id, commit,
                                       checked=True)  # fmt: skip
                if taken and self._answered is not None:
                    self._answered(ext, commit)


def _results(
    topic: str, pbms: list[Outgoing], entries: list[SendEntry], transactional: bool
) -> list[SendResult]:
    """One result per message. The Proxy stores a batch as one remoting batch and answers
    it with a single entry (its first offset); the messages keep their own ids."""
    if len(entries) == len(pbms):
        pairs = [(m, e, e.offset) for m, e in zip(pbms, entries, strict=True)]
    else:
        pairs = [(m, entries[0], entries[0].offset + i) for i, m in enumerate(pbms)]
    return [
        SendResult(
            status=SendStatus.SEND_OK,
            msg_id=m.message_id,
            queue=MessageQueue(topic, "", -1),
            queue_offset=offset,
            transaction_id=(e.transaction_id or None) if transactional else None,
            recall_handle=e.recall_handle or None,
        )
        for m, e, offset in pairs
    ]
