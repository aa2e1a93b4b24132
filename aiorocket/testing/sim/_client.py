"""The application side of a run: the handler the nemesis drives, and what a
workload observes of the client (errors it raised, tasks it left, messages it holds)."""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import anyio

from aiorocket.errors import RocketMQError

if TYPE_CHECKING:
    from aiorocket.testing.sim.history import History
    from aiorocket.testing.sim.nemesis import Schedule

__all__ = ["SimHandler", "client_tasks", "held_by_renewer", "record_error"]


def _attempt(msg: Any) -> int:
    attempt = getattr(msg, "delivery_attempt", None)
    return int(attempt) if attempt else int(getattr(msg, "reconsume_times", 0)) + 1


class SimHandler:
    """The application's handler under the nemesis: per message (by index, the key's
    suffix) it raises on its first attempts, runs ``seconds`` long, or hangs; it records
    every call. ``inner`` (a user's handler) runs inside, if given."""

    def __init__(self, schedule: Schedule, history: History,
                 inner: Callable[[Any], Awaitable[None]] | None = None) -> None:  # fmt: skip
        self.history = history
        self.inner = inner
        self.faults: dict[int, tuple[str, dict[str, Any]]] = {}
        for f in schedule.faults:
            if f.kind.startswith("handler_"):
                self.faults[f.args["message"]] = (f.kind[len("handler_"):], f.args)

    async def __call__(self, msg: Any) -> None:
        key = bytes(msg.body).decode(errors="replace")
        attempt = _attempt(msg)
        self.history.add("handler_start", key, attempt=attempt)
        try:
            kind, args = self.faults.get(_index(key), ("", {}))
            if kind == "raise" and attempt <= args["attempts"]:
                raise RuntimeError(f"sim: handler fails attempt {attempt}")
            if kind == "slow" and attempt == 1:
                await anyio.sleep(args["seconds"])
            if kind == "hang" and attempt == 1:
                await anyio.sleep_forever()
            if self.inner is not None:
                await self.inner(msg)
        except BaseException:
            self.history.add("handler_failed", key, attempt=attempt)
            raise
        else:
            self.history.add("handler_ok", key, attempt=attempt)
        finally:
            self.history.add("handler_end", key, attempt=attempt)


def _index(key: str) -> int:
    try:
        return int(key.rsplit("-", 1)[1])
    except (IndexError, ValueError):
        return -1


def record_error(history: History, exc: BaseException, where: str) -> None:
    """An exception that reached the application: typed (aiorocket.errors) or not."""
    errors = getattr(exc, "exceptions", None)
    leaves = list(errors) if errors else [exc]
    typed = all(isinstance(e, RocketMQError) for e in leaves)
    history.add("app_error", "", where=where, error=repr(exc)[:300], typed=typed)


def held_by_renewer(consumer: Any) -> int:
    """Messages the consumer's pop renewer still holds (settled or not)."""
    runtime = getattr(getattr(consumer, "_backend", None), "runtime", None)
    renewer = getattr(runtime, "renewer", None)
    batches = getattr(renewer, "_held", None) or []
    return sum(len(batch) for _, _, batch in batches)


def client_tasks() -> list[str]:
    """Names of the running tasks of the client (not of the simulated servers), on trio."""
    if "trio" not in sys.modules:
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
