"""Idempotent consumption (issue 44's ``dedup=``) in a run, and its invariant.

``draw_dedup`` draws it for the pull workload's handler shapes (concurrent and orderly;
not a batch, whose failed call retries the messages its handler did, nor broadcasting,
where every member handles every message), from a stream of its own
(``random.Random(f"{workload}:{seed}:dedup")``, drawn last, so a seed's other faults
stay the ones it drew before): a ``claim_ttl`` of the default or a few seconds (shorter
than a handler may run: its claims are renewed). Every member of the run shares one
``MemoryDedupStore`` on the virtual clock, as the members of a group share Redis, keyed
by the message's body (the workload's key, the same in every copy).

``handled_once_with_dedup``: with it, no key's handler succeeds twice (issue 44: "the
handler runs once per message"), whatever crashed, joined, left or was cancelled. A
client without ``dedup=`` (an old commit) runs without it (``feature_missing``)."""

from __future__ import annotations

import random
import weakref
from collections import Counter
from typing import TYPE_CHECKING, Any

import anyio

if TYPE_CHECKING:
    from aiorocket.testing.sim.checker import Bounds, Violation
    from aiorocket.testing.sim.history import History
    from aiorocket.testing.sim.nemesis import Schedule

__all__ = ["dedup_kwargs", "draw_dedup", "handled_once_with_dedup"]

#: the store of each run, by the object its members share (the simulated cluster)
_STORES: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


def draw_dedup(seed: int, workload: str, params: dict[str, Any]) -> dict[str, Any]:
    """The run's ``dedup`` parameters, if drawn: ``{"dedup_claim_ttl": ...}``."""
    if workload != "pull_remoting" or params.get("shape", "handler") not in ("handler",
                                                                             "orderly"):
        return {}
    rng = random.Random(f"{workload}:{seed}:dedup")
    if rng.random() >= 0.4:
        return {}
    return {"dedup_claim_ttl": rng.choice([None, 2.0, 5.0])}


def dedup_kwargs(shared: object, schedule: Schedule, history: History) -> dict[str, Any]:
    """The consumer's ``dedup=`` setting, if drawn, with the store of the run ``shared``
    names (its members' common object)."""
    if "dedup_claim_ttl" not in schedule.params:
        return {}
    try:
        from aiorocket.consumer.dedup import Dedup, MemoryDedupStore
    except ImportError:
        history.add("feature_missing", "", feature="dedup")
        return {}
    store = _STORES.get(shared)
    if store is None:
        try:
            store = MemoryDedupStore(clock=anyio.current_time)  # type: ignore[call-arg,unused-ignore]
        except TypeError:  # a store on the process's clock: claims expire out of step
            store = MemoryDedupStore()
        _STORES[shared] = store
        history.add("dedup_on", "", claim_ttl=schedule.params["dedup_claim_ttl"])
    dedup = Dedup(store, key=lambda m: bytes(m.body).decode(errors="replace"),
                  claim_ttl=schedule.params["dedup_claim_ttl"])  # fmt: skip
    return {"dedup": dedup}


def handled_once_with_dedup(history: History, bounds: Bounds) -> list[Violation]:
    """With ``dedup=``, no key's handler succeeds twice."""
    if not history.of("dedup_on"):
        return []
    from aiorocket.testing.sim.checker import Violation

    done = Counter(e.key for e in history.events if e.kind == "handler_ok")
    return [Violation("handled_once_with_dedup", key, f"its handler succeeded {n} times")
            for key, n in sorted(done.items()) if n > 1]  # fmt: skip
