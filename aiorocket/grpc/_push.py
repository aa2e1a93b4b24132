"""PushConsumer over gRPC: pop consumption driven by the client, handler or ``async for``.

Receivers long-poll the Proxy (``ReceiveMessage``) while the cache has room
(``FlowControl``), and hand each message to the handler (at most ``concurrency``
at once) or to the ``async for`` loop. Settling follows the remoting Consumer:

* success (handler returns None/True/SUCCESS, ``msg.ack()``, the loop asking for the
  next message) → ack, batched per topic (``AckBatcher``);
* failure (handler raises or returns RECONSUME_LATER/False/Reconsume, ``msg.nack()``)
  → ``ChangeInvisibleDuration`` by the server's retry policy (the merged settings'
  backoff for the delivery attempt), so the message comes back after that delay; at the
  policy's max attempts (or ``Reconsume(-1)``) → ``ForwardMessageToDeadLetterQueue``;
* FIFO groups (the Proxy's settings say ``fifo``): one message group at a time in
  arrival order; a failure is retried locally after the backoff, and after max attempts
  the message goes to the DLQ, so the group moves on;
* cancellation leaves a message unsettled: it becomes visible again after its
  invisible duration.

Closing drains: receivers stop, in-flight handlers get ``drain_timeout`` to finish,
messages never handed out are made visible again at once, queued acks are sent, then
the session ends. Nothing is lost: an unsettled message is redelivered.
"""

from __future__ import annotations

import collections
import math
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from datetime import timedelta
from types import TracebackType

import anyio
import anyio.abc
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from aiorocket._failure_log import handler_failed, message_dead_lettered
from aiorocket._log import get_logger
from aiorocket.consumer.message import ConsumerMessage
from aiorocket.consumer.results import HandlerResult, failure_delay_level
from aiorocket.errors import ClientClosedError, ConfigError, RocketMQError
from aiorocket.grpc import _pb as pb
from aiorocket.grpc._acks import AckBatcher
from aiorocket.grpc._flow import FlowControl
from aiorocket.grpc._push_message import PopMessage, pop_message
from aiorocket.grpc._session import backoff_delays, ensure_asyncio
from aiorocket.grpc._simple import MAX_BATCH, SimpleConsumer
from aiorocket.grpc._transport import GrpcOptions, check_status

__all__ = ["Handler", "PushConsumer"]

Handler = Callable[[ConsumerMessage], Awaitable[HandlerResult]]


class _PushSession(SimpleConsumer):
    client_type = pb.ClientType.PUSH_CONSUMER


class PushConsumer:
    """Consumes a group's messages through a Proxy, pushing them to a handler or loop.

    ```python
    async def handle(msg: ConsumerMessage) -> None: ...
    async with PushConsumer("g", "127.0.0.1:8081", {"orders": "*"}, handle):
        await anyio.sleep_forever()
    ```

    or, without a handler, ``async for msg in consumer:`` (the body's success acks).

    Parameters
    ----------
    group, endpoint, subscriptions:
        the consumer group, the Proxy's ``host:port``, topic → tag expression.
    handler:
        ``async def handler(msg) -> HandlerResult``; ``None`` for ``async for``.
    concurrency:
        handlers running at once (FIFO: message groups handled at once).
    max_cache_count, max_cache_bytes:
        unsettled messages (and their body bytes) held before receiving pauses.
    invisible_duration:
        seconds a received message stays invisible to the group (the Proxy's minimum is
        10 s); one not settled by then is delivered again.
    batch_size:
        messages asked for per receive (1-32); ``receivers`` receives run at once.
    max_attempts:
        caps the server policy's max delivery attempts (``None``: the server's).
    drain_timeout:
        seconds in-flight handlers get to finish when closing.
    """

    def __init__(
        self,
        group: str,
        endpoint: str,
        subscriptions: Mapping[str, str],
        handler: Handler | None = None,
        *,
        concurrency: int = 16,
        max_cache_count: int = 1024,
        max_cache_bytes: int = 64 * 1024 * 1024,
        invisible_duration: float = 30.0,
        batch_size: int = MAX_BATCH,
        receivers: int = 2,
        await_duration: float = 20.0,
        request_timeout: float = 3.0,
        ack_delay: float = 0.005,
        max_attempts: int | None = None,
        drain_timeout: float = 10.0,
        options: GrpcOptions | None = None,
        client_id: str | None = None,
    ) -> None:
        limits = {"concurrency": concurrency, "max_cache_count": max_cache_count,
                  "max_cache_bytes": max_cache_bytes, "receivers": receivers}  # fmt: skip
        for name, value in limits.items():
            if value < 1:
                raise ConfigError(f"{name} must be at least 1, got {value!r}")
        if not 1 <= batch_size <= MAX_BATCH:
            raise ConfigError(f"batch_size must be 1..{MAX_BATCH}, got {batch_size!r}")
        if max_attempts is not None and max_attempts < 1:
            raise ConfigError(f"max_attempts must be at least 1, got {max_attempts!r}")
        self.simple = _PushSession(
            group, endpoint, subscriptions, await_duration=await_duration,
            request_timeout=request_timeout, options=options, client_id=client_id,
        )  # fmt: skip
        self.group = group
        self.handler = handler
        self.concurrency = concurrency
        self.invisible_duration = invisible_duration
        self.batch_size = min(batch_size, max_cache_count)
        self.receivers = receivers
        self.drain_timeout = drain_timeout
        self._max_attempts_cap = max_attempts
        self.flow = FlowControl(max_cache_count, max_cache_bytes)
        self.acks = AckBatcher(self.simple, ack_delay)
        self.log = get_logger("grpc.push", group=group, endpoint=endpoint)
        self.fifo = False
        self.max_attempts = max_attempts or 17
        self._delay: Callable[[int], float] = backoff_delays(None)
        self._limiter = anyio.CapacityLimiter(concurrency)
        self._groups: dict[str, collections.deque[PopMessage]] = {}
        send, recv = anyio.create_memory_object_stream[PopMessage](math.inf)
        self._send: MemoryObjectSendStream[PopMessage] = send
        self._recv: MemoryObjectReceiveStream[PopMessage] = recv
        # Handlers (not FIFO): ``concurrency`` workers take messages from here. A task
        # per message cost more than the handler's own work (benchmarks/README.md, gRPC).
        jobs_send, jobs_recv = anyio.create_memory_object_stream[PopMessage](math.inf)
        self._jobs_send: MemoryObjectSendStream[PopMessage] = jobs_send
        self._jobs_recv: MemoryObjectReceiveStream[PopMessage] = jobs_recv
        self._inflight = 0
        #: set when the last handler returns; made only when the close waits for it
        self._idle: anyio.Event | None = None
        self._bg: anyio.abc.TaskGroup | None = None
        self._work: anyio.abc.TaskGroup | None = None
        self._receiving: anyio.abc.TaskGroup | None = None
        self._started = False
        self._closed = False

    # -- lifecycle -----------------------------------------------------------------

    async def __aenter__(self) -> PushConsumer:
        ensure_asyncio("PushConsumer")
        if self._started:
            raise ClientClosedError("a PushConsumer can be started once")
        self._started = True
        await self.simple.__aenter__()
        try:
            self._apply_settings()
            self._bg = anyio.create_task_group()
            await self._bg.__aenter__()
            self._bg.start_soon(self.acks.run)
            self._work = anyio.create_task_group()
            await self._work.__aenter__()
            if self.handler is not None and not self.fifo:
                for _ in range(self.concurrency):
                    self._work.start_soon(self._worker)
            self._receiving = anyio.create_task_group()
            await self._receiving.__aenter__()
            for _ in range(self.receivers):
                self._receiving.start_soon(self._receive_loop)
        except BaseException:
            await self._close()
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._close()

    def _apply_settings(self) -> None:
        """The Proxy's merged settings: FIFO, retry policy (backoff, max attempts)."""
        sub = self.simple.session.subscription()
        self.fifo = bool(sub is not None and sub.fifo)
        policy = self.simple.session.retry_policy()
        self._delay = backoff_delays(policy)
        server_max = policy.max_attempts if policy is not None and policy.max_attempts else 17
        self.max_attempts = min(server_max, self._max_attempts_cap or server_max)
        self.log.info("push_consumer_started", fifo=self.fifo, max_attempts=self.max_attempts)

    async def _close(self) -> None:
        if self._closed:
            return
        self._closed = True
        # The task groups were entered in __aenter__: they are exited here in reverse
        # order and outside any new cancel scope; the network steps in between are
        # shielded so a cancelled close still releases and acks what it holds.
        try:
            if self._receiving is not None:
                self._receiving.cancel_scope.cancel()
                await self._receiving.__aexit__(None, None, None)
            self._send.close()
            unstarted = _take_all(self._jobs_recv)  # never handed out: released below
            self._jobs_send.close()  # the workers end after their current message
            if self._work is not None:
                with anyio.move_on_after(self.drain_timeout, shield=True):
                    while self._inflight:
                        self._idle = anyio.Event()
                        await self._idle.wait()
                self._work.cancel_scope.cancel()
                await self._work.__aexit__(None, None, None)
            with anyio.CancelScope(shield=True):
                await self._release_unhandled(unstarted)
                await self.acks.flush()
            if self._bg is not None:
                self._bg.cancel_scope.cancel()
                await self._bg.__aexit__(None, None, None)
        finally:
            await self.simple.__aexit__(None, None, None)

    async def _release_unhandled(self, unstarted: list[PopMessage]) -> None:
        """Make what was received but never handed out visible to the group at once."""
        left = list(unstarted)
        for queue in self._groups.values():
            left += [m for m in queue if not m._settled]
        self._groups.clear()
        left += _take_all(self._recv)
        with anyio.move_on_after(self.simple.transport.request_timeout * 2):
            for msg in left:
                if not msg._settled:
                    await self._change_invisible(msg, 0.0)

    # -- receiving -----------------------------------------------------------------

    async def _receive_loop(self) -> None:
        failures = 0
        while True:
            await self.flow.wait_room(self.batch_size)
            try:
                batch = await self.simple.receive(self.batch_size, self.invisible_duration)
            except RocketMQError as err:
                failures += 1
                self.log.warning("receive_failed", error=str(err), failures=failures)
                await anyio.sleep(min(10.0, 0.2 * 2 ** min(failures, 6)))
                continue
            failures = 0
            for received in batch:
                self._dispatch(pop_message(received))

    def _dispatch(self, msg: PopMessage) -> None:
        msg._settler = self
        self.flow.add(len(msg.body))
        if self.handler is None:
            self._send.send_nowait(msg)
            return
        assert self._work is not None
        if self.fifo:
            key = msg.message_group or ""
            queue = self._groups.get(key)
            if queue is None:
                self._groups[key] = collections.deque([msg])
                self._work.start_soon(self._run_group, key)
            else:
                queue.append(msg)
        else:
            self._jobs_send.send_nowait(msg)

    # -- handling ------------------------------------------------------------------

    def _begin(self) -> None:
        self._inflight += 1

    def _end(self) -> None:
        self._inflight -= 1
        if not self._inflight and self._idle is not None:
            self._idle.set()

    async def _call(self, msg: PopMessage) -> int | None:
        """The handler's verdict: None for success, else the delay level."""
        assert self.handler is not None
        try:
            result = await self.handler(msg)
            level = failure_delay_level(result)
            error = f"handler returned {result!r}"
        except Exception as err:  # a handler failure is a nack, never a crash
            handler_failed(self.log, err, attempt=msg.delivery_attempt, topic=msg.topic,
                           msg_id=msg.message_id)  # fmt: skip
            level, error = 0, repr(err)
        if level is not None and (level == -1 or msg.delivery_attempt >= self.max_attempts):
            message_dead_lettered(self.log, topic=msg.topic, msg_id=msg.message_id,
                                  attempts=msg.delivery_attempt, error=error)  # fmt: skip
        return level

    async def _worker(self) -> None:
        """One of ``concurrency`` handler workers (not FIFO), until the close."""
        while True:
            try:
                msg = await self._jobs_recv.receive()
            except (anyio.EndOfStream, anyio.ClosedResourceError):
                return
            self._begin()
            try:
                level = await self._call(msg)
                if not msg._held:
                    await self.settle(msg, level)
            finally:
                self._end()

    async def _run_group(self, key: str) -> None:
        """One FIFO message group: in order, local retries, then the DLQ."""
        queue = self._groups[key]
        async with self._limiter:
            while queue:
                msg = queue[0]
                self._begin()
                try:
                    while True:
                        level = await self._call(msg)
                        if msg._held or level is None or level == -1:
                            break
                        if msg.delivery_attempt >= self.max_attempts:
                            level = -1
                            break
                        await anyio.sleep(self._delay(msg.delivery_attempt))
                        msg.delivery_attempt += 1
                        msg.reconsume_times += 1
                    if not msg._held:
                        await self.settle(msg, level)
                finally:
                    self._end()
                queue.popleft()
        del self._groups[key]

    # -- settling (ConsumerMessage's Settler) --------------------------------------

    async def settle(self, msg: ConsumerMessage, delay_level: int | None) -> None:
        if msg._settled or not isinstance(msg, PopMessage):
            return
        msg._settled = True
        self.flow.remove(len(msg.body))
        if delay_level is None:
            self.acks.add(msg)
            return
        try:
            if delay_level == -1 or msg.delivery_attempt >= self.max_attempts:
                await self._forward_to_dlq(msg)
            else:
                await self._change_invisible(msg, self._delay(msg.delivery_attempt))
        except RocketMQError as err:
            # The message comes back when its invisible duration ends: nothing is lost.
            self.log.warning("nack_failed", topic=msg.topic, id=msg.message_id, error=str(err))

    async def _change_invisible(self, msg: PopMessage, seconds: float) -> None:
        s = self.simple.session
        req = pb.ChangeInvisibleDurationRequest(
            group=s.resource(self.group), topic=s.resource(msg.topic),
            receipt_handle=msg.receipt_handle, invisible_duration=timedelta(seconds=seconds),
            message_id=msg.message_id,
        )  # fmt: skip
        resp = await self.simple.transport.unary(
            "ChangeInvisibleDuration", req, pb.ChangeInvisibleDurationResponse
        )
        check_status(resp.status, "ChangeInvisibleDuration")

    async def _forward_to_dlq(self, msg: PopMessage) -> None:
        s = self.simple.session
        req = pb.ForwardMessageToDeadLetterQueueRequest(
            group=s.resource(self.group), topic=s.resource(msg.topic),
            receipt_handle=msg.receipt_handle, message_id=msg.message_id,
            delivery_attempt=msg.delivery_attempt, max_delivery_attempts=self.max_attempts,
        )  # fmt: skip
        resp = await self.simple.transport.unary(
            "ForwardMessageToDeadLetterQueue", req, pb.ForwardMessageToDeadLetterQueueResponse
        )
        check_status(resp.status, "ForwardMessageToDeadLetterQueue")
        self.log.info("forwarded_to_dlq", topic=msg.topic, id=msg.message_id,
                      attempt=msg.delivery_attempt)  # fmt: skip

    # -- async for -----------------------------------------------------------------

    def __aiter__(self) -> AsyncIterator[ConsumerMessage]:
        return self.messages()

    def messages(self) -> AsyncGenerator[ConsumerMessage, None]:
        """Yield messages one by one; asking for the next one acks the last (see the
        module docstring for settling by hand)."""
        if self.handler is not None:
            raise ConfigError("this PushConsumer has a handler; iterate one without")
        if not self._started or self._closed:
            raise ClientClosedError("PushConsumer is not started or closed")
        return self._messages()

    @property
    def started(self) -> bool:
        return self._started and not self._closed

    async def _messages(self) -> AsyncGenerator[ConsumerMessage, None]:
        previous: PopMessage | None = None
        try:
            while True:
                if previous is not None and not previous._held:
                    await self.settle(previous, None)  # asking for the next acks the last
                previous = None
                try:
                    msg = await self._recv.receive()
                except (anyio.EndOfStream, anyio.ClosedResourceError):
                    return
                previous = msg
                yield msg
        finally:
            # The loop ended on the last message (break or raise): a failure by the policy.
            if previous is not None and not previous._held and not previous._settled:
                with anyio.CancelScope(shield=True):
                    await self.settle(previous, 0)


def _take_all(stream: MemoryObjectReceiveStream[PopMessage]) -> list[PopMessage]:
    """What ``stream`` holds now, without waiting."""
    out: list[PopMessage] = []
    while True:
        try:
            out.append(stream.receive_nowait())
        except (anyio.WouldBlock, anyio.EndOfStream, anyio.ClosedResourceError):
            return out
