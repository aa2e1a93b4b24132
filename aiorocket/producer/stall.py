"""Stalled brokers: abandon a send that one broker sits on while the others answer.

A frozen broker (SIGSTOP, a long GC pause, a suspended VM) keeps its sockets open and
answers nothing; latency fault tolerance marks it only after a send to it fails, which
takes a whole send timeout. Meanwhile every send that picked it waits, and a producer
with a bounded number of sends in flight stops: the healthy brokers sit idle.

``StallWatch`` gives each send attempt of an unpinned message a *stall bound*: a
multiple (``STALL_MULTIPLE``) of the broker's recent latency, at least ``STALL_FLOOR``
and at most ``STALL_CAP`` or a quarter of the send timeout, whichever is less. An
attempt still unanswered at its bound is abandoned if another broker answered a send
within the last ``OTHERS_WINDOW`` seconds and has not stalled since (so it is this
broker, not the network or the whole cluster, that stalls): the broker is then marked
unavailable for new sends for ``STALL_ISOLATION`` seconds and the send is retried on
another broker. While no other broker qualifies, the attempt is checked again at each
bound. A broker that stalled does not take others' sends until it answers again or its
isolation is over, so a whole cluster that freezes costs each send about one abandoned
attempt; the window is as long as latency fault tolerance avoids a broker after a
failure (10 s), so a healthy broker that a slow send had it avoid still qualifies. An
attempt found stalled is abandoned only if still unanswered ``STALL_GRACE`` later (the
event loop may have been too busy to read the answer).

The abandoned request may still be stored when the broker wakes up: such a send may be
stored twice (at-least-once); ``StallWatch.stalls`` counts them. When no other broker
answers, the attempt waits on to its timeout, as before. Sends pinned to a queue
(sharding key, selector) never move, so they wait too.

Abandoning an attempt is worth it only for the attempt that replaces it: the last
attempt of a send (``retries=0``, a transactional half message) is never abandoned, nor
one whose send has less than its stall bound left after it (it would be reported failed
while the slow broker may still store it). A slow broker then costs that send its
latency, not a false failure.
"""

from __future__ import annotations

import math
from collections.abc import Callable

__all__ = [
    "OTHERS_WINDOW",
    "STALL_CAP",
    "STALL_FLOOR",
    "STALL_ISOLATION",
    "STALL_MULTIPLE",
    "StallWatch",
]

#: how many times its recent latency a broker may take before it counts as stalled
STALL_MULTIPLE = 5.0
#: the least stall bound (seconds): a loaded machine's scheduling hiccups stay below it
STALL_FLOOR = 0.25
#: the largest stall bound (seconds): a producer whose every send in flight waits on a
#: frozen broker pauses about this long before they move
STALL_CAP = 1.0
#: another broker answered within this many seconds (and has not stalled since): the
#: cluster is alive. As long as latency fault tolerance avoids a failed broker.
OTHERS_WINDOW = 10.0
#: seconds a broker that stalled is avoided for new sends (then a send probes it again),
#: and after which its stall no longer disqualifies it from taking others' sends
STALL_ISOLATION = 2.0
#: weight of a new latency sample in the moving average
_ALPHA = 0.2


class StallWatch:
    """Recent latency and last answer per broker (see the module docstring)."""

    def __init__(self, clock: Callable[[], float], send_timeout: float) -> None:
        self._clock = clock
        self._cap = max(STALL_FLOOR, min(STALL_CAP, send_timeout / 4))
        self._latency: dict[str, float] = {}
        self._last_ok: dict[str, float] = {}
        self._last_stall: dict[str, float] = {}
        #: attempts abandoned on a stalled broker and retried elsewhere (maybe stored twice)
        self.stalls = 0

    def answered(self, broker: str, seconds: float) -> None:
        """A send to ``broker`` was answered after ``seconds``."""
        old = self._latency.get(broker)
        self._latency[broker] = seconds if old is None else old + _ALPHA * (seconds - old)
        self._last_ok[broker] = self._clock()

    def stalled(self, broker: str) -> None:
        """An attempt to ``broker`` was abandoned at its bound."""
        self.stalls += 1
        self._last_stall[broker] = self._clock()

    def bound(self, broker: str) -> float:
        """Seconds an attempt to ``broker`` may go unanswered before it counts as stalled.

        ``check`` computes the same bound inline (once a send): change both together."""
        latency = self._latency.get(broker, 0.0)
        return min(self._cap, max(STALL_FLOOR, STALL_MULTIPLE * latency))

    def others_answer(self, broker: str) -> bool:
        """Whether a broker other than ``broker`` answered within ``OTHERS_WINDOW`` and
        has not stalled since (or its stall is ``STALL_ISOLATION`` old: it may take
        sends again)."""
        now = self._clock()
        since, forgiven = now - OTHERS_WINDOW, now - STALL_ISOLATION
        stalls = self._last_stall
        for other, answered in self._last_ok.items():
            if other != broker and answered >= since:
                stalled = stalls.get(other, -math.inf)
                if answered > stalled or stalled <= forgiven:
                    return True
        return False

    def check(self, broker: str, deadline: float) -> tuple[float, Callable[[], bool]]:
        """The stall check of one attempt to ``broker`` of a send that ends at ``deadline``
        and has another attempt left (for ``BrokerClient.send_message``): abandon it only
        while another broker answers and the next attempt still gets a stall bound."""
        # ``bound``, inline (once a send attempt)
        bound = min(self._cap, max(STALL_FLOOR, STALL_MULTIPLE * self._latency.get(broker, 0.0)))

        def give_up() -> bool:
            return deadline - self._clock() > bound and self.others_answer(broker)

        return bound, give_up
