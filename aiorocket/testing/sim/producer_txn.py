"""Workload: transactions with check-backs over remoting, against ``SimSendCluster``.

The application (``TxnApp``) keeps its own truth, a database of what became of each
transaction: ``intent`` before the half message is sent, ``pending`` while the local
transaction runs, then ``commit`` or ``rollback`` (a crash rolls back what was not
committed, as a database does). Its local transaction and its checker read and write
that database only, so their answers are true; the checker answers UNKNOWN while a
transaction may still commit. The nemesis makes local transactions slow, answer
UNKNOWN or raise, loses the producer's end, checks back early (while the local
transaction runs), makes the checker fail once, and crashes the producer at a random
point; a second producer of the group then answers the check-backs.

The checker holds the brokers' truth (``txn_visible``, ``txn_end``) against the
database (``app_txn``) and the answers given (``local_done``, ``check_answer``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import anyio

from aiorocket.errors import ConnectionClosedError, RequestTimeoutError
from aiorocket.message import Message
from aiorocket.producer import Producer, TransactionState
from aiorocket.testing.sim._client import client_tasks, record_error
from aiorocket.testing.sim.producer_broker import (
    CHECK_INTERVAL,
    CHECK_MAX,
    TXN_TIMEOUT,
    SimSendCluster,
)
from aiorocket.testing.sim.producer_sends import app_scope
from aiorocket.testing.sim.remoting import TOPIC

if TYPE_CHECKING:
    from aiorocket.testing.sim.history import History
    from aiorocket.testing.sim.nemesis import Schedule

__all__ = ["SimLocalError", "TxnApp", "producer_txn"]

GROUP = "sim-producers"
#: virtual seconds the check-backs need at most to resolve every half
RESOLVE = TXN_TIMEOUT + (CHECK_MAX + 2) * CHECK_INTERVAL
_STATES = {"commit": TransactionState.COMMIT, "rollback": TransactionState.ROLLBACK,
           "unknown": TransactionState.UNKNOWN}  # fmt: skip


class SimLocalError(Exception):
    """The application's own error, raised by a local transaction (it is expected to
    reach the application as it is)."""


def _key(msg: Any) -> str:
    keys = getattr(msg, "keys", None)
    keys = keys() if callable(keys) else keys
    return str(keys[0]) if keys else bytes(msg.body).decode(errors="replace")


class TxnApp:
    """The application: its database, local transaction and checker (module docstring)."""

    def __init__(self, schedule: Schedule, history: History) -> None:
        self.history = history
        self.db: dict[str, str] = {}
        self.plan = {f.args["key"]: f.args for f in schedule.of("local_txn")}
        self.checker_fails = {f.args["key"] for f in schedule.of("checker_raises")}
        #: transactions the application cancels from outside, after how long
        self.cancels = {f.args["key"]: f.args["after"] for f in schedule.of("send_cancel")}
        #: the database's state of each transaction when a cancellation cut it
        self.cut: dict[str, str] = {}

    async def local(self, msg: Any, result: Any) -> TransactionState:
        key = _key(msg)
        args = self.plan[key]
        self.db[key] = "pending"
        try:
            await anyio.sleep(args["seconds"])
        except BaseException:
            self.cut[key] = "pending"
            self.db[key] = "rollback"  # the crash: the database rolls it back
            raise
        outcome = args["outcome"]
        if outcome == "raise":
            self.db[key] = "rollback"
            self.history.add("local_done", key, state="unknown")
            raise SimLocalError(f"sim: local transaction of {key} fails")
        self.db[key] = args.get("truth", outcome)
        self.history.add("local_done", key, state=outcome)
        return _STATES[outcome]

    async def check(self, msg: Any) -> TransactionState:
        key = _key(msg)
        if key in self.checker_fails:
            self.checker_fails.discard(key)
            raise RuntimeError(f"sim: the checker fails for {key}")  # asked again later
        state = self.db.get(key, "rollback")  # no record: never ran
        answer = state if state in ("commit", "rollback") else "unknown"
        self.history.add("check_answer", key, state=answer, db=state)
        return _STATES[answer]

    async def send(self, producer: Producer, key: str) -> None:
        """One transaction, in a cancel scope of the application's own (``send_cancel``:
        its deadline comes at a drawn time; then nothing is reported, the database
        rolls back what had not committed, and the check-back resolves the half)."""
        self.db[key] = "intent"
        with app_scope(self.cancels, key) as scope:
            await self._send(producer, key)
        if scope.cancelled_caught:
            # where it was cut: the half send (intent), the local transaction (pending),
            # the end (commit, rollback, unknown)
            self.history.add("txn_cancelled", key, db=self.db[key],
                             during=self.cut.get(key, self.db[key]))  # fmt: skip

    async def _send(self, producer: Producer, key: str) -> None:
        started = self.history.now()
        try:
            result = await producer.send_in_transaction(
                Message(TOPIC, key.encode(), keys=[key]), self.local
            )
        except SimLocalError:
            return
        except Exception as exc:
            if self.db[key] == "intent":  # the half send failed: the transaction never runs
                self.db[key] = "rollback"
            # the half send is one attempt (never resent): a closed connection or a
            # timeout (its request timeout's, which may come before the send's) may have
            # stored it (docs/producer.md); the check-back then resolves it
            uncertain = isinstance(exc, (ConnectionClosedError, RequestTimeoutError))
            self.history.add("send_failed", key, error=repr(exc)[:200], half=True,
                             elapsed=self.history.now() - started, timeout=5.0,
                             uncertain=uncertain)  # fmt: skip
            record_error(self.history, exc, f"send_in_transaction {key}")
        except BaseException:
            self.cut.setdefault(key, self.db[key])
            if self.db[key] in ("intent", "pending"):
                self.db[key] = "rollback"
            raise
        else:
            self.history.add("txn_reported", key, state=result.state.value.lower())

    def crashed(self) -> None:
        """What the crash left undecided, the database rolled back."""
        for key, state in self.db.items():
            if state in ("intent", "pending"):
                self.db[key] = "rollback"

    def record(self) -> None:
        for key, state in sorted(self.db.items()):
            self.history.add("app_txn", key, state=state)


async def _tasks_left(history: History) -> None:
    await anyio.sleep(0.5)
    left = client_tasks()
    if left:
        history.add("tasks_left", "", count=len(left), names=sorted(set(left))[:5])


async def producer_txn(
    schedule: Schedule, history: History, handler: Callable[[Any], Awaitable[None]] | None = None
) -> None:
    p = schedule.params
    app = TxnApp(schedule, history)
    crash = next((f.args["seconds"] for f in schedule.of("crash_at")), None)
    async with SimSendCluster(schedule, history, brokers=2, queues=2) as cluster:
        addr = cluster.namesrv.address
        producer = Producer(GROUP, addr, retries=p["retries"], send_timeout=5.0,
                            transaction_checker=app.check)  # fmt: skip
        keys = [f"t-{i}" for i in range(p["messages"])]
        try:
            async with producer:
                for i in range(4):  # latencies known on both brokers
                    await producer.send(Message(TOPIC, f"warm-{i}".encode()))
                with anyio.move_on_after(crash if crash is not None else 1e9):
                    async with anyio.create_task_group() as tg:
                        for lane in range(p["concurrency"]):
                            tg.start_soon(_lane, app, producer, keys[lane::p["concurrency"]])
                    # no crash: this producer answers the check-backs until all resolved
                    with anyio.move_on_after(RESOLVE):
                        while cluster.unresolved():  # noqa: ASYNC110  (the brokers' truth)
                            await anyio.sleep(0.2)
                history.add("close_start", "")
        except Exception as exc:
            record_error(history, exc, "producer")
        history.add("close_end", "")
        await _tasks_left(history)
        await anyio.sleep(4.0)  # what a slow broker still stores after the close, stored
        if crash is not None:
            app.crashed()
        if cluster.unresolved():  # a second member of the group answers the rest
            second = Producer(GROUP, addr, transaction_checker=app.check)
            try:
                async with second:
                    await second.accept_checks(TOPIC)
                    with anyio.move_on_after(RESOLVE):
                        while cluster.unresolved():  # noqa: ASYNC110
                            await anyio.sleep(0.2)
            except Exception as exc:
                record_error(history, exc, "second producer")
        for half in cluster.unresolved():
            history.add("txn_unresolved", half.key)
        app.record()
        history.add("end")


async def _lane(app: TxnApp, producer: Producer, keys: list[str]) -> None:
    for key in keys:
        await app.send(producer, key)
