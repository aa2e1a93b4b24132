"""The consume rate limit (``max_rate``): messages per second a consumer receives.

It slows *receiving*, not only the handler, so nothing piles up in the cache: every
receive loop (each queue's pull task, the pop receive loops) waits for ``ready`` before
it asks the server, and counts what it got with ``take``. A token bucket shared by the
consumer's loops: it refills at ``rate`` tokens a second up to one second's worth; a
receive may take more than there are (a batch is not split), and the loops then wait
until the debt is paid back, so over time the rate holds; the burst is one second's
worth plus one batch per loop.

``topic_max_rate`` adds a bucket per named topic (``TopicRates``): a remoting pull task
waits for its topic's bucket as for the consumer's. Pop receive loops (remoting POP,
gRPC) are shared by the topics, and a shared loop sent to another topic while a limited
one waits for a token would sit in that topic's long poll (5 s at least on the Proxy):
so each limited topic gets a receive loop of its own, which waits for its bucket and
asks that topic only, and the shared loops leave limited topics alone (the sources'
topic choice asks ``TopicRates.receivable``, as it asks the pauses).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from contextvars import ContextVar
from typing import TYPE_CHECKING

import anyio
import anyio.lowlevel

from aiorocket._bucket import TokenBucket

if TYPE_CHECKING:
    from aiorocket.received import ConsumerMessage

__all__ = ["RateLimit", "TopicRates"]


class RateLimit(TokenBucket):
    """At most ``rate`` messages a second, on average, for all the loops sharing it."""

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

    def wait_time(self) -> float:
        """Seconds until the bucket holds a token (0: it holds one now)."""
        tokens = self._refill()
        return 0.0 if tokens >= 1.0 else (1.0 - tokens) / self.rate

    def take(self, n: int) -> None:
        """``n`` messages were received (the bucket may go into debt)."""
        self._refill()
        self._tokens -= n


#: the limited topic the running pop receive loop asks, None in a shared loop
_LOOP_TOPIC: ContextVar[str | None] = ContextVar("aiorocket_loop_topic", default=None)


class TopicRates:
    """``topic_max_rate``: a bucket per topic named there (the application's names; the
    loops ask with theirs, ``unwrap`` takes the namespace off). Other topics, and the
    retry topic of a remoting pull consumer, have no bucket of their own."""

    def __init__(self, rates: Mapping[str, float], unwrap: Callable[[str], str]) -> None:
        self._buckets = {topic: RateLimit(rate) for topic, rate in rates.items()}
        self._unwrap = unwrap

    def of(self, topic: str) -> RateLimit | None:
        """The bucket of ``topic`` (the loop's name), None if it has none."""
        return self._buckets.get(self._unwrap(topic))

    def limited(self, topics: Iterable[str]) -> list[str]:
        """Those of ``topics`` that have a bucket (each gets a pop receive loop)."""
        return [t for t in topics if self.of(t) is not None]

    @staticmethod
    def enter_loop(topic: str | None) -> None:
        """The calling pop receive loop asks ``topic`` only (None: the unlimited ones)."""
        _LOOP_TOPIC.set(topic)

    def receivable(self, topic: str) -> bool:
        """Whether the running pop receive loop asks ``topic`` (the sources' filter)."""
        own = _LOOP_TOPIC.get()
        if own is None:
            return self.of(topic) is None
        return self._unwrap(topic) == self._unwrap(own)

    def take(self, messages: Iterable[ConsumerMessage]) -> None:
        """``messages`` were received: each topic's bucket pays for its own."""
        for topic, n in Counter(m.topic for m in messages).items():
            bucket = self.of(topic)
            if bucket is not None:
                bucket.take(n)
