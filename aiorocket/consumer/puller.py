"""The pull task of one ProcessQueue: long-poll the broker, hand messages to delivery."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import anyio
import anyio.abc

from aiorocket.client.broker import PULL_COMMIT_OFFSET, PULL_SUBSCRIPTION, PULL_SUSPEND
from aiorocket.client.pull_request import PullHeader
from aiorocket.client.results import PullResult, PullStatus
from aiorocket.consumer.committer import verify_offset
from aiorocket.consumer.config import MessageModel
from aiorocket.consumer.process_queue import QueueState
from aiorocket.consumer.undecodable import dead_letter_undecodable
from aiorocket.errors import (
    BrokerResponseError,
    ResponseTooLargeError,
    RocketMQError,
)
from aiorocket.message import PROPERTY_RETRY_TOPIC, RETRY_TOPIC_PREFIX
from aiorocket.namespace import unwrap
from aiorocket.protocol.codes import ResponseCode
from aiorocket.protocol.frame import MAX_FRAME_LENGTH
from aiorocket.protocol.route import MASTER_ID
from aiorocket.protocol.subscription import Subscription
from aiorocket.received import ConsumerMessage

if TYPE_CHECKING:
    from aiorocket._log import Logger
    from aiorocket.client.broker import BrokerClient
    from aiorocket.consumer.brokers import BrokerFinder
    from aiorocket.consumer.committer import AutoCommit
    from aiorocket.consumer.config import ConsumerConfig
    from aiorocket.consumer.membership import Membership
    from aiorocket.consumer.process_queue import ProcessQueue
    from aiorocket.consumer.settle import RemotingSettler
    from aiorocket.consumer.state import ConsumerState

__all__ = ["Deliver", "Puller"]

_PAUSED = QueueState.PAUSED

#: ``deliver(pq, messages)``: the delivery strategy's entry (see aiorocket.consumer.delivery)
Deliver = Callable[["ProcessQueue", list[ConsumerMessage]], None]


class Puller:
    """Runs the pull task of each assigned queue.

    Parameters
    ----------
    state:
        The consumer's shared state: configuration, group, flow-control limits, the
        pull observers.
    broker:
        The broker request client (PULL_MESSAGE).
    finder:
        Finds the broker to pull a queue from (the suggested one, master, else a slave).
    membership:
        Heartbeats a broker that does not know our subscription yet.
    settler:
        Every pulled message's settler; also dead-letters undecodable records.
    deliver:
        Where pulled messages go (the delivery strategy).
    commits:
        Commits a queue's offset after the broker moved it (OFFSET_ILLEGAL).
    needs_lock:
        Orderly: a queue pulls only while it holds its broker lock.
    """

    def __init__(
        self,
        state: ConsumerState,
        broker: BrokerClient,
        finder: BrokerFinder,
        membership: Membership,
        settler: RemotingSettler,
        deliver: Deliver,
        commits: AutoCommit,
        *,
        needs_lock: bool,
    ) -> None:
        self._state = state
        self._broker = broker
        self._finder = finder
        self._membership = membership
        self._settler = settler
        self._deliver = deliver
        self._commits = commits
        self._needs_lock = needs_lock

    async def run(
        self,
        pq: ProcessQueue,
        sub: Subscription,
        *,
        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Pull ``pq`` until it is dropped (its cancel scope is cancelled) or the consumer
        closes."""
        with anyio.CancelScope() as scope:
            pq.pull_scope = scope
            task_status.started()
            while not pq.dropped:
                # One cancel scope for many pulls, not one a pull (its cost was a few
                # per cent of the client's CPU a message at batch 32: benchmarks/
                # ceiling.py). It is ``pq.request_scope`` only while a pull is in
                # flight, so only that pull is cut (a reset, a seek, a pause); a
                # cancelled scope cancels every later await in it, so the pulls go on
                # under a new one.
                with anyio.CancelScope() as request_scope:
                    await self._pull(pq, sub, request_scope)
                pq.last_pull_completed = time.monotonic()

    async def _pull(
        self, pq: ProcessQueue, sub: Subscription, request_scope: anyio.CancelScope
    ) -> None:
        """Pull until ``pq`` is dropped, or a reset, seek or pause cancels
        ``request_scope`` during a pull (the answer was for the old position)."""
        state = self._state
        cfg = state.config
        group = state.group
        broker = self._broker
        finder = self._finder
        settler = self._settler
        deliver = self._deliver
        needs_lock = self._needs_lock
        log = state.log.bind(topic=pq.mq.topic, broker=pq.mq.broker_name, queue=pq.mq.queue_id)
        is_retry_topic = pq.mq.topic.startswith(RETRY_TOPIC_PREFIX)
        clustering = cfg.message_model is MessageModel.CLUSTERING
        # Without a registered heartbeat subscription (SQL92 filters, the pull consumer)
        # the broker needs the expression with every request.
        with_sub = sub.expression_type != "TAG" or state.pull_mode
        filter_tags = not sub.matches_all
        namespace = cfg.namespace
        max_batch = cfg.pull_batch_size
        # The broker the last answer suggested (Java: pullFromWhichNodeTable); when it is
        # gone, the master, else a slave: a group whose master is down is read from its
        # slaves.
        broker_id = MASTER_ID
        slave_refused = False
        unknown_to_broker = False  # the last pull was refused for want of our heartbeat
        observers = state.pull_observers  # the list itself: observers added later count
        pauses = state.pauses
        rate = state.rate
        topic_rate = None if state.topic_rates is None else state.topic_rates.of(pq.mq.topic)
        # the fields that stay the same from pull to pull, encoded once (benchmarks/
        # README.md, "Round 11"); the pull reads them from here alone
        header = PullHeader(
            group, pq.mq, suspend_timeout_ms=int(cfg.long_poll_timeout * 1000),
            sub_version=sub.sub_version,
            subscription=sub.expression if with_sub else None,
            expression_type=sub.expression_type if with_sub else None,
        )  # fmt: skip
        while not pq.dropped:
            # (pq.paused and pauses.queue_paused without their calls while nothing is
            # paused: once a pull, benchmarks/README.md, "Round 18")
            if pq.state is _PAUSED or (pauses.some and pauses.queue_paused(pq.mq)):
                # Paused (PullConsumer.pause, Consumer.pause): a change of either wakes
                # the queue; the next pull starts at the offset this one stopped at.
                await pq.wait_changed()
                continue
            if not state.has_room(pq):
                oldest = pq.tracker.min_in_flight
                with anyio.move_on_after(cfg.stall_warning_after) as waiting:
                    await state.wait_room(pq)
                if waiting.cancelled_caught:
                    _warn_if_pinned(pq, oldest, cfg, log)
                continue
            if needs_lock and not pq.locked:
                await pq.wait_changed()
                continue
            if rate is not None or topic_rate is not None:
                # max_rate, topic_max_rate: wait for the buckets, then ask again
                if rate is not None:
                    await rate.ready()
                if topic_rate is not None:
                    await topic_rate.ready()
                if pq.dropped or pq.paused or pauses.queue_paused(pq.mq):
                    continue  # dropped or paused meanwhile
            if pq.offset_unverified and not await self._verify_offset(pq, log):
                await anyio.sleep(cfg.pull_backoff_on_error)
                continue
            found = finder.cached(pq.mq, broker_id) or await finder.find(pq.mq, broker_id)
            if found is None:
                log.warning("pull_no_broker")
                await anyio.sleep(cfg.pull_backoff_on_error)
                continue
            addr, pulled_from = found
            from_slave = pulled_from != MASTER_ID
            tracker = pq.tracker
            # (the tracker's next_offset and committable() without their calls: once a
            # pull, benchmarks/README.md, "Round 18")
            offset = tracker._next
            if clustering and state.auto_commit:
                low = tracker._low
                commit = low if low >= 0 else offset
            else:
                commit = 0
            if from_slave or pq.offset_unverified:
                commit = 0  # a slave takes no commits (Java clears the flag); the flusher does
            elif commit == tracker.committed:  # not ``dirty``: committable() once a pull
                # Only a position this member moved is committed. One it merely read may
                # be stale already: a previous owner's revoke commit that landed after our
                # query would be moved back, outside the in-flight window (pull_remoting
                # seed 43086). A broker that lost ours in a restart is the verify's.
                commit = 0
            sys_flag = PULL_SUSPEND
            if commit > 0:
                sys_flag |= PULL_COMMIT_OFFSET
            if with_sub:
                sys_flag |= PULL_SUBSCRIPTION
            generation = pq.tracker.generation
            disconnects = pq.disconnects
            batch = _batch_size(pq, offset, cfg.pull_batch_size) if pq.small_batch else max_batch
            sent_at = time.monotonic()
            sent_wall_ms = time.time() * 1000 if observers else 0.0
            try:
                pq.request_scope = request_scope
                result = await broker.pull(
                    addr,
                    group,
                    pq.mq,
                    offset,
                    max_nums=batch,
                    sys_flag=sys_flag,
                    commit_offset=commit,
                    timeout=cfg.pull_request_timeout,
                    message_class=ConsumerMessage,
                    keep_undecodable=True,
                    # each message's queue, generation and settler, set as it is
                    # decoded (a loop over the messages less: benchmarks/README.md,
                    # "Round 4 (issue 43, goal 1)")
                    stamp=(pq, generation, settler),
                    header=header,
                )
            except ResponseTooLargeError as exc:
                # Large messages x batch size: the connection is fine (the answer was
                # skipped); ask for fewer messages, never the same answer again.
                if batch > 1:
                    pq.small_batch = batch // 2
                    pq.small_batch_until = max(pq.small_batch_until, offset + batch)
                    log.warning(
                        "pull_answer_too_large", offset=offset, size=exc.size, batch=batch,
                        next_batch=pq.small_batch,
                    )  # fmt: skip
                    continue
                log.error(
                    "message_too_large_to_receive", offset=offset, size=exc.size,
                    limit=MAX_FRAME_LENGTH,
                    hint="the broker stores messages larger than any remoting frame: "
                    "lower its maxMessageSize; this queue cannot move past it",
                )  # fmt: skip
                await anyio.sleep(cfg.pull_backoff_on_error)
                continue
            except RocketMQError as exc:
                if not unknown_to_broker and _subscription_unknown(exc):
                    # The pull overtook our heartbeat (a topic that just appeared, a
                    # connection just opened or re-opened: the broker serves heartbeats
                    # and pulls on separate threads). Expected, not a problem: tell the
                    # broker now and pull again. Reported below only if it outlives that.
                    unknown_to_broker = True
                    log.debug("pull_subscription_unknown", offset=offset, error=str(exc))
                    await self._membership.heartbeat_to(addr)
                    continue
                log.warning("pull_failed", offset=offset, error=str(exc))
                await anyio.sleep(cfg.pull_backoff_on_error)
                continue
            finally:
                pq.request_scope = None
            unknown_to_broker = False
            pq.last_pull_completed = time.monotonic()
            if pq.dropped:
                break
            if generation != pq.tracker.generation:
                continue  # seeked or reset while the pull was in flight
            if disconnects != pq.disconnects:
                continue  # the position is unverified now: check it before using the answer
            broker_id = result.suggest_which_broker_id
            status = result.status
            if status is PullStatus.NO_MATCHED_MSG and from_slave:
                # A slave that may not serve reads (slaveReadEnable=false, the default) or
                # has not replicated this far answers PULL_RETRY_IMMEDIATELY with a next
                # offset past messages it did not send: moving there would lose them.
                # Stay, and ask again later.
                if not slave_refused:  # once per episode, not every second
                    log.warning("pull_slave_refused", offset=offset, broker_addr=addr)
                slave_refused = True
                await anyio.sleep(cfg.pull_backoff_on_error)
                continue
            slave_refused = False
            if status is PullStatus.FOUND:
                if observers:
                    took = _pull_time(pq.last_pull_completed - sent_at, sent_wall_ms, result)
                    for observe in observers:
                        observe(pq.mq, took, len(result.messages))
                next_offset = result.next_begin_offset
                if result.undecodable:  # rare: off the normal path
                    try:
                        next_offset = await dead_letter_undecodable(
                            state, settler, pq, result, offset, log
                        )
                    except RocketMQError:  # the DLQ unreachable (logged): pull again later
                        await anyio.sleep(cfg.pull_backoff_on_error)
                        continue
                    if pq.dropped or generation != pq.tracker.generation:
                        continue
                # decoded as ConsumerMessage (message_class above; no cast's call)
                accepted: list[ConsumerMessage] = result.messages  # type: ignore[assignment]
                # Offsets increase, so whole-list passes run only when something is
                # dropped: inner-batch records before the requested offset, or tags.
                if accepted and accepted[0].queue_offset < offset:
                    accepted = [m for m in accepted if m.queue_offset >= offset]
                if filter_tags:
                    accepted = [m for m in accepted if sub.accepts_tag(m.tags)]
                if is_retry_topic or namespace:
                    for m in accepted:
                        if is_retry_topic:
                            original = m.properties.get(PROPERTY_RETRY_TOPIC)
                            if original:
                                m.topic = original
                        if namespace:  # the application's name (settling wraps it again)
                            m.topic = unwrap(namespace, m.topic)
                try:
                    # (the bodies' one length, if the decoder read them laid out alike:
                    # the answer's summary, not a look at each message; "Round 16"; and
                    # their offsets, if it read them too and none was left out here:
                    # "Round 17")
                    pq.on_pulled(
                        accepted, next_offset, result.body_len,
                        result.offsets if accepted is result.messages else None,
                    )  # fmt: skip
                except ValueError as exc:
                    # An answer that breaks the tracker's contract (offsets that do not
                    # increase, a next offset not past them): start again from the
                    # commit point, as the tracker's docstring says. Nothing is skipped;
                    # what was in flight is delivered again.
                    log.warning("pull_answer_inconsistent", offset=offset, error=str(exc))
                    pq.reset(pq.tracker.committable())
                    await anyio.sleep(cfg.pull_backoff_on_error)
                    continue
                if accepted:
                    if rate is not None:
                        rate.take(len(accepted))
                    if topic_rate is not None:
                        topic_rate.take(len(accepted))
                    # The workers this wakes run after the next pull, written below in
                    # this step, has left: the read that brought this answer scheduled
                    # its write (ProtocolWire.data_received; issue 43, goal 4).
                    deliver(pq, accepted)
                    pq.pulled_run = None  # for that delivery only (ProcessQueue.on_pulled)
            elif status in (PullStatus.NO_NEW_MSG, PullStatus.NO_MATCHED_MSG):
                pq.tracker.add((), max(result.next_begin_offset, offset))
            else:  # OFFSET_ILLEGAL (PULL_OFFSET_MOVED)
                # An offset inside the queue's range was legal: the broker moved it
                # because an operator reset the group (5.x server-side reset), which is
                # news, not a fault. Out of the range, the stored offset fell off it.
                reset = result.min_offset <= offset <= result.max_offset
                (log.info if reset else log.warning)(
                    "offset_reset_by_operator" if reset else "pull_offset_illegal",
                    offset=offset,
                    next_offset=result.next_begin_offset,
                    min_offset=result.min_offset,
                    max_offset=result.max_offset,
                )
                pq.reset(result.next_begin_offset)
                pq.tracker.mark_dirty()
                await self._commits.commit(pq)

    async def _verify_offset(self, pq: ProcessQueue, log: Logger) -> bool:
        """After the connection to ``pq``'s broker was lost: move the queue to the
        group's stored offset if another member committed past us (see verify_offset);
        False while it is not verified (the query failed, or the connection was lost
        again meanwhile), and the queue is not pulled."""
        try:
            return await verify_offset(
                self._commits.store, pq, log, auto_commit=self._state.auto_commit
            )
        except RocketMQError as exc:
            log.warning("offset_verify_failed", error=str(exc))
            return False


#: the broker does not know this consumer's group or subscription (yet): its heartbeat
#: has not arrived or was forgotten.
_SUBSCRIPTION_UNKNOWN = frozenset(
    (ResponseCode.SUBSCRIPTION_NOT_EXIST, ResponseCode.SUBSCRIPTION_NOT_LATEST,
     ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST)
)  # fmt: skip


def _subscription_unknown(exc: RocketMQError) -> bool:
    return isinstance(exc, BrokerResponseError) and exc.code in _SUBSCRIPTION_UNKNOWN


def _pull_time(took: float, sent_wall_ms: float, result: PullResult) -> float:
    """A pull's time without the long poll's wait: the answer of a pull the broker held
    until a message arrived counts from that message's store time (the wait for traffic
    is no latency); one that found messages stored already, from the request. So under
    light traffic the pull duration is still the broker's and the network's, not the
    gap between messages (clocks apart: the client's and the broker's, as for the
    end-to-end delay; a skew only moves the cut, within [0, took])."""
    if not result.messages:
        return took
    waited = (result.messages[0].store_timestamp - sent_wall_ms) / 1000
    return took - min(max(waited, 0.0), took)


def _batch_size(pq: ProcessQueue, offset: int, configured: int) -> int:
    """The batch of a queue whose answers were too large: halved (at the failure) until
    the offset passes the messages that did not fit, then doubled at every pull."""
    if offset >= pq.small_batch_until:
        pq.small_batch *= 2
        if pq.small_batch >= configured:
            pq.small_batch = 0
            return configured
    return pq.small_batch


def _warn_if_pinned(pq: ProcessQueue, oldest: int | None, cfg: ConsumerConfig, log: Logger) -> None:
    """Name the unsettled message that kept pulling paused for ``stall_warning_after``
    (the span limit: e.g. a ``msg.hold()`` never settled); once per message."""
    tracker = pq.tracker
    if oldest is None or oldest != tracker.min_in_flight or oldest == pq.stall_reported:
        return
    if tracker.span() <= cfg.consume_concurrently_max_span:
        return  # the count or size limit: the handlers are slow, not stuck on one message
    pq.stall_reported = oldest
    log.warning(
        "queue_stalled_by_unsettled_message",
        offset=oldest,
        pulled_ahead=tracker.span(),
        waited=cfg.stall_warning_after,
        hint="settle it (ack, nack or leave async with msg); pulling resumes then",
    )
