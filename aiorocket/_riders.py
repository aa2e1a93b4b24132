"""The callers whose messages share one auto-batched request, each with its own deadline.

Both auto-batchers (remoting's ``aiorocket.producer.accumulate``, gRPC's
``aiorocket.grpc._batcher``) send the messages of several callers in one request, and
each caller keeps its own timeout. The request, retries included, runs while any of
them still waits: until the latest of their deadlines. A caller whose deadline passes
first is answered with a timeout by its batcher (or leaves, cancelled) and is *gone*:
no retry carries its message any more. The attempt under way when it left may still
store it, as for any send whose answer was not awaited (at-least-once); none after it
does. (Run under the earliest caller's deadline instead, a send with a 10 s timeout
failed after 1.2 s because it shared a request with a 1.2 s one.)
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol, TypeVar

__all__ = ["Rider", "latest_deadline", "still_waiting"]


class Rider(Protocol):
    """One caller's message in a shared request."""

    #: when its caller stops waiting, on the batcher's clock
    deadline: float
    #: its caller stopped waiting (timed out or cancelled) while it was in a request
    gone: bool


R = TypeVar("R", bound=Rider)


def still_waiting(riders: Sequence[R], now: float) -> list[R]:
    """The riders a retry at ``now`` carries: those whose caller still waits."""
    return [r for r in riders if not r.gone and r.deadline > now]


def latest_deadline(riders: Iterable[Rider]) -> float:
    """Until when a request of ``riders`` may run: while any of their callers waits."""
    return max(r.deadline for r in riders)
