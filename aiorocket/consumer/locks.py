"""Broker-side queue locks for orderly consumption (LOCK_BATCH_MQ / UNLOCK_BATCH_MQ).

The locks of the queues a consumer owns, and of revoked queues whose handler is still
running or whose last commit is still tried (``ConsumerState.releasing``), are renewed
every ``lock_renew_interval``. A queue whose lock is refused (another consumer still
holds it) or could not be renewed (the broker did not answer) is asked for again after
``LOCK_RETRY_DELAY``, not a whole interval later: one request per broker for all such
queues, so waiting queues cost a small request per second, not a storm. A broker that
does not answer changes nothing locally: its queues stay locked until the lock's age
passes ``lock_max_live_time``, as the Java client's ``isLockExpired`` has it.

The close's unlock (``unlock_at_close``) is the last word to each broker: no lock
request starts after it began, and one already sent (a renewal or a rebalance's lock
that the close's cancellation caught on the wire) is waited for. Its caller stops
waiting when cancelled, but the broker still applies it, and a 5.x broker handles
LOCK_BATCH_MQ and UNLOCK_BATCH_MQ on a pool of admin threads, so an unlock sent before
its answer may be applied first: the lock then outlives the close and keeps the queues
from their next owner until the broker expires it (60 s). The Java client has the same
order: ``lockMQPeriodically`` and ``unlockAllMQ`` are synchronized, and the stopped
service starts no renewal.

Each broker's close unlock runs on its own (the close's bound is one for all): a frozen
broker's wait and two tries would otherwise take the whole bound and leave the queues
of the brokers after it locked. It names every queue this consumer may hold at the broker
(a lock asked for, not refused, not unlocked since), not only the started ones: a
rebalance's lock caught on the wire by the close is granted for queues that never started.

A revoked queue's unlock (``unlock``) has the same order against the renewal: it waits
for a lock request in flight that names the queue, and a renewal that picked the queue
before its unlock began leaves it out when it sends (and never picks it while the unlock
runs). Before, a renewal caught between picking its queues and sending them could be
applied after the revoke's unlock: the queue stayed locked by this consumer, which no
longer consumed it, and its new owner could not lock it until the broker expired the
lock (60 s).

Masters are looked up in the cached routes; the queues a cached route does not name cost
one route query per topic, not one per queue, and the close unlocks the brokers it
knows while those queries run.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

import anyio

from aiorocket._signal import Signal
from aiorocket.errors import ConnectionClosedError, RequestTimeoutError, RocketMQError
from aiorocket.message import MessageQueue

if TYPE_CHECKING:
    from aiorocket.client.broker import BrokerClient
    from aiorocket.consumer.brokers import BrokerFinder
    from aiorocket.consumer.process_queue import ProcessQueue
    from aiorocket.consumer.state import ConsumerState

__all__ = ["LOCK_RETRY_DELAY", "QueueLocks"]

#: seconds before a refused or failed lock is asked for again (Java retries a refused
#: queue's rebalance after 0.5 s and delays its pulls by a few seconds).
LOCK_RETRY_DELAY = 1.0


class QueueLocks:
    """The broker locks of an orderly consumer's queues.

    Parameters
    ----------
    state:
        The consumer's shared state: the held queues, group, configuration.
    broker:
        The broker request client (LOCK_BATCH_MQ / UNLOCK_BATCH_MQ).
    finder:
        Finds each queue's master (locks live on the master).
    client_id:
        This client's id: the lock owner the broker records.
    """

    def __init__(
        self, state: ConsumerState, broker: BrokerClient, finder: BrokerFinder, client_id: str
    ) -> None:
        self._state = state
        self._broker = broker
        self._finder = finder
        self._client_id = client_id
        #: notified when a queue's lock is refused at renewal: ``keep`` asks again soon
        self.lost = Signal()
        #: set by the close: no lock request is sent after it
        self._closing = False
        #: lock requests sent and not answered yet, per broker and per queue, and a
        #: signal when one ends
        self._in_flight: Counter[str] = Counter()
        self._locking: Counter[MessageQueue] = Counter()
        self._answered = Signal()
        #: unlocks begun per queue (a lock picked before one began is not sent), and
        #: those still running (the renewal does not pick their queues)
        self._unlocks_begun: Counter[MessageQueue] = Counter()
        self._unlocking: Counter[MessageQueue] = Counter()
        #: queues a lock was asked for, not refused and not unlocked since: the close
        #: unlocks them all
        self._maybe_held: set[MessageQueue] = set()

    async def try_lock(
        self, mqs: list[MessageQueue]
    ) -> tuple[set[MessageQueue], set[MessageQueue]]:
        """LOCK_BATCH_MQ on each broker: (the queues we now hold, the queues not asked
        for: their broker could not be asked, or their unlock began since this call).
        The others were refused: another consumer holds them."""
        state = self._state
        picked = {mq: self._unlocks_begun[mq] for mq in mqs}
        locked: set[MessageQueue] = set()
        unknown = set(mqs)
        for addr, group in (await self._finder.masters(mqs)).items():
            if self._closing:
                break  # the close unlocks; these stay unknown
            # Checked as it is sent (no await in between): the broker may apply this
            # lock after an unlock sent before it (see the module docstring).
            group = [mq for mq in group if self._unlocks_begun[mq] == picked[mq]]
            if not group:
                continue
            try:
                got = await self._lock_batch(addr, group)
            except RocketMQError as exc:
                state.log.warning("lock_failed", broker=addr, queues=len(group), error=str(exc))
                continue
            locked |= got
            unknown.difference_update(group)
        return locked & set(mqs), unknown

    async def _lock_batch(self, addr: str, mqs: list[MessageQueue]) -> set[MessageQueue]:
        """One LOCK_BATCH_MQ, counted until answered (bounded by ``request_timeout``).
        Shielded: the broker applies a request sent whether or not its caller still
        waits, so a cancelled caller (the close stopping ``keep``) waits for the answer
        too, and an unlock knows when it came."""
        self._maybe_held.update(mqs)
        self._in_flight[addr] += 1
        self._locking.update(mqs)
        try:
            with anyio.CancelScope(shield=True):
                got = await self._broker.lock_batch(addr, self._state.group, self._client_id, mqs)
            self._maybe_held.difference_update(mq for mq in mqs if mq not in got)  # refused
            return got
        finally:
            self._in_flight[addr] -= 1
            self._locking.subtract(mqs)
            self._answered.notify()

    async def lock(self, mqs: list[MessageQueue]) -> set[MessageQueue]:
        """LOCK_BATCH_MQ on each broker; the queues this consumer now holds."""
        locked, _ = await self.try_lock(mqs)
        return locked

    async def unlock(self, mqs: list[MessageQueue]) -> None:
        """UNLOCK_BATCH_MQ on each broker, one try (a revoked queue's), after the lock
        requests in flight that name one of ``mqs`` were answered (or timed out).

        Cancelled or failed before its broker answered, a queue stays among those the
        close unlocks."""
        if not mqs:
            return
        self._unlocks_begun.update(mqs)
        self._unlocking.update(mqs)
        try:
            while any(self._locking[mq] for mq in mqs):
                await self._answered.wait()  # bounded: a lock request's request_timeout
            for addr, group in (await self._finder.masters(mqs)).items():
                if await self._unlock_on(addr, group, tries=1):
                    self._maybe_held.difference_update(group)
        finally:
            self._unlocking.subtract(mqs)

    async def _unlock_on(self, addr: str, mqs: list[MessageQueue], *, tries: int) -> bool:
        """UNLOCK_BATCH_MQ on one broker; one lost with its connection (reset, or timed
        out and closed) is sent again on a new one, up to ``tries`` sends in all.
        Whether the broker answered success."""
        state = self._state
        for left in range(tries - 1, -1, -1):
            try:
                await self._broker.unlock_batch(addr, state.group, self._client_id, mqs)
            except (ConnectionClosedError, RequestTimeoutError) as exc:
                if left:
                    state.log.info("unlock_retried", broker=addr, error=str(exc))
                    continue
                state.log.warning("unlock_failed", broker=addr, error=str(exc))
            except RocketMQError as exc:
                state.log.warning("unlock_failed", broker=addr, error=str(exc))
            else:
                return True
            break
        return False

    async def unlock_at_close(self, mqs: list[MessageQueue]) -> None:
        """The close's unlock of ``mqs`` and every queue it may hold at the broker: each
        broker's after its lock requests already sent were answered (or timed out), and
        no new one starts (see the module docstring); the brokers side by side, those
        the cached routes do not name after one route query per topic."""
        self._closing = True
        everything = sorted({*mqs, *self._maybe_held})
        if not everything:
            return
        known, missing = self._finder.cached_masters(everything)
        async with anyio.create_task_group() as tg:
            for addr, group in known.items():
                tg.start_soon(self._unlock_at_close_on, addr, group)
            for topic, group in missing.items():
                tg.start_soon(self._unlock_at_close_looked_up, tg, topic, group)

    async def _unlock_at_close_looked_up(
        self, tg: anyio.abc.TaskGroup, topic: str, mqs: list[MessageQueue]
    ) -> None:
        for addr, group in (await self._finder.masters_of_topic(topic, mqs)).items():
            tg.start_soon(self._unlock_at_close_on, addr, group)

    async def _unlock_at_close_on(self, addr: str, mqs: list[MessageQueue]) -> None:
        while self._in_flight[addr]:
            await self._answered.wait()
        # Lost, the unlock leaves the queues locked until the broker expires them (60 s),
        # kept from the next owner: sent once more (the caller's bound covers both).
        await self._unlock_on(addr, mqs, tries=2)

    def _needs_retry(self, pq: ProcessQueue, now: float) -> bool:
        """Refused, or its last renewal failed (the lock is older than one interval)."""
        return not pq.locked or now - pq.last_lock_time >= self._state.config.lock_renew_interval

    async def renew(self, *, retry_only: bool = False) -> None:
        """Lock every held queue again (``retry_only``: those refused or not renewed)."""
        now = anyio.current_time()
        # Not those whose unlock runs: the lock could be applied after it.
        pqs = [pq for pq in self._state.held_queues() if not self._unlocking[pq.mq]]
        if retry_only:
            pqs = [pq for pq in pqs if self._needs_retry(pq, now)]
        if not pqs:
            return
        locked, unknown = await self.try_lock([pq.mq for pq in pqs])
        now = anyio.current_time()
        held = {id(pq) for pq in self._state.held_queues()}
        for pq in pqs:
            if pq.mq in unknown:
                continue  # no answer: unchanged, the lock's age decides (valid)
            if id(pq) not in held:
                continue  # revoked meanwhile: a grant must not make it consumable
            was = pq.locked
            pq.locked = pq.mq in locked
            if pq.locked:
                pq.last_lock_time = now
            if was != pq.locked:
                self._state.log.warning("queue_lock_changed", queue=str(pq.mq), locked=pq.locked)
                if was:
                    self.lost.notify()  # keep() asks again soon
            pq.notify()

    async def keep(self) -> None:
        """Renew the locks every ``lock_renew_interval``; retry refused or failed ones after
        ``LOCK_RETRY_DELAY`` in between. Runs until cancelled."""
        interval = self._state.config.lock_renew_interval
        next_renewal = anyio.current_time() + interval
        while True:
            now = anyio.current_time()
            wait = next_renewal - now
            if any(self._needs_retry(pq, now) for pq in self._state.held_queues()):
                wait = min(wait, LOCK_RETRY_DELAY)
            with anyio.move_on_after(max(wait, 0.0)) as scope:
                await self.lost.wait()
            if not scope.cancelled_caught:
                continue  # a lock was refused just now: ask again after the retry delay
            if anyio.current_time() >= next_renewal:
                next_renewal = anyio.current_time() + interval
                await self.renew()
            else:
                await self.renew(retry_only=True)

    def valid(self, pq: ProcessQueue) -> bool:
        """Held, and renewed within ``lock_max_live_time`` (Java's ``isLockExpired``)."""
        return (
            pq.locked
            and anyio.current_time() - pq.last_lock_time <= self._state.config.lock_max_live_time
        )
