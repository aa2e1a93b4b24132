"""Invariants of the application's cancellations (``checker.INVARIANTS`` holds them
with the others): a transaction cancelled from outside."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from aiorocket.testing.sim.history import History

if TYPE_CHECKING:
    from aiorocket.testing.sim.checker import Bounds, Violation

__all__ = ["cancelled_txn_resolved"]


def cancelled_txn_resolved(history: History, bounds: Bounds) -> list[Violation]:
    """A transaction whose caller was cancelled (``send_in_transaction`` in a cancel
    scope whose deadline came: during the half send, the local transaction or the end)
    is reported neither done nor failed, and its half message, if stored, ends as the
    application's database says: visible once if the local transaction committed,
    never if it rolled back or never ran (the check-back resolves it; a cancelled
    caller never leaves it committed against the database, nor unresolved)."""
    from aiorocket.testing.sim.checker import Violation

    truth = {e.key: e.info["state"] for e in history.of("app_txn")}
    visible = Counter(e.key for e in history.of("txn_visible"))
    reported = {e.key for e in history.of("txn_reported")}
    reported |= {e.key for e in history.of("send_failed") if e.info.get("half")}
    unresolved = {e.key for e in history.of("txn_unresolved")}
    out = []
    for e in history.of("txn_cancelled"):
        key = e.key
        if key in reported:
            out.append(Violation("cancelled_txn_resolved", key, "cancelled, yet reported"))
        want = 1 if truth.get(key) == "commit" else 0
        if visible[key] != want or key in unresolved:
            out.append(Violation("cancelled_txn_resolved", key,
                                 f"cancelled (database then: {e.info.get('db')}); the "
                                 f"application's transaction: {truth.get(key, 'none')}; "
                                 f"visible {visible[key]} times"
                                 + ("; never resolved" if key in unresolved else "")))  # fmt: skip
    return out
