"""A token bucket: ``rate`` tokens a second, holding at most one second's worth (at least
one token), full at the start.

What the consumer's receive rate (``aiorocket.consumer.rate``: wait for a token, then take
what a receive brought) and the producer's send rate (``aiorocket.producer.pace``: reserve,
then wait out the debt) have in common; how each spends its tokens is its own. The
simulator's model of the producer's bucket (``aiorocket.testing.sim.send_rate``) is kept
apart on purpose: a checker replaying this code could not catch a defect in it.
"""

from __future__ import annotations

import time

__all__ = ["TokenBucket"]


class TokenBucket:
    """Refilled by the clock; ``tokens`` may go below zero (a debt the clock pays back)."""

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self._burst = max(rate, 1.0)
        self._tokens = self._burst
        self._at = time.monotonic()

    def _refill(self) -> float:
        """The tokens now (refilled for the time since the last call)."""
        now = time.monotonic()
        self._tokens = min(self._burst, self._tokens + (now - self._at) * self.rate)
        self._at = now
        return self._tokens
