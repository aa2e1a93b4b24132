"""The remoting ``PopSource``: POP_MESSAGE straight from the brokers (no Proxy).

What the Java push consumer does in POP mode (``clientRebalance=false``): every member
long-polls every broker of its topics for any of their queues (``queueId=-1``); the
broker spreads the messages, so more members than queues all receive, and a member
joining or leaving stops nobody (there is no rebalance). Messages stay invisible to the
group while handled: a broker has no auto-renew, so the client's renewer renews them
(ChangeInvisibleTime, with the new check point built as ``aiorocket.client.pop``
explains; apache/rocketmq#9583 does not apply).

Retries and the dead-letter queue, as the Java POP consumer and the broker do them: a
failed message's invisible time becomes the pop delay of its attempt (10 s, 30 s,
1 min, ... 2 h), then the broker redelivers it from the group's pop retry topic with
``reconsume_times`` + 1; at the last attempt (the group's ``retryMaxTimes``, capped by
``max_reconsume_times``) the client sends it to ``%DLQ%<group>`` (CONSUMER_SEND_MSG_BACK
with delay level -1) and acks it.

A namespace (``namespace="ns"``): the group and subscriptions arrive wrapped
(``ns%group``, ``ns%topic``), so pops, acks and the broker's pop retry topic
(``%RETRY%ns%group_ns%topic``, built by the broker from those names) and the dead-letter
queue (``%DLQ%ns%group``) are the namespace's, as with the Java client. The application
sees its own topic names: a popped message's topic is unwrapped here and wrapped again on
its way back to the broker.

A pop the broker answers at once with nothing (POLLING_FULL: its long-poll queue is full;
or an empty answer well before the poll time) is followed by a pause before the next
pop of that broker: 0.1 s, doubling up to 3 s (Java waits 3 s after POLLING_FULL),
back to none after an answer with messages or a poll that was held; the pause is the
receive's, so the close cancels it. Without it every receive loop spun against the
broker that had just said it was overloaded (8,111 pops/s from one consumer).

A record that cannot be decoded (a body flagged compressed that does not inflate, say)
no longer fails its whole pop: the other messages are handed on, and the record is
dead-lettered (or skipped) as the pull path does it (``aiorocket.consumer.undecodable``)
and then acked, by the source's background task (``run``), so that the good messages
wait for neither. A dead-lettering that cannot reach the broker leaves the record: it
comes back after its invisible time. An ack the broker refused (retriable) is tried
again every ``UNDECODABLE_ACK_RETRY`` s; the close tries the acks still owed once more,
then makes visible again at once what is left unsettled (owed acks, records not
dead-lettered yet): a second copy in the DLQ rather than a record held past the close.

Orderly (``orderly=True``): pops ask for order (``order=true``): the broker hands out a
queue's messages to one member at a time, the next ones only once those are acked (its
order lock per queue and group); each queue is delivered in order, one at a time.
"""

from __future__ import annotations

import math
import time
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from functools import partial
from typing import TypeVar

import anyio

from aiorocket.client.instance import ClientInstance
from aiorocket.client.pop import (
    INIT_MODE_FIRST,
    INIT_MODE_LAST,
    CheckPoint,
    PoppedUndecodable,
    PopRequests,
    PopResult,
    group_retry_max_times,
)
from aiorocket.client.trace import RemotingTraceSender
from aiorocket.consumer.config import ConsumeFromWhere
from aiorocket.consumer.membership import Membership
from aiorocket.consumer.pop.source import AckRefusals, Early
from aiorocket.consumer.state import ConsumerState
from aiorocket.consumer.undecodable import dead_letter_record, report_undecodable
from aiorocket.errors import (
    BrokerResponseError,
    ConnectionClosedError,
    NoRouteError,
    RequestTimeoutError,
    RocketMQError,
)
from aiorocket.message import PROPERTY_LITE_TOPIC
from aiorocket.namespace import unwrap, wrap
from aiorocket.protocol.features import POP
from aiorocket.received import ConsumerMessage, PopMessage

__all__ = ["POP_DELAYS", "RemotingSource"]

T = TypeVar("T")

#: the pop retry delays by attempt (the Java client's popDelayLevel)
POP_DELAYS = (10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800, 3600, 7200)
#: the broker's default retryMaxTimes of a group
_DEFAULT_RETRY_MAX = 16
#: the first and the longest pause after a pop answered at once with nothing (seconds)
IDLE_BACKOFF, MAX_IDLE_BACKOFF = 0.1, 3.0
#: seconds between the tries of an undecodable record's ack the broker refused
UNDECODABLE_ACK_RETRY = 1.0

#: an ack owed: (address, topic, receipt handle, lite topic)
_Owed = tuple[str, str, str, str | None]


class RemotingSource:
    """Pops one group's messages from the brokers of its topics.

    Parameters
    ----------
    state:
        The consumer's shared state (group, subscriptions, configuration, logger).
    namesrv:
        NameServer addresses.
    client_id:
        This client's id (default: made by the client).
    """

    server_renews = False
    dead_letter_settles = False
    #: what the brokers must have (checked at the start: each pop would be refused)
    feature = POP

    def __init__(
        self, state: ConsumerState, namesrv: Sequence[str], *, client_id: str | None
    ) -> None:
        cfg = state.config
        self.state = state
        self.group = state.group
        self.fifo = cfg.orderly
        self.server_max_attempts = 0
        self._namespace = cfg.namespace
        self.client = ClientInstance(
            namesrv, client_id=client_id, request_timeout=cfg.request_timeout,
            route_refresh_interval=cfg.route_refresh_interval, credentials=cfg.credentials,
            tls=cfg.tls, address_map=cfg.address_map,
        )  # fmt: skip
        self.requests = PopRequests(self.client.broker)
        self._membership = Membership(
            state, self.client.client_id, self.client.broker, self.client.namesrv
        )
        self._init_mode = (
            INIT_MODE_FIRST
            if cfg.consume_from_where is ConsumeFromWhere.FIRST_OFFSET
            else INIT_MODE_LAST
        )
        self._poll_ms = int(cfg.long_poll_timeout * 1000)
        self._rr = 0
        #: pops in flight by what they poll (a topic's broker; the lite source: a broker)
        self._polling: Counter[object] = Counter()
        #: pops answered at once with nothing in a row, by what they poll
        self._idle: Counter[object] = Counter()
        #: connections the close hung up (``_hang_up``), by address
        self._hang_ups: Counter[str] = Counter()
        #: pops lost with their connection after a request timeout or more (the
        #: ``connection`` the receive loops see), and its change
        self._lost_pops = 0
        self._pop_lost = anyio.Event()
        #: popped records that could not be decoded, to settle: (address, topic, record)
        self._undecodable: list[tuple[str, str, PoppedUndecodable]] = []
        self._undecodable_added: anyio.Event | None = None
        #: undecodable records dead-lettered (or skipped) whose ack is still owed
        self._owed: list[_Owed] = []
        self._opened = False

    @property
    def client_id(self) -> str:
        return self.client.client_id

    def trace_sender(self) -> RemotingTraceSender:
        return RemotingTraceSender(self.client, self.group)

    @property
    def receivers(self) -> int:
        """Receive loops: one per (topic, broker), so an idle broker's long poll never
        holds up a busy one's messages."""
        return max(2, len(self._targets()))

    @property
    def behind_receivers(self) -> int:
        """None: each loop is its (topic, broker)'s own (not measured: issue 43 measured
        the Proxy's path)."""
        return 0

    # -- lifecycle -----------------------------------------------------------------

    async def open(self) -> None:
        state = self.state
        await self.client.__aenter__()
        self._opened = True
        try:
            for topic in state.subscriptions:
                await self.client.namesrv.get_route(topic)
            await self._membership.send_heartbeats(starting=True)
            # An older broker (RocketMQ 4.x for POP) fails the start, once, instead of
            # each pop failing and backing off for good. The heartbeats' answers told
            # each broker's release; one they did not reach (down: the NameServer names
            # a stopped broker for up to 2 min) is not waited for here, nor does it fail
            # the start: its heartbeat failure is logged, and its pops back off.
            reached = set(self.client.pool.addresses)
            for _topic, _name, addr in self._targets():
                if addr in reached:
                    await self.client.broker.require(addr, self.feature)
            self.server_max_attempts = await self._group_max_attempts()
        except BaseException:
            await self.close()
            raise

    async def _group_max_attempts(self) -> int:
        """Deliveries before the DLQ by the group's ``retryMaxTimes`` (on any broker)."""
        for _topic, _broker, addr in self._targets():
            try:
                times = await group_retry_max_times(self.client.broker, addr, self.group)
            except RocketMQError:
                continue
            if times is not None and times >= 0:
                return times + 1
        return _DEFAULT_RETRY_MAX + 1

    async def run(self) -> None:
        """Heartbeats (the brokers list us among the group's consumers), and the
        settling of undecodable records, until cancelled."""
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._settle_undecodable)
            while True:
                await anyio.sleep(self.state.config.heartbeat_interval)
                await self._membership.send_heartbeats()

    async def close(self) -> None:
        if not self._opened:
            return
        self._opened = False
        bound = self.state.config.request_timeout * 2
        with anyio.move_on_after(bound, shield=True):
            await self._let_go_undecodable()
        with anyio.move_on_after(bound, shield=True):
            await self._membership.unregister()
        await self.client.__aexit__(None, None, None)

    def backoff(self, attempt: int) -> float:
        return float(POP_DELAYS[min(max(attempt, 1), len(POP_DELAYS)) - 1])

    def retry_pause(self, attempt: int) -> float:
        # As the orderly pull consumer (and Java's orderly POP consumer): the queue pauses
        # suspend_current_queue_time, the message kept invisible meanwhile.
        return self.state.config.suspend_current_queue_time

    # -- popping -------------------------------------------------------------------

    @property
    def connection(self) -> int:
        """Pops lost with their connection after waiting a request timeout or more: each
        ends the receive loops' backoff (``new_connection``)."""
        return self._lost_pops

    async def new_connection(self, since: int) -> None:
        """Return once a pop was lost with its connection since ``since``: it timed out
        (the connection is dropped after it) or its connection failed under it (a
        heartbeat on it timed out, a reset) after a request timeout or more. The next
        pop goes on a new connection at once, as a gRPC receive does on the Proxy's new
        one: what failed on the old connection (a silent one's 13 s pop after pops
        refused) says nothing of the new one. No storm: each such loss waited a request
        timeout first, and a connect that fails at once is no loss of a pop. (Not the
        lite source's pops yet: lite_remoting seed 20153's paused broker then applied a
        renewal that had timed out after the ack, docs/simulator.md.)"""
        while self._lost_pops == since:
            await self._pop_lost.wait()

    def receivable_queues(self) -> int:
        count = 0
        for topic in self.state.subscriptions:
            route = self.client.namesrv.cached_route(topic)
            if route is not None:
                count += sum(1 for mq in route.read_queues() if route.master_addr(mq.broker_name))
        return count

    def _targets(self, *, receiving: bool = False) -> list[tuple[str, str, str]]:
        """(topic, broker name, master address) of every readable subscribed topic that
        is not paused (``Consumer.pause``); ``receiving``: and that the running receive
        loop asks (``topic_max_rate``: a limited topic has a loop of its own)."""
        out: list[tuple[str, str, str]] = []
        paused = self.state.pauses.topic_paused
        rates = self.state.topic_rates if receiving else None
        for topic in self.state.subscriptions:
            if paused(topic) or (rates is not None and not rates.receivable(topic)):
                continue
            route = self.client.namesrv.cached_route(topic)
            if route is None:
                continue
            brokers = sorted({mq.broker_name for mq in route.read_queues()})
            for name in brokers:
                addr = route.master_addr(name)
                if addr is not None:
                    out.append((topic, name, addr))
        return out

    async def receive(
        self, max_messages: int, invisible: float, early: Early | None = None
    ) -> list[PopMessage]:  # a pop's answer comes whole: ``early`` is not called
        targets = self._targets(receiving=True)
        if not targets:
            if self.state.pauses.any and self.state.pauses.idle(self.state.subscriptions):
                return []  # paused meanwhile: the receiver waits for a resume
            raise NoRouteError(
                f"no readable queue of {sorted(self.state.subscriptions)} has a master broker"
            )
        target = self._least_polled(targets, lambda t: t)
        topic, broker_name, addr = target
        sub = self.state.subscriptions[topic]
        started = time.monotonic()
        try:
            result = await self._polled(target, addr, lambda: self.requests.pop(
                addr, self.group, topic, broker_name, max_nums=max_messages,
                invisible_ms=int(invisible * 1000), poll_ms=self._poll_ms,
                init_mode=self._init_mode, expression=sub.expression,
                expression_type=sub.expression_type, order=self.fifo,
                timeout=self._poll_ms / 1000 + self.state.config.request_timeout + 5,
                keep_undecodable=True,
            ))  # fmt: skip
        except (RequestTimeoutError, ConnectionClosedError):
            if time.monotonic() - started >= self.state.config.request_timeout:
                self._lost_pops += 1
                self._pop_lost.set()
                self._pop_lost = anyio.Event()
            raise
        self._set_aside(addr, topic, result)
        for m in result.messages:
            m.topic = unwrap(self._namespace, m.topic)  # the application's name
            if self.fifo:
                m.message_group = f"{m.broker_name}:{m.queue_id}"
        return result.messages

    def _least_polled(self, options: Sequence[T], key: Callable[[T], object]) -> T:
        """The option with the fewest pops in flight (of equals, the next in turn): the
        receive loops spread over the brokers instead of meeting on an idle one while
        another broker's messages wait for a poll to come back (up to
        ``long_poll_timeout``; in turn, two loops met that way now and then)."""
        self._rr += 1
        n = len(options)
        turns = (options[(self._rr + i) % n] for i in range(n))
        return min(turns, key=lambda o: self._polling[key(o)])

    async def _polled(self, key: object, addr: str,
                      pop: Callable[[], Awaitable[PopResult]]) -> PopResult:  # fmt: skip
        """``pop()`` of ``key`` at ``addr`` (counted in flight), and the pause after an
        answer that came at once with nothing (see the module docstring)."""
        with self._in_flight(key):
            started = time.monotonic()
            try:
                result = await pop()
            except anyio.get_cancelled_exc_class():
                if self.state.closing:
                    await self._hang_up(addr)
                raise
            held = time.monotonic() - started >= self._poll_ms / 2000
            if result.messages or result.undecodable or (held and not result.polling_full):
                self._idle.pop(key, None)
                return result
            self._idle[key] += 1
            idle = self._idle[key]
            if idle == 1:
                self.state.log.info("pop_backing_off", target=str(key),
                                    polling_full=result.polling_full)  # fmt: skip
            await anyio.sleep(min(MAX_IDLE_BACKOFF, IDLE_BACKOFF * 2 ** (idle - 1)))
        return result

    async def _hang_up(self, addr: str) -> None:
        """A long poll cut by the close: close the connection it is on, so the broker,
        which checks a parked poll's channel when it wakes it, pops nothing for it. Left
        open while the close acks, releases and unsubscribes (seconds, if a broker is
        slow), the poll could be answered there, and its messages, never read, would
        stay invisible until their invisible time ended. The close's next requests to
        that broker open a new connection; an ack that was in flight on it is sent again
        on that one (``_ack_request``).

        A heartbeat under way on it is answered first (at most a request timeout; most
        come in milliseconds): a broker runs heartbeats on an executor of their own, and
        one it applied after the connection's close removed this client would list it
        again, for the channel expiry (2 min), where no unregister reaches (a broker
        unregisters the connection the request comes on)."""
        with anyio.CancelScope(shield=True):
            await self._membership.heartbeats_ended(addr)
            self._hang_ups[addr] += 1  # before the drop: a request failing from now sees it
            await self.client.pool.drop(addr)

    @contextmanager
    def _in_flight(self, key: object) -> Iterator[None]:
        self._polling[key] += 1
        try:
            yield
        finally:
            self._polling[key] -= 1

    # -- settling ------------------------------------------------------------------

    async def _addr(self, msg: PopMessage) -> str:
        """The master of ``msg``'s broker, which settles it. A route that shows none is
        asked for again (a failover, a restarted master); still none, the request is
        retriable: the acks and releases are sent again while the consumer runs."""
        topic = wrap(self._namespace, msg.topic)
        route = self.client.namesrv.cached_route(topic)
        if route is None:
            route = await self.client.namesrv.get_route(topic)
        addr = route.master_addr(msg.broker_name)
        if addr is None:
            route = await self.client.namesrv.query_route(topic)
            addr = route.master_addr(msg.broker_name)
        if addr is None:
            raise NoRouteError(f"broker {msg.broker_name} has no master", retriable=True)
        return addr

    async def ack(self, topic: str, messages: list[PopMessage]) -> AckRefusals:
        topic = wrap(self._namespace, topic)
        by_broker: dict[str, list[PopMessage]] = defaultdict(list)
        for m in messages:
            by_broker[m.broker_name].append(m)
        refused: AckRefusals = []
        for msgs in by_broker.values():
            try:
                addr = await self._addr(msgs[0])
            except RocketMQError as err:  # this broker's messages, not the others'
                refused.extend((m, err) for m in msgs)
                continue
            alone = msgs
            if not self.fifo:  # one batch per broker
                batch, checks, alone = self._batchable(msgs, refused)
                try:
                    if batch:
                        await self._ack_request(addr, partial(
                            self.requests.batch_ack, addr, self.group, topic, checks))  # fmt: skip
                except RocketMQError as err:
                    refused.extend((m, err) for m in batch)
            # Orderly pops are acked one by one: the broker's order lock moves on with each;
            # so is a message a batch ack cannot name.
            for m in alone:
                try:
                    await self._ack_request(addr, partial(
                        self.requests.ack, addr, self.group, topic, m.receipt_handle,
                        lite_topic=self._lite_topic(m),
                    ))  # fmt: skip
                except RocketMQError as err:
                    refused.append((m, err))
        return refused

    async def _ack_request(self, addr: str, request: Callable[[], Awaitable[object]]) -> None:
        """``request()`` (an ack to ``addr``), sent again at once on a new connection
        when it failed because the close hung up the one it was on (``_hang_up``): the
        broker is fine, so it is no failed ack (no warning, no retry delay). Harmless if
        the broker took the first: an ack of an acked message is answered again. Bounded:
        each new try needs another hang-up of ``addr`` while it is in flight, and the
        close hangs up once per long poll it cuts."""
        while True:
            hang_ups = self._hang_ups[addr]
            try:
                await request()
                return
            except ConnectionClosedError:
                if self._hang_ups[addr] == hang_ups:
                    raise
            self.state.log.info(
                "ack_resent", broker=addr, reason="the close hung up its connection"
            )

    def _batchable(
        self, msgs: list[PopMessage], refused: AckRefusals
    ) -> tuple[list[PopMessage], list[CheckPoint], list[PopMessage]]:
        """``msgs`` split into those a batch ack can name (with their check points,
        parsed once) and those acked alone (a check point the broker started past its
        message, see ``aiorocket.client.pop``); a receipt handle that is no check point
        is refused, for good."""
        batch: list[PopMessage] = []
        checks: list[CheckPoint] = []
        alone: list[PopMessage] = []
        for m in msgs:
            try:
                ck = CheckPoint.parse(m.receipt_handle)
            except RocketMQError as err:
                refused.append((m, err))
                continue
            if ck.batchable:
                batch.append(m)
                checks.append(ck)
            else:
                self.state.log.warning("pop_ack_outside_check_point", topic=m.topic,
                                       queue_id=ck.queue_id, offset=ck.offset,
                                       check_point_start=ck.start)  # fmt: skip
                alone.append(m)
        return batch, checks, alone

    def _lite_topic(self, msg: PopMessage) -> str | None:
        """What acks and renewals name as the message's lite topic (a lite source's)."""
        return None

    async def change_invisible(self, msg: PopMessage, seconds: float) -> None:
        addr = await self._addr(msg)
        topic = wrap(self._namespace, msg.topic)
        msg.receipt_handle = await self.requests.change_invisible_time(
            addr, self.group, topic, msg.receipt_handle, int(seconds * 1000),
            lite_topic=self._lite_topic(msg),
        )  # fmt: skip

    async def dead_letter(self, msg: PopMessage, *, attempt: int, max_attempts: int) -> None:
        addr = await self._addr(msg)
        topic = wrap(self._namespace, msg.topic)
        # Only sent back here: the runtime acks it after (``dead_letter_settles``), with
        # the ack's retries, so a failed ack never sends it to the DLQ twice.
        await self.client.broker.send_back(
            addr, msg, self.group, delay_level=-1, max_reconsume_times=max_attempts - 1,
            origin_topic=topic,
        )  # fmt: skip

    def acks_before_release(self, send: Callable[[], Awaitable[None]]) -> None:
        """Nothing: a broker has no release of everything a client holds (each popped
        message is renewed, acked or released by itself)."""

    def lost(self, err: RocketMQError) -> bool:
        return False

    # -- undecodable records -------------------------------------------------------

    def _set_aside(self, addr: str, topic: str, result: PopResult) -> None:
        """A pop's undecodable records, for ``_settle_undecodable``."""
        if result.undecodable:  # rare: off the normal path
            self._undecodable += [(addr, topic, bad) for bad in result.undecodable]
            if self._undecodable_added is not None:
                self._undecodable_added.set()

    async def _settle_undecodable(self) -> None:
        """Settle the undecodable records receives set aside and retry the acks owed,
        until cancelled (the close lets go of what is left: ``_let_go_undecodable``)."""
        while True:
            self._undecodable_added = added = anyio.Event()
            while self._undecodable:
                addr, topic, bad = self._undecodable[0]  # cancelled here: the close's
                try:
                    await self._settle_one(addr, topic, bad)
                except RocketMQError as err:  # the broker unreachable: it comes back
                    self.state.log.warning(
                        "undecodable_not_settled", topic=topic, offset=bad.record.queue_offset,
                        error=str(err),
                    )  # fmt: skip
                self._undecodable.pop(0)
            await self._ack_owed()
            with anyio.move_on_after(UNDECODABLE_ACK_RETRY if self._owed else math.inf):
                await added.wait()

    async def _ack_owed(self) -> None:
        """One try of each ack owed; a refusal for good is dropped (the record comes
        back after its invisible time), a retriable one kept for the next try."""
        for owed in list(self._owed):
            addr, topic, handle, lite_topic = owed
            try:
                await self.requests.ack(addr, self.group, topic, handle, lite_topic=lite_topic)
            except RocketMQError as err:
                self.state.log.warning("undecodable_ack_failed", topic=topic,
                                       retriable=err.retriable, error=str(err))  # fmt: skip
                if err.retriable:
                    continue
            self._owed.remove(owed)

    async def _let_go_undecodable(self) -> None:
        """At the close: the acks owed get a last try; what is still unsettled then is
        made visible again at once (a member dead-letters it again: a second copy in the
        DLQ rather than a record held invisible past the close)."""
        await self._ack_owed()
        left = self._owed + [
            (addr, topic, bad.receipt_handle, bad.record.properties.get(PROPERTY_LITE_TOPIC))
            for addr, topic, bad in self._undecodable
            if bad.receipt_handle is not None
        ]
        self._owed, self._undecodable = [], []
        for addr, topic, handle, lite_topic in left:
            try:
                await self.requests.change_invisible_time(
                    addr, self.group, topic, handle, 0, lite_topic=lite_topic
                )
            except RocketMQError as err:  # it comes back after its invisible time
                self.state.log.warning("undecodable_not_released", topic=topic, error=str(err))

    async def _settle_one(self, addr: str, topic: str, bad: PoppedUndecodable) -> None:
        """Dead-letter (or skip) one undecodable record, as the pull path does, then ack
        it; one whose check point is unknown is left to come back."""
        record, handle = bad.record, bad.receipt_handle
        log = self.state.log.bind(topic=unwrap(self._namespace, topic), queue=record.queue_id)
        if handle is None or record.queue_id is None or record.commit_log_offset is None:
            report_undecodable(self.state, log, record, record.queue_offset, "left")
            return

        async def forward(stub: ConsumerMessage) -> bool:
            try:
                await self.client.broker.send_back(
                    addr, stub, self.group, delay_level=-1, origin_topic=topic,
                    max_reconsume_times=max(self.server_max_attempts - 1, 0),
                )  # fmt: skip
            except BrokerResponseError as err:  # a refusal: skipped
                log.warning("send_back_failed", offset=record.queue_offset, error=str(err))
                return False
            return True

        await dead_letter_record(
            self.state, log, record, topic, record.queue_id, CheckPoint.parse(handle).broker_name,
            forward,
        )
        # Owed, then acked by ``_ack_owed`` (retried; released at the close): a second
        # copy in the DLQ rather than none. A lite record's ack names its lite topic.
        self._owed.append((addr, topic, handle, record.properties.get(PROPERTY_LITE_TOPIC)))
