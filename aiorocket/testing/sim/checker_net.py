"""Invariants of network faults (``checker.INVARIANTS`` holds them with the others): a
client leaves a half-open connection and reconnects within its bound."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiorocket.testing.sim.history import History

if TYPE_CHECKING:
    from aiorocket.testing.sim.checker import Bounds, Violation

__all__ = ["reconnects_after_half_open"]


def reconnects_after_half_open(history: History, bounds: Bounds) -> list[Violation]:
    """docs/reliability.md: a connection to a broker that went silent without closing
    is dropped when the next request on it times out (a heartbeat, an offset commit),
    and the client goes on over a new one: a request on a new connection within
    ``bounds.reconnect`` of the silence (or the event's own ``within``: the gRPC
    keepalive's bound), while the client runs (a close or the run's end within the
    window: not judged)."""
    from aiorocket.testing.sim.checker import Violation

    ends = [e.at for e in history.of("end")]
    end = ends[-1] if ends else max((e.at for e in history.events), default=0.0)
    closes = [e.at for e in history.of("close_start")]
    out = []
    for silent in history.of("half_open"):
        within = float(silent.info.get("within", bounds.reconnect))
        due = silent.at + within
        if due > end or any(silent.at <= at <= due for at in closes):
            continue
        broker = silent.info["broker"]
        if not any(e.info.get("broker") == broker and silent.at <= e.at <= due
                   for e in history.of("reconnected")):  # fmt: skip
            out.append(Violation("reconnects_after_half_open", "",
                                 f"{broker}'s connections silent at {silent.at:.2f}; no "
                                 f"request on a new one within {within}s"))  # fmt: skip
    return out
