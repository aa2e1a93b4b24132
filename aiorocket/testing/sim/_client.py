"""The application side of a run: the handler the nemesis drives, and what a
workload observes of the client (errors it raised, tasks it left, messages it holds)."""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import anyio
import sniffio

from aiorocket.errors import RocketMQError
from aiorocket.testing.sim.feature_draws import settle_delay
from aiorocket.testing.sim.features import retry_result, supports_retry_delay

if TYPE_CHECKING:
    from aiorocket.testing.sim.history import History
    from aiorocket.testing.sim.nemesis import Schedule

__all__ = ["RenewerProbe", "SimHandler", "cancelled_from_outside", "client_tasks",
           "held_by_renewer", "record_after_close", "record_error"]


def _attempt(msg: Any) -> int:
    attempt = getattr(msg, "delivery_attempt", None)
    return int(attempt) if attempt else int(getattr(msg, "reconsume_times", 0)) + 1


class SimHandler:
    """The application's handler under the nemesis: per message (by index, the key's
    suffix) it raises on its first attempts, runs ``seconds`` long, or hangs; it records
    every call. ``inner`` (a user's handler) runs inside, if given."""

    def __init__(self, schedule: Schedule, history: History,
                 inner: Callable[[Any], Awaitable[None]] | None = None, *,
                 group_of: Callable[[str], tuple[str, int] | None] | None = None,
                 lane_of: Callable[[str], str | None] | None = None,
                 extra: dict[str, Any] | None = None, levels: bool = False) -> None:  # fmt: skip
        self.history = history
        self.inner = inner
        #: added to every event (``member``: whose handler; ``by_offset``: a pull
        #: consumer's message, settled when the group's offset passes it)
        self.extra = extra or {}
        #: (group, seq) of a key, for the order check of FIFO shapes (lite topics)
        self.group_of = group_of
        #: the client's FIFO lane of a key (a lite topic, contested ones included): its
        #: messages wait behind the lane's running handler (received_handed_on)
        self.lane_of = lane_of
        self.faults: dict[int, tuple[str, dict[str, Any]]] = {}
        for f in schedule.faults:
            if f.kind.startswith("handler_"):
                self.faults[f.args["message"]] = (f.kind[len("handler_"):], f.args)
        #: a retry delay is rounded up to the broker's delay levels (remoting pull)
        self.levels = levels
        if not supports_retry_delay():  # an old client under the simulator
            self.faults = {i: f for i, f in self.faults.items() if f[0] != "retry"}

    async def __call__(self, msg: Any) -> Any:
        key = bytes(msg.body).decode(errors="replace")
        attempt = _attempt(msg)
        tags: dict[str, Any] = dict(self.extra)
        place = self.group_of(key) if self.group_of is not None else None
        if place is not None:
            tags.update(group=place[0], seq=place[1])
        lane = self.lane_of(key) if self.lane_of is not None else None
        self.history.add("handler_start", key, attempt=attempt, **tags,
                         **({"lane": lane} if lane is not None else {}))  # fmt: skip
        try:
            kind, args = self.faults.get(_index(key), ("", {}))
            if kind == "raise" and attempt <= args["attempts"]:
                raise RuntimeError(f"sim: handler fails attempt {attempt}")
            if kind == "slow" and attempt == 1:
                await anyio.sleep(args["seconds"])
            if kind == "hang" and attempt == 1:
                await anyio.sleep_forever()
            if kind == "retry" and attempt <= args["attempts"]:
                # Reconsume(delay=): not back before the delay (a level's, on pull)
                delay = args["delay"]
                self.history.add("handler_failed", key, attempt=attempt, retry=delay,
                                 due=settle_delay(delay, levels=self.levels), **tags)
                return retry_result(delay)
            if self.inner is not None:
                await self.inner(msg)
        except BaseException:
            self.history.add("handler_failed", key, attempt=attempt, **self.extra)
            raise
        else:
            self.history.add("handler_ok", key, attempt=attempt, **tags)
        finally:
            self.history.add("handler_end", key, attempt=attempt, **self.extra)


def _index(key: str) -> int:
    try:
        return int(key.rsplit("-", 1)[1])
    except (IndexError, ValueError):
        return -1


async def record_after_close(history: History, name: str,
                             inflight: list[tuple[str, float]]) -> None:  # fmt: skip
    """After a member's close: the messages the servers still hold invisible for it
    (``inflight``: key, visible at) but those whose last handler call failed (they wait
    out their retry delay), and the client's tasks left."""
    now = anyio.current_time()
    last: dict[str, str] = {}
    for e in history.events:
        if e.kind in ("delivered", "handler_ok", "handler_failed", "lost_on_wire"):
            last[e.key] = e.kind
    # (a message whose last answer went to a silenced connection never reached the client)
    held = [key for key, visible_at in inflight if visible_at > now + 0.001
            and last.get(key) not in ("handler_failed", "lost_on_wire")]  # fmt: skip
    if held:
        history.add("held_after_close", "", keys=held, consumer=name)
    await anyio.sleep(0.5)
    left = client_tasks()
    if left:
        history.add("tasks_left", "", count=len(left), names=sorted(set(left))[:5])


def record_error(history: History, exc: BaseException, where: str) -> None:
    """An exception that reached the application: typed (aiorocket.errors) or not."""
    errors = getattr(exc, "exceptions", None)
    leaves = list(errors) if errors else [exc]
    typed = all(isinstance(e, RocketMQError) for e in leaves)
    history.add("app_error", "", where=where, error=repr(exc)[:300], typed=typed)


def held_by_renewer(consumer: Any) -> dict[str, int]:
    """What the consumer's pop renewer holds, by why (``memory_within_cache``):

    * ``in_hand``: unsettled (in the cache: queued or in a handler);
    * ``owed``: settled on the client's side with a request still owed to the server
      for it: its ack queued, waiting for its retry or in a request (the renewer keeps
      it until the ack is answered, 309b192), its nack in a request or in the settler's
      backlog;
    * ``count``: settled with nothing owed (its ack answered, refused for good or left
      to the close): a leak, it must have left at once;
    * ``stranded``: its ack owed, yet in none of the ack batcher's lists (never sent
      again): a leak too.

    Read between two steps of the client's tasks, so each message is in one state. An
    old client without these states (no ``_ack_state``) counts every settled message
    held as a leak, as issue 38 item 12 was."""
    runtime = getattr(getattr(consumer, "_backend", None), "runtime", None)
    renewer = getattr(runtime, "renewer", None)
    batches = getattr(renewer, "_held", None) or []
    acks = getattr(runtime, "acks", None)
    queued = {id(m) for msgs in getattr(acks, "_pending", {}).values() for m in msgs}
    queued |= {id(m) for _, _, msgs in getattr(acks, "_retrying", ()) for m in msgs}
    backlog = getattr(getattr(runtime, "settler", None), "_backlog", {})
    nacks = {id(n.msg) for n in backlog.values()}
    out = {"in_hand": 0, "owed": 0, "count": 0, "stranded": 0}
    for _, _, batch in batches:
        for m in batch:
            state = getattr(m, "_ack_state", 0)
            if not m._settled:
                out["in_hand"] += 1
            elif getattr(m, "_nacking", False) or id(m) in nacks:
                out["owed"] += 1
            elif state:
                # queued (1) must be in a list of the batcher; sending (2) is in a request
                out["owed" if state != 1 or id(m) in queued else "stranded"] += 1
            else:
                out["count"] += 1
    return out


class RenewerProbe:
    """Samples what a consumer's renewer holds (``held_by_renewer``) while the run goes
    on: the first sample with a leak, and the last one, go into the history as ``held``
    events (``memory_within_cache``); the states are exact at any instant, so a sample
    needs no quiet moment."""

    def __init__(self, history: History, consumer: Any, name: str) -> None:
        self.history, self.consumer, self.name = history, consumer, name
        self._caught = False

    def sample(self, *, last: bool = False) -> None:
        held = held_by_renewer(self.consumer)
        leak = bool(held["count"] or held["stranded"])
        if last or (leak and not self._caught):
            self._caught = self._caught or leak
            self.history.add("held", "", where=self.name, **held)


def client_tasks() -> list[str]:
    """Names of the running tasks of the client (not of the simulated servers), on trio
    (an asyncio run's tasks are not walked: none)."""
    if "trio" not in sys.modules or sniffio.current_async_library() != "trio":
        return []
    import trio

    out: list[str] = []

    def walk(task: trio.lowlevel.Task) -> None:
        for nursery in task.child_nurseries:
            for child in nursery.child_tasks:
                if child.name.startswith("aiorocket.") and \
                        not child.name.startswith("aiorocket.testing."):  # fmt: skip
                    out.append(child.name)
                walk(child)

    root = trio.lowlevel.current_root_task()
    if root is not None:
        walk(root)
    return out


async def cancelled_from_outside(body: Callable[[], Awaitable[None]], schedule: Schedule,
                                 history: History, name: str, *,
                                 client: str | None = None) -> bool:  # fmt: skip
    """Run ``body`` (member ``name``'s ``async with consumer``); the first member's is
    cancelled from outside at its drawn time (``app_cancel``'s ``at`` seconds from now;
    issue 40: the application cancelled at a random point): ``app_cancelled`` and
    ``close_start`` (naming ``client``, the consumer's client id, when given) when it
    is. True if it was."""
    cancels = [f.args["at"] for f in schedule.of("app_cancel")] if name == "first" else []
    at = cancels[0] if cancels else None
    if at is None:
        await body()
        return False
    scope = anyio.CancelScope()

    async def canceller() -> None:
        await anyio.sleep(at)
        history.add("app_cancelled", "", consumer=name)
        who = {"client": client} if client is not None else {}
        history.add("close_start", "", consumer=name, **who)
        scope.cancel()

    async with anyio.create_task_group() as tg:
        tg.start_soon(canceller)
        with scope:
            await body()
        tg.cancel_scope.cancel()
    return scope.cancelled_caught
