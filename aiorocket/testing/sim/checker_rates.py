"""Invariants of the rate limits beyond the consumer's ``max_rate``
(``checker_features.rate_within_limit``): the consumer's ``topic_max_rate`` and the
producer's ``max_rate``. All bound what passes over any window of ``w`` seconds by
``rate * w + burst`` (``over_limit``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from aiorocket.testing.sim.checker import Bounds, Violation
    from aiorocket.testing.sim.history import History

__all__ = ["over_limit", "send_rate_within_limit", "topic_rate_within_limit"]

def over_limit(times: Sequence[float], rate: float, burst: float) -> str | None:
    """The first window of ``times`` (ascending) holding more than ``rate * w + burst``
    of them, described, or None. One pass: the window ending at ``b`` is over the limit
    from some ``a`` iff ``max(rate * t_a - a) > burst - (b + 1) + rate * t_b``."""
    best, start = float("-inf"), 0
    for b, tb in enumerate(times):
        if rate * tb - b > best:
            best, start = rate * tb - b, b
        if (b + 1) - rate * tb + best > burst + 1e-9:
            count, window = b - start + 1, tb - times[start]
            return f"{count} in {window:.2f}s from {times[start]:.2f}"
    return None


def _violation(invariant: str, key: str, detail: str) -> Violation:
    from aiorocket.testing.sim.checker import Violation

    return Violation(invariant, key, detail)


def topic_rate_within_limit(history: History, bounds: Bounds) -> list[Violation]:
    """With ``topic_max_rate``, the messages of that topic a consumer receives over any
    window of ``w`` seconds are at most ``rate * w + burst`` (the burst as the consumer's
    ``max_rate``'s, with the loops that wait for the topic's bucket). A remoting pull
    consumer's retry queue has no bucket of its own (docs/consumer.md), so it is not
    counted."""
    out: list[Violation] = []
    events = history.events
    for n, limit in enumerate(events):
        if limit.kind != "topic_rate_limit":
            continue
        name = limit.info["consumer"]
        stop = next((m for m in range(n + 1, len(events)) if events[m].kind == "close_end"
                     and events[m].info.get("consumer") == name), len(events))  # fmt: skip
        times = [e.at for e in events[n:stop] if e.kind in ("delivered", "pulled")
                 and e.info.get("topic", limit.info["topic"]) == limit.info["topic"]
                 and not str(e.info.get("queue", "")).startswith("%RETRY%")]  # fmt: skip
        over = over_limit(times, limit.info["rate"], limit.info["burst"])
        if over is not None:
            out.append(_violation("topic_rate_within_limit", "",
                                  f"{name}: {over} of {limit.info['topic']}, over "
                                  f"topic_max_rate={limit.info['rate']} "
                                  f"(burst {limit.info['burst']})"))  # fmt: skip
    return out


def send_rate_within_limit(history: History, bounds: Bounds) -> list[Violation]:
    """With the producer's ``max_rate``, the messages that reach a broker over any
    window of ``w`` seconds are at most ``rate * w + burst`` (each message at its first
    arrival: a retry is the same send); and a send cancelled while it waited for its
    turn (``send_cancelled_waiting``: the workload's model of the bucket, ``send_rate``)
    never reaches a broker (docs/producer.md)."""
    limit = next(iter(history.of("send_rate_limit")), None)
    if limit is None:
        return []
    rate, burst = limit.info["rate"], limit.info["burst"]
    out: list[Violation] = []
    first: dict[str, float] = {}
    for e in history.of("send_arrived"):
        first.setdefault(e.key, e.at)
    for e in history.of("send_cancelled_waiting"):
        if e.key in first:
            out.append(_violation("send_rate_within_limit", e.key,
                                  f"cancelled at {e.at:.2f} while waiting for its turn (due "
                                  f"{e.info['turn']:.2f}), reached a broker at "
                                  f"{first[e.key]:.2f}"))  # fmt: skip
    over = over_limit(sorted(first.values()), rate, burst)
    if over is not None:
        out.append(_violation("send_rate_within_limit", "",
                              f"{over} reached the brokers, over max_rate={rate} "
                              f"(burst {burst})"))  # fmt: skip
    return out
