"""Latency fault tolerance: avoid, for a while, brokers whose last send was slow or failed.

After every send the broker's latency L is recorded (the sender measures it from the
request's write to its answer's read off the socket, ``WireTiming`` in
``aiorocket.remoting.connection``, not until the sending task resumed); the broker is
then unavailable for the duration of the largest column of the table with
``L >= latency_max`` (the Java client's MQFaultStrategy, 5.x values). A failed send
counts as a latency of 10 s, as in the 5.x client (4.x: 30 s with its longer table), so
a dead broker is avoided for 10 s after its first failure; one good send makes a broker
available again at once.
Pure and clock-injectable: no I/O here.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

__all__ = [
    "FAILURE_LATENCY_MS",
    "LATENCY_MAX_MS",
    "NOT_AVAILABLE_MS",
    "FaultItem",
    "LatencyFaultTolerance",
    "not_available_duration",
]

#: Latency thresholds (ms) and how long (ms) a broker at or above each is avoided.
LATENCY_MAX_MS: tuple[int, ...] = (50, 100, 550, 1800, 3000, 5000, 15000)
NOT_AVAILABLE_MS: tuple[int, ...] = (0, 0, 2000, 5000, 6000, 10000, 30000)
#: The latency a failed send is recorded as (MQFaultStrategy.updateFaultItem, 5.x).
FAILURE_LATENCY_MS = 10000


def not_available_duration(
    latency_ms: float,
    latency_max: Sequence[int] = LATENCY_MAX_MS,
    not_available: Sequence[int] = NOT_AVAILABLE_MS,
) -> int:
    """Milliseconds to avoid a broker whose send took ``latency_ms``."""
    for threshold, duration in zip(reversed(latency_max), reversed(not_available), strict=True):
        if latency_ms >= threshold:
            return duration
    return 0


@dataclass(slots=True)
class FaultItem:
    broker: str
    latency_ms: float
    #: clock time (seconds) from which the broker may be used again.
    available_at: float


class LatencyFaultTolerance:
    """Per-broker latency record and availability, keyed by broker name."""

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        latency_max: Sequence[int] = LATENCY_MAX_MS,
        not_available: Sequence[int] = NOT_AVAILABLE_MS,
        failure_latency_ms: float = FAILURE_LATENCY_MS,
    ) -> None:
        if len(latency_max) != len(not_available) or list(latency_max) != sorted(latency_max):
            raise ValueError("latency_max must be ascending and as long as not_available")
        self._clock = clock
        self._latency_max = tuple(latency_max)
        self._not_available = tuple(not_available)
        self._failure_latency_ms = failure_latency_ms
        #: a latency below this avoids a broker for no time (every threshold it reaches
        #: has a duration of 0): ``record``'s common case without the table's walk
        self._free_below = next(
            (t for t, d in zip(self._latency_max, self._not_available, strict=True) if d),
            math.inf,
        )
        self._items: dict[str, FaultItem] = {}

    def record(self, broker: str, latency_ms: float, *, failed: bool = False) -> float:
        """Record one send to ``broker``; return how many seconds it is now avoided."""
        if failed:
            latency_ms = max(latency_ms, self._failure_latency_ms)
        if latency_ms < self._free_below:
            duration = 0.0
        else:
            duration = (
                not_available_duration(latency_ms, self._latency_max, self._not_available) / 1000
            )
        self._items[broker] = FaultItem(broker, latency_ms, self._clock() + duration)
        return duration

    def isolate(self, broker: str, latency_ms: float, seconds: float) -> None:
        """Avoid ``broker`` for ``seconds`` (a send to it stalled after ``latency_ms``)."""
        self._items[broker] = FaultItem(broker, latency_ms, self._clock() + seconds)

    def is_available(self, broker: str) -> bool:
        item = self._items.get(broker)
        return item is None or self._clock() >= item.available_at

    def unavailable_for(self, broker: str) -> float:
        """Seconds until ``broker`` may be used again (0 if it may now)."""
        item = self._items.get(broker)
        return 0.0 if item is None else max(0.0, item.available_at - self._clock())

    def least_bad(self, brokers: Iterable[str]) -> str | None:
        """Among ``brokers``, an available one, else the one that recovers first
        (ties: the lower latency). None for an empty iterable."""
        best: tuple[float, float, str] | None = None
        now = self._clock()
        for broker in brokers:
            item = self._items.get(broker)
            key = (
                (0.0, 0.0, broker)
                if item is None
                else (max(0.0, item.available_at - now), item.latency_ms, broker)
            )
            if best is None or key < best:
                best = key
        return None if best is None else best[2]

    def forget(self, broker: str) -> None:
        self._items.pop(broker, None)

    def snapshot(self) -> dict[str, FaultItem]:
        """A copy of the current records (for inspection and logging)."""
        return {
            name: FaultItem(i.broker, i.latency_ms, i.available_at)
            for name, i in self._items.items()
        }
