"""The consume rate limit (``max_rate``): messages per second a consumer receives.

It slows *receiving*, not only the handler, so nothing piles up in the cache: every
receive loop (each queue's pull task, the pop receive loops) waits for ``ready`` before
it asks the server, and counts what it got with ``take``. A token bucket shared by the
consumer's loops: it refills at ``rate`` tokens a second up to one second's worth; a
receive may take more than there are (a batch is not split), and the loops then wait
until the debt is paid back, so over time the rate holds; the burst is one second's
worth plus one batch per loop.
"""

from __future__ import annotations

import time

import anyio
import anyio.lowlevel

__all__ = ["RateLimit"]


class RateLimit:
    """At most ``rate`` messages a second, on average, for all the loops sharing it."""

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self._burst = max(rate, 1.0)
        self._tokens = self._burst
        self._at = time.monotonic()

    def _refill(self) -> float:
        now = time.monotonic()
        self._tokens = min(self._burst, self._tokens + (now - self._at) * self.rate)
        self._at = now
        return self._tokens

    async def ready(self) -> None:
        """Wait until a receive may go out (the bucket holds a token)."""
        tokens = self._refill()
        if tokens < 1.0:
            # A time to wait out, not an event: the debt of this loop's and the others'
            # receives is paid back by the clock alone. One sleep, then go: loops that
            # woke together may overdraw once more, which the next wait pays back.
            await anyio.sleep((1.0 - tokens) / self.rate)
        else:
            await anyio.lowlevel.checkpoint()

    def take(self, n: int) -> None:
        """``n`` messages were received (the bucket may go into debt)."""
        self._refill()
        self._tokens -= n
