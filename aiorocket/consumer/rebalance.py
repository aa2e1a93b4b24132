"""Rebalance: decide which queues this consumer owns and start or stop their tasks.

One pass (Java: ``RebalanceImpl.doRebalance``) covers every subscribed topic, but its
cost must not grow with topics x brokers: a consumer of 1,000 idle queues runs a pass
every 20 s and should stay near zero CPU. So a pass

* asks each broker for the group's members at most once: the member list is per group,
  not per topic, and one broker's answer serves every topic it hosts;
* re-runs the allocation strategy only for topics whose inputs (route, members)
  changed, and otherwise reuses the previous result: strategies are pure functions of
  their inputs (see [`aiorocket.consumer.allocation`][]);
* revokes, locks and starts queues of all topics together, computing (and committing)
  the start offsets of new queues concurrently, so a start-up on many queues takes a
  few round trips instead of several per queue.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import anyio

from aiorocket.consumer.config import ConsumeFromWhere, MessageModel
from aiorocket.consumer.offsets import resume_offset
from aiorocket.consumer.process_queue import ProcessQueue
from aiorocket.errors import AccessDeniedError, RocketMQError, TopicNotExistError
from aiorocket.message import RETRY_TOPIC_PREFIX, MessageQueue
from aiorocket.protocol.route import TopicRoute

if TYPE_CHECKING:
    from aiorocket.client.broker import BrokerClient
    from aiorocket.client.namesrv import NameServerClient
    from aiorocket.consumer.allocation import AllocateStrategy
    from aiorocket.consumer.brokers import BrokerFinder
    from aiorocket.consumer.locks import QueueLocks
    from aiorocket.consumer.membership import Membership
    from aiorocket.consumer.offset_store import OffsetStore
    from aiorocket.consumer.state import ConsumerState
    from aiorocket.protocol.subscription import Subscription
    from aiorocket.remoting.pool import ConnectionPool

__all__ = ["Plan", "QueueControl", "RebalanceState", "Rebalancer", "plan"]

#: start-offset lookups in flight during one pass: enough to fill a round trip with
#: many requests (their frames share writes), few enough not to flood a broker.
START_OFFSET_CONCURRENCY = 32
#: seconds to the next pass when queues are waiting for a lock or we must rejoin.
SOON = 1.0


class QueueControl(Protocol):
    """What the rebalancer asks of the engine when ownership changes."""

    async def start_queue(self, pq: ProcessQueue, sub: Subscription) -> None:
        """Start pulling (and consuming) a newly owned queue."""

    async def revoke(self, pqs: list[ProcessQueue]) -> None:
        """Stop, settle, commit and forget queues no longer ours."""

    async def assigned(self, mqs: list[MessageQueue]) -> None:
        """Queues started in this pass (the rebalance listener)."""


@dataclass(slots=True)
class _TopicMemo:
    """The inputs and result of a topic's last allocation."""

    route: TopicRoute
    queues: list[MessageQueue]
    cids: tuple[str, ...] | None = None
    strategy: object = None
    mine: frozenset[MessageQueue] = frozenset()
    queue_set: frozenset[MessageQueue] = field(init=False)

    def __post_init__(self) -> None:
        self.queue_set = frozenset(self.queues)


@dataclass(slots=True)
class RebalanceState:
    """The rebalancer's memory between passes, plus counters tests and benchmarks read."""

    lock: anyio.Lock = field(default_factory=anyio.Lock)
    memos: dict[str, _TopicMemo] = field(default_factory=dict)
    passes: int = 0
    #: calls of the allocation strategy (skipped when a topic's inputs are unchanged).
    allocations: int = 0
    #: GET_CONSUMER_LIST_BY_GROUP requests sent.
    consumer_id_queries: int = 0
    #: subscribed topics the NameServer had no route for at the last pass.
    no_route: set[str] = field(default_factory=set)
    #: ``anyio.current_time()`` when each broker address was last (re)connected to.
    connected_at: dict[str, float] = field(default_factory=dict)


class _MemberLists:
    """The group's member list as each broker reports it, asked at most once per pass.

    A broker knows the members that sent it a heartbeat since it started. Just
    restarted (after a crash), it lists only those that reached it already, and a member
    allocating from that list takes queues of members left out, reads their offsets,
    which the crash set back, and consumes again what they had consumed (while its
    route or member list lags, and for each member every pass until it catches up). So
    a broker we connected to (again) less than ``settle`` seconds ago (a heartbeat
    interval plus a route refresh: the time every member takes to reach it) is asked
    only when no other one answers.
    """

    def __init__(
        self, broker: BrokerClient, group: str, memory: RebalanceState, settle: float
    ) -> None:
        self._broker = broker
        self._group = group
        self._memory = memory
        self._answers: dict[str, tuple[str, ...] | RocketMQError] = {}
        self._recent_since = anyio.current_time() - settle

    async def for_brokers(self, masters: Sequence[str]) -> tuple[str, ...]:
        """The members seen by one of ``masters``, settled ones first (see the class): one
        already asked, else a random one.

        A broker that failed this pass is not asked again (a down broker would otherwise
        cost a timeout per topic); the next candidate is tried instead.
        """
        connected_at = self._memory.connected_at
        since = self._recent_since
        settled = [a for a in masters if connected_at.get(a, since) <= since]
        recent = [a for a in masters if connected_at.get(a, since) > since]
        if not settled:
            return await self._ask_one(recent)
        try:
            return await self._ask_one(settled)
        except RocketMQError:
            if not recent:
                raise
            return await self._ask_one(recent)

    async def _ask_one(self, masters: list[str]) -> tuple[str, ...]:
        """The answer of one of ``masters`` (at least one)."""
        error: RocketMQError | None = None
        for addr in masters:
            answer = self._answers.get(addr)
            if isinstance(answer, tuple):
                return answer
            if answer is not None:
                error = answer
        untried = [a for a in masters if a not in self._answers]
        random.shuffle(untried)  # Java picks a random broker of the topic
        for addr in untried:
            self._memory.consumer_id_queries += 1
            try:
                cids = await self._broker.get_consumer_ids(addr, self._group)
            except RocketMQError as exc:
                self._answers[addr] = error = exc
                continue
            # Sorted once here, so a topic memo compares equal whatever the broker's order.
            # Deduplicated: the broker lists a client once per channel, and a client that
            # replaced a half-open connection still has the old channel there until the
            # broker expires it (2 min); counted twice, it would take only its first share
            # of the queues and leave the other share to nobody.
            answer = self._answers[addr] = tuple(sorted(set(cids)))
            return answer
        assert error is not None
        raise error


class _NoMembers(Exception):
    """No usable member list for a topic: empty, or (``others_only``) without us."""

    def __init__(self, others_only: bool) -> None:
        self.others_only = others_only


class Rebalancer:
    """Decides which queues this consumer owns and has the engine start or stop them.

    Parameters
    ----------
    state:
        The consumer's shared state: subscriptions, owned queues, assignment mode.
    client_id:
        This client's id in the group's member lists.
    broker:
        The broker request client (member lists, start offsets).
    namesrv:
        The NameServer client (routes).
    pool:
        The connection pool: brokers never connected to are introduced (heartbeat)
        before they are asked who the members are.
    membership:
        Heartbeats: a new broker's introduction, and rejoining when the member list
        lacks us.
    finder:
        Finds a broker serving reads of a queue (start offsets).
    offset_store:
        Where start offsets are read and a computed start is committed.
    allocate:
        The queue allocation strategy.
    queues:
        Starts and revokes queues (the engine).
    locks:
        Orderly consumption: a queue starts only once its broker lock is ours.
    """

    def __init__(
        self,
        state: ConsumerState,
        client_id: str,
        broker: BrokerClient,
        namesrv: NameServerClient,
        pool: ConnectionPool,
        membership: Membership,
        finder: BrokerFinder,
        offset_store: OffsetStore,
        allocate: AllocateStrategy,
        queues: QueueControl,
        locks: QueueLocks | None = None,
    ) -> None:
        self._state = state
        self._client_id = client_id
        self._broker = broker
        self._namesrv = namesrv
        self._pool = pool
        self._membership = membership
        self._finder = finder
        self._offset_store = offset_store
        self.allocate = allocate
        self._queues = queues
        self._locks = locks
        self.memory = RebalanceState()
        #: queues allocated to us were refused a lock (another member still holds them)
        self._pending_locks = False
        #: the member list lacked us: take our share back soon
        self._rejoin_soon = False

    async def run(self) -> None:
        """A pass every ``rebalance_interval``, at once when asked (the group changed),
        and after ``SOON`` while queues wait for a lock or we must rejoin."""
        state = self._state
        while True:
            if not state.rebalance_requested:
                soon = self._pending_locks or self._rejoin_soon
                wait = SOON if soon else state.config.rebalance_interval
                with anyio.move_on_after(wait):
                    await state.rebalance_wanted.wait()
            state.rebalance_requested = False
            self._rejoin_soon = False
            await self.rebalance()

    async def rebalance(self) -> None:
        """One pass over every subscribed topic; passes never overlap."""
        memory = self.memory
        async with memory.lock:
            memory.passes += 1
            await self._pass()

    async def _pass(self) -> None:
        state = self._state
        cfg = state.config
        settle = cfg.heartbeat_interval + cfg.route_refresh_interval
        members = _MemberLists(self._broker, state.group, self.memory, settle)
        targets: dict[str, frozenset[MessageQueue]] = {}
        not_registered: list[str] = []
        no_members: list[str] = []
        for topic in list(state.subscriptions):
            try:
                mine = await self._assigned(members, topic)
            except TopicNotExistError:
                self._route_missing(topic)
                continue
            except _NoMembers as exc:
                (not_registered if exc.others_only else no_members).append(topic)
                continue
            except RocketMQError as exc:
                state.log.warning("rebalance_failed", topic=topic, error=str(exc))
                continue
            if mine is not None:
                targets[topic] = mine
        if no_members:
            state.log.warning("rebalance_no_consumer_ids", topics=no_members)
        if not_registered:
            # The member list lacks us (our heartbeat has not arrived, or the broker forgot
            # us): the others allocate without us and take our queues, so keeping them
            # would consume them twice. Drop them (revoked and committed as usual),
            # heartbeat now, and take our share again in a pass soon (Java drops them
            # too: the strategy allocates nothing to a client missing from the list).
            state.log.warning("rebalance_not_a_member", topics=not_registered)
            for topic in not_registered:
                targets[topic] = frozenset()
        await self._apply(targets)
        if not_registered:
            await self._membership.send_heartbeats()
            self._rejoin_soon = True
        elif not no_members and all(
            topic in targets
            for topic in state.subscriptions
            if not topic.startswith(RETRY_TOPIC_PREFIX)
        ):
            state.note_joined()  # a member of the group with its share computed

    def _route_missing(self, topic: str) -> None:
        """Say once (not every pass) that a subscribed topic has no route; it is polled on."""
        if topic not in self.memory.no_route:
            self.memory.no_route.add(topic)
            self._state.missing_topics.add(topic)
            self._log_route_change(topic, "topic_has_no_route")

    def _log_route_change(self, topic: str, event: str) -> None:
        log = self._state.log
        # The group's retry topic appears only after a broker has seen the group: expected.
        if topic.startswith(RETRY_TOPIC_PREFIX):
            log.debug(event, topic=topic)
        elif event == "topic_has_no_route":
            log.warning(
                event,
                topic=topic,
                hint="the topic does not exist (yet): nothing is consumed from it until it "
                "is created; the consumer keeps looking at every rebalance",
            )
        else:
            log.warning(event, topic=topic, hint="consuming it starts now")

    async def _introduce(self, route: TopicRoute) -> None:
        """Heartbeat the route's brokers we have never connected to, before asking who the
        members are or pulling: a topic that just appeared, or a broker added to it, has
        not heard of us, and a member list or a pull overtaking our first heartbeat there
        would leave us out (warnings, queues dropped and taken again a pass later)."""
        connected = set(self._pool.addresses)
        for addr in sorted(route.all_addrs() - connected):
            await self._membership.heartbeat_to(addr)

    async def _assigned(self, members: _MemberLists, topic: str) -> frozenset[MessageQueue] | None:
        """The queues of ``topic`` we should own, or None to leave them as they are."""
        state = self._state
        memory = self.memory
        if state.manual_assignment is not None:
            return frozenset(mq for mq in state.manual_assignment if mq.topic == topic)
        # The cached route: the NameServer client refreshes it every 30 s (as Java does)
        # and keeps the same object while it is unchanged, so it also keys the memo below.
        route = await self._namesrv.get_route(topic)
        if topic in memory.no_route:
            memory.no_route.discard(topic)
            self._state.missing_topics.discard(topic)
            self._log_route_change(topic, "topic_route_appeared")
        memo = memory.memos.get(topic)
        if memo is None or memo.route is not route:
            memo = memory.memos[topic] = _TopicMemo(route, route.read_queues())
            await self._introduce(route)
        if state.config.message_model is MessageModel.BROADCASTING:
            return frozenset(memo.queues)
        # One broker per group, its master else a slave (Java asks any broker of the topic).
        brokers = list(route.group_addrs().values())
        if not brokers:
            state.log.warning("rebalance_no_broker", topic=topic)
            return None
        cids = await members.for_brokers(brokers)
        if not cids:
            raise _NoMembers(others_only=False)
        if self._client_id not in cids:
            raise _NoMembers(others_only=True)
        strategy = self.allocate
        if memo.cids != cids or memo.strategy is not strategy:
            memory.allocations += 1
            mine = strategy(state.group, self._client_id, memo.queues, cids)
            memo.cids, memo.strategy, memo.mine = cids, strategy, frozenset(mine)
        return memo.mine

    async def _apply(self, targets: dict[str, frozenset[MessageQueue]]) -> None:
        """Revoke what is no longer ours, then start what is newly ours, across all topics."""
        state = self._state
        changes = plan(state.process_queues, targets)
        removed = [state.process_queues[mq] for mq in changes.revoke]
        added = list(changes.add)
        if (state.releasing or state.finishing) and added:
            added = self._not_releasing(added)
        self._pending_locks = False
        if state.resume_floors:
            self._forget_floors(targets)
        if not (removed or added):
            return
        if removed:
            await self._queues.revoke(removed)
            self._keep_floors(removed)
        added.sort()
        if added and self._locks is not None:
            wanted = len(added)
            added = sorted(await self._locks.lock(added))
            # Refused (the previous owner still holds them): the next pass comes in 1 s.
            self._pending_locks = len(added) < wanted
        starts = await self._start_offsets(added)
        started = []
        for mq in added:
            start = starts.get(mq)
            if start is None:
                continue  # logged; the next pass tries again
            offset, committed = start
            pq = ProcessQueue(mq, offset, state.cache_budget)
            if not committed:
                pq.tracker.mark_dirty()  # the flusher commits it, so a restart resumes here
            if self._locks is not None:
                pq.locked = True
                pq.last_lock_time = anyio.current_time()
            state.process_queues[mq] = pq
            await self._queues.start_queue(pq, state.subscriptions[mq.topic])
            started.append(mq)
        if not (removed or started):
            return
        total = sum(len(m) for m in targets.values())
        state.log.info(
            "rebalanced",
            topics=sorted({mq.topic for mq in [*started, *(pq.mq for pq in removed)]}),
            revoked=[str(p.mq) for p in removed],
            assigned=[str(m) for m in started],
            owned=total,
        )
        if started:
            await self._queues.assigned(started)

    def _keep_floors(self, removed: list[ProcessQueue]) -> None:
        """Keep the resume floor of each revoked queue that left its topic's route: its
        broker is gone, and no member consumes or commits it until it is back (see
        aiorocket.consumer.offsets)."""
        state = self._state
        if state.config.message_model is not MessageModel.CLUSTERING:
            return  # offsets of our own, in a local file
        if state.manual_assignment is not None:
            return  # the application revoked it itself
        memos = self.memory.memos
        for pq in removed:
            memo = memos.get(pq.mq.topic)
            if memo is not None and pq.mq not in memo.queue_set:
                state.resume_floors.keep(pq.mq, pq.tracker.resume_floor(state.auto_commit))

    def _forget_floors(self, targets: dict[str, frozenset[MessageQueue]]) -> None:
        """Forget the floors of queues back in the route but allocated to another member
        (or to nobody we know of: we are not in the member list): it may move them
        anywhere, so ours no longer hold, even if they come back to us later."""
        floors = self._state.resume_floors
        memos = self.memory.memos
        for mq in floors:
            mine = targets.get(mq.topic)
            memo = memos.get(mq.topic)
            if mine is not None and mq not in mine and memo is not None and mq in memo.queue_set:
                floors.forget((mq,))

    def _not_releasing(self, added: list[MessageQueue]) -> list[MessageQueue]:
        """Leave out queues revoked earlier whose handler is still running: a second
        consume loop must not start beside it. They start in the pass their release
        triggers."""
        state = self._state
        held = [mq for mq in added if state.waits_for(mq)]
        if not held:
            return added
        state.wanted_back.update(held)
        state.log.info("assignment_waits_for_release", queues=[str(mq) for mq in held])
        return [mq for mq in added if not state.waits_for(mq)]

    async def _start_offsets(self, mqs: list[MessageQueue]) -> dict[MessageQueue, tuple[int, bool]]:
        """Start offset of each queue and whether it is stored; a failed queue is left out.

        A computed start (no stored offset) is committed right away, together with the
        others, rather than one by one by the next flush; a failed commit is retried
        there. Without auto-commit the application decides what is committed, so it is
        left to it. A queue back from a dead broker resumes at its resume floor when the
        stored offset is behind it, and the floor is committed again either way (it is
        this client's own commit; see aiorocket.consumer.offsets).
        """
        commit = self._state.auto_commit
        floors = self._state.resume_floors
        store = self._offset_store
        out: dict[MessageQueue, tuple[int, bool]] = {}
        pending = iter(mqs)

        async def worker() -> None:
            for mq in pending:
                try:
                    offset, stored = await self.start_offset(mq)
                except RocketMQError as exc:
                    self._log_queue("start_offset_failed", mq, exc)
                    continue  # its floor is kept for the next pass
                floor = floors.take(mq)
                restored = resume_offset(offset if stored else None, floor)
                if restored is not None:
                    # Back after its broker died, which restarted with older offsets:
                    # resume at our own commits, and commit them again, whoever commits.
                    self._state.log.warning(
                        "stored_offset_behind_commits", topic=mq.topic,
                        broker=mq.broker_name, queue=mq.queue_id,
                        stored_offset=offset if stored else None, offset=restored,
                        hint="the broker lost offsets it had taken (it writes them to "
                        "disk every few seconds; a crash loses the rest): resuming at "
                        "this client's last commit instead of consuming them again",
                    )  # fmt: skip
                    offset, stored = restored, False
                if (commit or restored is not None) and not stored:
                    try:
                        await store.persist(mq, offset)
                    except RocketMQError as exc:
                        self._log_queue("start_offset_commit_failed", mq, exc)
                    else:
                        stored = True
                out[mq] = (offset, stored)

        async with anyio.create_task_group() as tg:
            for _ in range(min(START_OFFSET_CONCURRENCY, len(mqs))):
                tg.start_soon(worker)
        return out

    def _log_queue(self, event: str, mq: MessageQueue, exc: Exception) -> None:
        self._state.log.warning(
            event, topic=mq.topic, broker=mq.broker_name, queue=mq.queue_id, error=str(exc)
        )

    async def start_offset(self, mq: MessageQueue) -> tuple[int, bool]:
        """The offset to start at and whether it came from the store (Java:
        computePullFromWhere)."""
        stored = await self._offset_store.read(mq)
        if stored is not None and stored >= 0:
            return stored, True
        addr = await self._finder.reader(mq)
        if addr is None:
            raise RocketMQError(f"no broker for {mq}")
        broker = self._broker
        cfg = self._state.config
        where = cfg.consume_from_where
        if mq.topic.startswith(RETRY_TOPIC_PREFIX) or where is ConsumeFromWhere.FIRST_OFFSET:
            try:
                return await broker.get_min_offset(addr, mq), False
            except AccessDeniedError:
                # An ACL 2.0 broker allows GET_MIN_OFFSET with the Get action only, which a
                # consumer granted Sub (or a migrated ACL 1.0 SUB account) lacks, on the
                # retry topic always. Start where Java does without asking: 0, which the
                # broker's first pull answer moves up to the queue's minimum if need be.
                return 0, False
        if where is ConsumeFromWhere.LAST_OFFSET:
            return await broker.get_max_offset(addr, mq), False
        ts = cfg.consume_timestamp_ms
        if ts is None:
            ts = self._state.started_at_ms - 30 * 60 * 1000
        return await broker.search_offset(addr, mq, ts), False


@dataclass(frozen=True, slots=True)
class Plan:
    """What a rebalance pass changes: the queues to revoke and those to start."""

    revoke: tuple[MessageQueue, ...]
    add: tuple[MessageQueue, ...]


def plan(owned: Iterable[MessageQueue], targets: Mapping[str, frozenset[MessageQueue]]) -> Plan:
    """Compare the queues ``owned`` now with each topic's ``targets``: pure, no I/O.

    Only the topics in ``targets`` are planned (a topic left out, e.g. one with no route
    this pass, keeps its queues). ``add`` is sorted, so queues start in a stable order.
    """
    current: dict[str, list[MessageQueue]] = {}
    for mq in owned:
        if mq.topic in targets:
            current.setdefault(mq.topic, []).append(mq)
    revoke: list[MessageQueue] = []
    add: list[MessageQueue] = []
    for topic, mine in targets.items():
        have = current.get(topic, [])
        if len(have) == len(mine) and all(mq in mine for mq in have):
            continue  # the steady state: nothing to sort, log or start
        have_set = set(have)
        revoke.extend(mq for mq in have if mq not in mine)
        add.extend(mq for mq in mine if mq not in have_set)
    return Plan(tuple(revoke), tuple(sorted(add)))
