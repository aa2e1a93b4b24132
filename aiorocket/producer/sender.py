"""The send core: in-flight slots, queue choice, attempts, retries and fault records.

Every request to a broker holds one of ``max_in_flight`` slots until its answer comes
(or, oneway, until it is written). A send has one deadline covering the wait for a slot
and every attempt. A failed attempt (connection lost, no answer in time, or a broker
answer the Java client retries on) is recorded in the fault table and retried on a
queue of another broker while attempts and time remain.

An unpinned send whose broker sits on it (no answer within a multiple of the broker's
recent latency) while other brokers answer is abandoned there and retried on another
broker, which is then preferred (``aiorocket.producer.stall``); the last attempt of a
send is never abandoned so (it waits for its answer).

Sends pinned to a queue (selector, sharding key) must not move: they are retried, on
the same queue after a short pause, only after a broker answer that says the message
was not stored (busy, not available, ...); a lost connection or a timeout, after which
the message may or may not be stored, ends them at once (the Java client does not
retry them at all).
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import anyio

from aiorocket._loop import capture
from aiorocket.client.broker import DEFAULT_TOPIC, BrokerClient, send_answer, send_request
from aiorocket.client.results import SendResult
from aiorocket.errors import (
    AccessDeniedError,
    BrokerResponseError,
    BrokerStalledError,
    ClientClosedError,
    ConfigError,
    ConnectionClosedError,
    NoRouteError,
    RequestTimeoutError,
    RocketMQError,
    TopicNotExistError,
)
from aiorocket.message import Message, MessageQueue
from aiorocket.namespace import unwrap_queue, wrap, wrap_queue
from aiorocket.producer.config import ProducerConfig
from aiorocket.producer.fault import LatencyFaultTolerance
from aiorocket.producer.membership import Membership
from aiorocket.producer.prepare import Outgoing
from aiorocket.producer.routes import PublishInfo, PublishRoutes
from aiorocket.producer.selectors import (
    QueueSelector,
    check_selected,
    hash_selector,
    lite_selector,
)
from aiorocket.producer.stall import STALL_ISOLATION, StallWatch
from aiorocket.protocol.features import feature_of_properties
from aiorocket.remoting.connection import WireTiming

__all__ = [
    "PINNED_RETRY_PAUSE",
    "Choose",
    "Plan",
    "Retry",
    "Sender",
    "take_slot",
]

#: Picks the queue of an attempt; the second argument is the broker to avoid, if any.
Choose = Callable[[PublishInfo, "str | None"], MessageQueue]
#: What the next attempt of a shared request sends, and by when; None: nobody waits.
Retry = Callable[[], "tuple[Outgoing, float] | None"]
#: Pause before retrying a pinned send on its busy broker, times the attempt number.
PINNED_RETRY_PAUSE = 0.05


@dataclass(frozen=True, slots=True)
class Plan:
    """How a send picks its queues: ``choose`` per attempt, at most ``attempts`` times."""

    choose: Choose
    attempts: int
    #: the queue is fixed by a selector: never move, retry only definite refusals.
    pinned: bool = False


def _failed(last: RocketMQError, unsure: RocketMQError) -> RocketMQError:
    """The error of a send whose last attempt was refused (or found no route) after an
    earlier one that may have stored the message (``unsure``): that one's type (a
    stall, a closed connection, no answer: "may be stored"), naming both, so that the
    refusal does not read as "not stored"."""
    return type(unsure)(f"{unsure} (that attempt may still store the message; the last "
                        f"attempt failed: {last})")  # fmt: skip


def _ms_since(started: float) -> float:
    return (time.monotonic() - started) * 1000


def _broker_ms(timing: WireTiming, started: float) -> float:
    """An answered attempt's latency for the fault table: the broker's time as the client
    can see it, from the request's write to its answer's read (``WireTiming``), not until
    the sending task resumed: on a busy event loop (a thousand sends in flight) the
    answers wait there hundreds of ms, which is not the broker's doing. Java measures
    around its blocking call, whose thread wakes when the answer is read. Failures
    (an error answer, a timeout, a lost connection) still count the whole attempt."""
    took = timing.ms()
    return _ms_since(started) if took is None else took


async def _quietly(refresh: Awaitable[object]) -> None:
    with contextlib.suppress(RocketMQError):
        await refresh


async def take_slot(
    slots: anyio.Semaphore, deadline: float, now: Callable[[], float], what: str
) -> None:
    """One of ``slots`` by ``deadline``, else ``RequestTimeoutError`` (``what``: how many
    of what the slots count, for its message)."""
    # Fast path without a checkpoint: a caller spawning many sends then enqueues all
    # of them in one event-loop pass, and the connection writes them in one syscall.
    try:
        slots.acquire_nowait()
        return
    except anyio.WouldBlock:
        pass
    with anyio.move_on_after(deadline - now()):
        await slots.acquire()
        return
    raise RequestTimeoutError(f"no in-flight slot freed up in time ({what})")


class Sender:
    def __init__(
        self,
        broker: BrokerClient,
        routes: PublishRoutes,
        membership: Membership,
        *,
        group: str,
        config: ProducerConfig,
        fault: LatencyFaultTolerance,
        log: Any,
    ) -> None:
        self._broker = broker
        self.routes = routes
        self._membership = membership
        self._group = group
        self._config = config
        self._fault = fault
        self._log = log
        self._slots = anyio.Semaphore(config.max_in_flight)
        self._default_topic = config.create_topic_key or DEFAULT_TOPIC
        # Created inside the producer's event loop: its clock, without anyio's lookup.
        self.now = capture().now
        #: stalled-broker detection of unpinned sends (``stall_retry``)
        self.stall = StallWatch(self.now, config.send_timeout) if config.stall_retry else None
        # The plan of an unpinned send depends on the configuration only: built once, not
        # a closure per send (the single-message path's CPU, issue 43 goal 6).
        consulted = fault if config.latency_fault_tolerance else None

        def round_robin(info: PublishInfo, avoid: str | None) -> MessageQueue:
            return info.round_robin.select(info.queues, avoid=avoid, fault=consulted)

        self._round_robin = Plan(round_robin, 1 + config.retries)
        #: the same with one attempt: a half message (``RemotingProducer._send_half``)
        self.round_robin_once = Plan(round_robin, 1)

    # -- slots and deadlines ---------------------------------------------------------

    @property
    def in_flight(self) -> int:
        return self._config.max_in_flight - self._slots.value

    def deadline(self, timeout: float | None) -> float:
        timeout = self._config.send_timeout if timeout is None else timeout
        if not timeout > 0:
            raise ConfigError(f"timeout must be positive, got {timeout!r}")
        return self.now() + timeout

    def acquire_nowait(self) -> bool:
        """A slot if one is free now (``acquire``'s fast path without its two
        coroutines: a plain send takes a slot a message); False: ``acquire`` it."""
        try:
            self._slots.acquire_nowait()
        except anyio.WouldBlock:
            return False
        return True

    async def acquire(self, deadline: float) -> None:
        pending = f"{self._config.max_in_flight} requests pending"
        await take_slot(self._slots, deadline, self.now, pending)

    def release(self) -> None:
        self._slots.release()

    # -- queue choice ----------------------------------------------------------------

    def plan(
        self, msg: Message, sharding_key: object, selector: QueueSelector | None, arg: object
    ) -> Plan:
        """How to pick each attempt's queue, and how many attempts a send gets."""
        if sharding_key is not None and selector is not None:
            raise ConfigError("pass either sharding_key or selector, not both")
        if sharding_key is not None:
            selector, arg = hash_selector, sharding_key
        if msg.lite_topic is not None:
            if selector is not None:
                raise ConfigError(
                    "a lite message goes to its lite topic's queue: no sharding_key or selector"
                )
            selector = lite_selector
        attempts = 1 + self._config.retries
        if selector is not None:
            user_selector = selector

            namespace = self._config.namespace

            def by_selector(info: PublishInfo, avoid: str | None) -> MessageQueue:
                if not namespace:
                    return check_selected(user_selector(info.queues, msg, arg), info.queues)
                # The selector sees the queues as the application names them.
                queues = [unwrap_queue(namespace, q) for q in info.queues]
                chosen = check_selected(user_selector(queues, msg, arg), queues)
                return wrap_queue(namespace, chosen)

            return Plan(by_selector, attempts, pinned=True)
        return self._round_robin

    async def addr_of(self, queue: MessageQueue) -> str:
        info = await self.routes.get(wrap(self._config.namespace, queue.topic))
        return self._addr(info, queue.broker_name)

    def _addr(self, info: PublishInfo, broker_name: str) -> str:
        addr = info.broker_addr(broker_name)
        if addr is None:
            raise NoRouteError(
                f"broker {broker_name!r} of topic {info.route.topic!r} has no master"
            )
        return addr

    # -- sending ---------------------------------------------------------------------

    async def send(
        self, out: Outgoing, plan: Plan, deadline: float, *, batch: bool = False,
        retry: Retry | None = None, slot: bool = False,
    ) -> SendResult:  # fmt: skip
        """Send (holding a slot already, or ``slot``) with up to ``plan.attempts`` attempts
        by ``deadline``.

        ``retry`` (a request shared by several callers) gives what each retry sends and
        its deadline, or None when no caller waits any more (no retry then).

        ``slot``: take an in-flight slot first (by ``deadline``, as ``acquire``) and give
        it back at the end, for a caller that would otherwise be a coroutine around this
        one only for that (``ProducerEngine.send``: benchmarks/README.md, "The plain
        send, round 1").
        """
        if slot and not self.acquire_nowait():
            await self.acquire(deadline)  # cancelled or timed out here: no slot taken
        try:
            avoid: str | None = None
            last_error: RocketMQError | None = None
            #: the first attempt after which the message may be stored (abandoned at a stall,
            #: its connection closed, no answer): a later refusal must not hide it
            unsure: RocketMQError | None = None
            tried: list[str] = []
            for attempt in range(plan.attempts):
                if attempt and retry is not None:
                    again = retry()
                    if again is None:
                        break
                    out, deadline = again
                remaining = deadline - self.now()
                if remaining <= 0:
                    raise RequestTimeoutError(
                        f"send to {out.topic!r} did not succeed within its timeout "
                        f"(brokers tried: {tried})"
                    ) from last_error
                info = self.routes.cached(out.topic)
                if info is None:
                    try:
                        info = await self.routes.get(out.topic)
                    except RocketMQError as exc:  # as an attempt's refusal, below
                        if unsure is None:
                            raise
                        raise _failed(exc, unsure) from exc
                mq = plan.choose(info, avoid)
                addr = info.broker_addr(mq.broker_name)
                if addr is None:
                    last_error = NoRouteError(f"broker {mq.broker_name!r} has no master")
                    avoid = mq.broker_name
                    await _quietly(self.routes.refresh(out.topic))
                    continue
                self._membership.saw(addr)
                tried.append(mq.broker_name)
                # Only an attempt that another one can replace is abandoned at a stall: the
                # last one waits for its answer (abandoned, it would be reported failed while
                # the slow broker may still store it).
                last = attempt + 1 >= plan.attempts
                watch = None if plan.pinned or last else self.stall
                started = time.monotonic()
                timing = WireTiming()
                try:
                    # ``BrokerClient.send_message``, its steps inline: two coroutines a send
                    # less. The request's own deadline bounds the wait for the answer.
                    broker = self._broker
                    feature = feature_of_properties(out.properties)
                    if feature is not None:
                        await broker.require(addr, feature, mq)
                    cmd = send_request(
                        mq, out.body, out.properties, self._group, out.flag, out.sys_flag, batch,
                        self._default_topic, self._config.default_topic_queue_nums,
                    )  # fmt: skip
                    stall = None if watch is None else watch.check(mq.broker_name, deadline)
                    conn = broker.pool.live(addr)
                    if conn is None:
                        resp = await broker.send_command(addr, cmd, remaining, stall, timing)
                    else:
                        resp = await conn.request(cmd, remaining, stall, timing)
                    result = send_answer(resp, cmd.code, mq, out.msg_id, out.sys_flag)
                except BrokerStalledError as exc:  # others answer: isolate it, try another
                    self._fault.isolate(mq.broker_name, _ms_since(started), STALL_ISOLATION)
                    assert watch is not None
                    watch.stalled(mq.broker_name)
                    last_error = exc
                    unsure = unsure or exc
                except BrokerResponseError as exc:
                    self._fault.record(mq.broker_name, _ms_since(started), failed=True)
                    # Another broker may take it: a retriable answer, or NO_PERMISSION (as in
                    # Java: a broker whose write permission is off answers it too).
                    if not (exc.retriable or isinstance(exc, AccessDeniedError)):
                        if unsure is None:
                            raise
                        raise _failed(exc, unsure) from exc
                    last_error = exc
                    if isinstance(exc, TopicNotExistError):
                        await _quietly(self.routes.refresh(out.topic))
                except ClientClosedError as exc:
                    # Closed under the send (the producer's close): an earlier attempt that
                    # may have stored the message must not read as "not stored" (fault
                    # simulator, producer_sends_full 90183: a request written to a slow
                    # broker, the close, the retry refused by the closed pool, then stored).
                    if unsure is None:
                        raise
                    raise _failed(exc, unsure) from exc
                except (ConnectionClosedError, TimeoutError) as exc:
                    self._fault.record(mq.broker_name, _ms_since(started), failed=True)
                    if isinstance(exc, RocketMQError):
                        last_error = exc
                    else:
                        last_error = RequestTimeoutError(
                            f"send to {addr} got no answer in {remaining:.3f}s"
                        )
                    unsure = unsure or last_error
                    if plan.pinned:  # it may have been stored: retrying could reorder
                        if last_error is exc:
                            raise
                        raise last_error from exc
                else:
                    self._fault.record(mq.broker_name, _broker_ms(timing, started))
                    # The stall bound is checked against wall time since the write was
                    # queued: its baseline stays the same measure.
                    took = _ms_since(started)
                    if self.stall is not None and not plan.pinned:  # the last attempt's too
                        self.stall.answered(mq.broker_name, took / 1000)
                    if self._config.namespace:
                        queue = unwrap_queue(self._config.namespace, result.queue)
                        return dataclasses.replace(result, queue=queue)
                    return result
                avoid = mq.broker_name
                self._log.warning(
                    "send_failed", topic=out.topic, broker=mq.broker_name, addr=addr,
                    attempt=attempt + 1, attempts=plan.attempts,
                    avoid_for_s=round(self._fault.unavailable_for(mq.broker_name), 3),
                    error=str(last_error),
                )  # fmt: skip
                if plan.pinned and attempt + 1 < plan.attempts:
                    pause = min(PINNED_RETRY_PAUSE * (attempt + 1), deadline - self.now())
                    await anyio.sleep(max(pause, 0))
            assert last_error is not None
            if unsure is None or isinstance(
                last_error, (RequestTimeoutError, ConnectionClosedError)
            ):
                raise last_error  # the last attempt's own error says "may be stored" already
            raise _failed(last_error, unsure) from last_error
        finally:
            if slot:
                self.release()

    async def send_oneway(self, out: Outgoing, plan: Plan, deadline: float) -> None:
        """One oneway attempt (holding a slot already): done once the request is written."""
        info = await self.routes.get(out.topic)
        mq = plan.choose(info, None)
        addr = self._addr(info, mq.broker_name)
        self._membership.saw(addr)
        started = time.monotonic()
        try:
            with anyio.fail_after(max(deadline - self.now(), 0)):
                await self._broker.send_message_oneway(
                    addr, mq, out.body, out.properties, producer_group=self._group,
                    flag=out.flag, sys_flag=out.sys_flag, default_topic=self._default_topic,
                    default_topic_queue_nums=self._config.default_topic_queue_nums,
                )  # fmt: skip
        except (ConnectionClosedError, TimeoutError) as exc:
            self._fault.record(mq.broker_name, _ms_since(started), failed=True)
            if isinstance(exc, RocketMQError):
                raise
            raise RequestTimeoutError(f"oneway send to {addr} timed out") from None
        self._fault.record(mq.broker_name, _ms_since(started))
