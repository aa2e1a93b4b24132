"""Invariants of network faults (``checker.INVARIANTS`` holds them with the others): a
client leaves a half-open connection and reconnects within its bound; no receive
reaches the Proxy without the client's settings (after a restart or a release)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiorocket.testing.sim.history import History

if TYPE_CHECKING:
    from aiorocket.testing.sim.checker import Bounds, Violation

__all__ = ["receives_after_settings", "reconnects_after_half_open"]


def reconnects_after_half_open(history: History, bounds: Bounds) -> list[Violation]:
    """docs/reliability.md: a connection to a broker that went silent without closing
    is dropped when the next request on it times out (a heartbeat, an offset commit),
    and the client goes on over a new one: a request on a new connection within
    ``bounds.reconnect`` of the silence (or the event's own ``within``: the gRPC
    keepalive's bound), while the client runs (a close or the run's end within the
    window: not judged). An application that paused consumption in that window sends
    no pull: the heartbeat that times out drops the connection and the next heartbeat
    opens a new one (``bounds.reconnect_paused``). A POP silence that falls in the
    receive backoff after a refused pop gets no more than any other (``within``): the
    rest of that backoff comes before the pop that times out, and none after it (the
    lost pop ends the backoff: ``silence.pop_reconnect_bound``)."""
    from aiorocket.testing.sim.checker import Violation

    ends = [e.at for e in history.of("end")]
    end = ends[-1] if ends else max((e.at for e in history.events), default=0.0)
    closes = [e.at for e in history.of("close_start")]
    out = []
    for silent in history.of("half_open"):
        within = float(silent.info.get("within", bounds.reconnect))
        if "within" not in silent.info and _paused_in(history, silent.at, silent.at + within):
            within = bounds.reconnect_paused
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


def _paused_in(history: History, start: float, end: float) -> bool:
    """Whether consumption was paused (any of it) at some time of [start, end]."""
    paused: set[str] = set()  # consumers paused at the time reached
    for e in sorted(history.events, key=lambda e: e.at):
        if e.at > end:
            break
        consumer = str(e.info.get("consumer", ""))
        if e.kind == "paused":
            paused.add(consumer)
            if e.at >= start:
                return True
        elif e.kind == "resumed":
            paused.discard(consumer)
        if e.at >= start and paused:
            return True
    return bool(paused)


def receives_after_settings(history: History, bounds: Bounds) -> list[Violation]:
    """docs/grpc.md (the release after a broken receive): the consumer's receives wait
    from before its NotifyClientTermination until its settings are answered again, and
    after a Proxy restart until the new Proxy answered its settings; a receive the Proxy
    refused for want of them (``"settings" is null``) reached it in that window."""
    from aiorocket.testing.sim.checker import Violation

    return [Violation("receives_after_settings", "",
                      f"a receive reached the Proxy at {e.at:.3f} without the client's "
                      f"settings ({e.info.get('why', '')})")
            for e in history.of("receive_refused")]  # fmt: skip


#: the events of spans in which the Proxy got or ran a client's requests late (the
#: ``_late`` variants' faults: ``arrival``, ``pool_busy``), each ending at ``until``
LATE_SPANS = ("arrival_held", "pool_busy")


def past_late_spans(history: History, start: float, due: float) -> float:
    """``due``, a bound from ``start`` on the client's answer, moved out by the time
    within it that the network held the client's requests or the Proxy's pool let them
    wait: that time is not the client's (as a Proxy refusing acks is not)."""
    spans = [(e.at, float(e.info["until"])) for e in history.events if e.kind in LATE_SPANS]
    if not spans:
        return due
    moved = due
    for _ in range(len(spans) + 1):  # each pass may bring another span into the window
        held = sum(min(until, moved) - max(at, start) for at, until in spans
                   if at < moved and until > start)  # fmt: skip
        if due + held <= moved:
            break
        moved = due + held
    return moved
