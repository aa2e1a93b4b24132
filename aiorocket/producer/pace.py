"""The producer's send rate limit (``max_rate``): messages per second it sends at most.

A bucket that refills at ``rate`` tokens a second up to one second's worth (so a second's
worth may go at once). Each send *reserves* its messages' tokens when it asks, then waits
until the debt it leaves is paid back by the clock: concurrent senders queue up at the
rate, each with its own wait, instead of all waking together and overdrawing (the
consumer's receive loops, fewer and each alone, wait then take: aiorocket.consumer.rate).
A send cancelled while it waits gives its tokens back. The wait comes before the send:
its ``timeout`` bounds the send only.
"""

from __future__ import annotations

import anyio
import anyio.lowlevel

from aiorocket._bucket import TokenBucket

__all__ = ["SendRate"]


class SendRate(TokenBucket):
    """At most ``rate`` messages a second, on average, for the producer's sends."""

    async def acquire(self, n: int = 1) -> None:
        """Reserve ``n`` messages' tokens; wait until the bucket is out of debt."""
        self._tokens = self._refill() - n
        if self._tokens >= 0:
            await anyio.lowlevel.checkpoint()
            return
        try:
            await anyio.sleep(-self._tokens / self.rate)  # the clock pays it back
        except BaseException:
            self._tokens += n  # nothing was sent: the tokens are the next sender's
            raise
