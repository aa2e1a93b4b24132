"""What happened in one simulated run, as the client and the simulated servers saw it:
the only input of the checker (``checker``)."""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Event", "History"]


@dataclass(slots=True, frozen=True)
class Event:
    """One thing that happened at virtual (or, for gRPC, monotonic) time ``at``.

    ``kind`` is one of: ``stored`` (the server holds message ``key``), ``delivered``
    (the server handed it to a client), ``handler_start`` / ``handler_ok`` /
    ``handler_failed`` (the application's handler), ``acked`` (the server settled it),
    ``released`` (the client made it visible again), ``release_refused`` (the server
    refused a release: the message comes back after its invisible time), ``revived``
    (its invisible time ended unsettled: the server will deliver it again),
    ``dead_lettered`` (it went to the DLQ, by the client or the server), ``app_error``
    (an exception reached the application), ``close_start`` / ``close_end``, ``storm``
    (a request storm), ``held`` (the client still holds settled messages),
    ``tasks_left``, ``note``, ``broker_paused`` / ``broker_resumed`` (the nemesis froze
    a broker, SIGSTOP-like: what reaches it meanwhile is handled once it resumes; an
    ``acked`` names when its request reached the broker, ``sent``), ``release_stale``
    (a release naming a check point the broker replaced; ``sent`` as for ``acked``),
    ``ack_refused`` (through the Proxy: ``until`` when it takes acks again).
    """

    at: float
    kind: str
    key: str = ""
    info: dict[str, Any] = field(default_factory=dict)


class History:
    """An append-only list of events, with the clock that stamps them."""

    def __init__(self, clock: Any) -> None:
        self._clock = clock
        self.events: list[Event] = []

    def now(self) -> float:
        return float(self._clock())

    def add(self, kind: str, key: str = "", **info: Any) -> None:
        self.events.append(Event(self._clock(), kind, key, info))

    def insert(self, at: float, kind: str, key: str = "", **info: Any) -> None:
        """Add an event of an earlier time ``at`` in its place (after those of the
        same time): what the servers know only once the run is over."""
        index = bisect.bisect_right([e.at for e in self.events], at)
        self.events.insert(index, Event(at, kind, key, info))

    def of(self, kind: str) -> list[Event]:
        return [e for e in self.events if e.kind == kind]

    def keys(self, kind: str) -> set[str]:
        return {e.key for e in self.events if e.kind == kind}
