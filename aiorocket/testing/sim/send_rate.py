"""The producer's ``max_rate`` in ``producer_sends`` (``producer_draws.draw_send_rate``
draws it): the producer's setting, the events ``send_rate_within_limit`` reads, and
``Turns``, the bucket's model, which says when each send's turn comes (the wait comes
before the send, outside its ``timeout``: ``deadline_kept`` counts from the turn).

A client without the setting (an old commit under the simulator) runs without it: the
draw is noted (``feature_missing``), not failed."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

    from aiorocket.testing.sim.history import History
    from aiorocket.testing.sim.nemesis import Schedule

__all__ = ["Turns", "send_turns"]

#: seconds a cancel must come before the send's turn to count as cancelled while waiting
MARGIN = 1e-6


class Turns:
    """docs/producer.md's bucket, replayed: a second's worth at once, then ``rate`` a
    second; each call reserves its token when it is made, a cancel before its turn gives
    it back. Records ``send_called`` (with the turn) for the checker."""

    def __init__(self, rate: float, history: History) -> None:
        self.rate, self.history = rate, history
        self._cap = max(rate, 1.0)
        self._tokens, self._at = self._cap, history.now()
        self._turns: dict[str, float] = {}

    def call(self, key: str) -> float:
        """A send of ``key`` is called now: the time its turn comes."""
        now = self.history.now()
        self._tokens = min(self._cap, self._tokens + (now - self._at) * self.rate) - 1
        self._at = now
        turn = self._turns[key] = now + max(0.0, -self._tokens / self.rate)
        self.history.add("send_called", key, turn=turn)
        return turn

    def cancelled(self, key: str, client_tokens: Callable[[], float] | None = None) -> None:
        """The send of ``key`` was cancelled now: before its turn, the token is back.
        A cancel at the very instant of its turn may have come before the client's wait
        ended or after (the two timers are due together; which runs first is the
        scheduler's): there the client's bucket (``client_tokens``: its tokens now)
        says whether it took the token back (producer_sends seed 3076: the model a
        token short, every later turn 0.5 s late)."""
        now, turn = self.history.now(), self._turns.get(key, 0.0)
        back = now < turn - MARGIN
        if not back and now <= turn + MARGIN and client_tokens is not None:
            mine = min(self._cap, self._tokens + (now - self._at) * self.rate)
            back = client_tokens() >= mine + 0.5  # one token more than the model's
        if back:
            self._tokens += 1
            self.history.add("send_cancelled_waiting", key, turn=turn)


def send_turns(schedule: Schedule, history: History) -> Turns | None:
    """The producer's ``max_rate``, if drawn (None: not drawn, or a client without it),
    and the ``send_rate_limit`` event: the bucket's second's worth as the burst, one
    message more of slack (a turn and its arrival at a broker are not one instant)."""
    rate = schedule.params.get("max_rate")
    if rate is None:
        return None
    from aiorocket.producer.config import ProducerConfig

    if not any(f.name == "max_rate" for f in dataclasses.fields(ProducerConfig)):
        history.add("feature_missing", "", feature="max_rate")
        return None
    history.add("send_rate_limit", "", rate=rate, burst=max(rate, 1.0) + 1)
    return Turns(rate, history)
