"""Queue selection: round-robin with fault avoidance, user selectors, the hash selector.

A *selector* picks the queue of an ordered message: ``selector(queues, message, arg)``
gets every writable queue of the topic (broker order, then queue id) and returns one of
them. ``hash_selector`` maps equal keys to the same queue as the Java client's
``SelectMessageQueueByHash`` does for strings and integers, so Java and Python producers
sharing a topic agree on where a key goes. ``lite_selector`` puts a lite message in
the queue its lite topic belongs to, as the 5.5 broker and Proxy shard lite topics.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Sequence
from typing import Any

from aiorocket.errors import ConfigError, NoRouteError
from aiorocket.message import Message, MessageQueue
from aiorocket.producer.fault import LatencyFaultTolerance

__all__ = [
    "QueueSelector",
    "RoundRobin",
    "check_selected",
    "hash_selector",
    "java_hash",
    "java_string_hash",
    "jump_hash",
    "lite_selector",
]

QueueSelector = Callable[[Sequence[MessageQueue], Message, Any], MessageQueue]

_INT32 = 1 << 32


def _to_int32(value: int) -> int:
    value &= _INT32 - 1
    return value - _INT32 if value >= 1 << 31 else value


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode()`` (over UTF-16 code units), as a signed int32."""
    data = text.encode("utf-16-be")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & (_INT32 - 1)
    return _to_int32(h)


def java_hash(key: object) -> int:
    """``hashCode()`` of the Java value ``key`` stands for: String for ``str``, Integer or
    Long for ``int``; any other object hashes as its ``str()``."""
    if isinstance(key, bool):
        return 1231 if key else 1237
    if isinstance(key, int):
        if -(1 << 31) <= key < 1 << 31:
            return key
        value = key & ((1 << 64) - 1)
        return _to_int32(value ^ (value >> 32))
    return java_string_hash(key if isinstance(key, str) else str(key))


def hash_selector(queues: Sequence[MessageQueue], message: Message, key: Any) -> MessageQueue:
    """The queue for ``key``: ``abs(hashCode(key) % len(queues))`` (Java semantics)."""
    if not queues:
        raise NoRouteError(f"topic {message.topic!r} has no writable queue")
    return queues[abs(java_hash(key)) % len(queues)]


_UINT64 = (1 << 64) - 1
_LCG = 2862933555777941757


def jump_hash(key: int, buckets: int) -> int:
    """The bucket (0..buckets-1) of ``key`` by jump consistent hashing (Lamping and
    Veach), with the same generator as Guava's ``Hashing.consistentHash(long, int)``,
    which the broker and the Proxy use to shard lite topics."""
    if buckets <= 0:
        raise ValueError("buckets must be positive")
    state = key & _UINT64
    candidate = 0
    while True:
        state = (_LCG * state + 1) & _UINT64
        step = ((state >> 33) + 1) / 2.0**31
        nxt = min(int((candidate + 1) / step), (1 << 31) - 1)  # Java's saturating cast
        if not 0 <= nxt < buckets:
            return candidate
        candidate = nxt


def lite_selector(queues: Sequence[MessageQueue], message: Message, arg: Any) -> MessageQueue:
    """The queue of a lite message: the one its lite topic is sharded to (RocketMQ 5.5's
    broker accepts a lite topic's subscriptions, and looks for its messages, only on
    the broker that owns it: ``consistentHash(liteTopic.hashCode(), queues)`` over the
    parent topic's writable queues, broker name order then queue id)."""
    if not queues:
        raise NoRouteError(f"topic {message.topic!r} has no writable queue")
    assert message.lite_topic is not None
    return queues[jump_hash(java_string_hash(message.lite_topic), len(queues))]


def check_selected(queue: object, queues: Sequence[MessageQueue]) -> MessageQueue:
    """Reject what a user selector returned unless it is one of ``queues``."""
    if not isinstance(queue, MessageQueue) or queue not in queues:
        raise ConfigError(f"selector returned {queue!r}, which is not one of the topic's queues")
    return queue


class RoundRobin:
    """Spreads sends over all writable queues of all brokers, in turn.

    With a fault table, queues of brokers it marks unavailable are skipped while others
    remain; ``avoid`` (the broker of a failed attempt) is skipped while any other broker
    remains. When every broker is unavailable the one recovering first is used.
    """

    def __init__(self, start: int | None = None) -> None:
        self._counter = itertools.count(random.randrange(1 << 16) if start is None else start)

    def select(
        self,
        queues: Sequence[MessageQueue],
        *,
        avoid: str | None = None,
        fault: LatencyFaultTolerance | None = None,
    ) -> MessageQueue:
        n = len(queues)
        if n == 0:
            raise NoRouteError("no writable queue")
        start = next(self._counter)
        if fault is None and avoid is None:
            return queues[start % n]
        # One look at the fault table per broker, not per queue: with a broker avoided,
        # each of its queues was a clock read and a look-up (issue 43, goal 6).
        skip = {avoid}
        for i in range(n):
            q = queues[(start + i) % n]
            name = q.broker_name
            if name in skip:
                continue
            if fault is None or fault.is_available(name):
                return q
            skip.add(name)
        ordered = [queues[(start + i) % n] for i in range(n)]
        brokers = {q.broker_name for q in ordered}
        others = brokers - {avoid} if len(brokers) > 1 else brokers
        if fault is not None:
            best = fault.least_bad(sorted(others))
        else:
            best = next(q.broker_name for q in ordered if q.broker_name in others)
        return next(q for q in ordered if q.broker_name == best)
