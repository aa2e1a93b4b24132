"""Bookkeeping of fault scenarios: what was produced, consumed, duplicated and lost.

A scenario runs a steady producer and a counting consumer against a cluster while a
fault happens, then checks the at-least-once contract: every message whose send was
acknowledged is consumed at least once. Used by the fault tests and by
``scripts/fault_campaign.py`` (the long versions).
"""

from __future__ import annotations

import itertools
import os
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import anyio

from aiorocket._send_result import SendResult
from aiorocket.errors import RocketMQError
from aiorocket.message import Message, MessageQueue
from aiorocket.producer import Producer
from aiorocket.received import ConsumerMessage

__all__ = ["Tally", "produce_concurrently", "produce_steadily"]


@dataclass
class Tally:
    """Counts of one scenario. Feed it with ``produce_steadily`` and ``handler``."""

    #: bodies whose send was acknowledged (SendResult returned)
    acked: set[bytes] = field(default_factory=set)
    #: acknowledged sends per broker name
    acked_by_broker: Counter[str] = field(default_factory=Counter)
    #: sends that raised, by error type (the message may or may not be stored)
    send_errors: Counter[str] = field(default_factory=Counter)
    #: deliveries per body (a body delivered twice is a duplicate)
    consumed: Counter[bytes] = field(default_factory=Counter)
    #: longest time a send took (seconds), retries included
    slowest_send: float = 0.0
    #: time each send took (seconds), retries included
    send_times: list[float] = field(default_factory=list)
    #: when each acknowledged send returned (``time.monotonic()``), in order
    ack_times: list[float] = field(default_factory=list)
    #: per queue, deliveries of a stored message (queue and offset) delivered before:
    #: the consumers' duplicates, without ``duplicates``' producer ones (a send retried
    #: on another broker after a stall is stored twice, under two offsets)
    redelivered: Counter[MessageQueue] = field(default_factory=Counter)
    _delivered: set[tuple[MessageQueue, int]] = field(default_factory=set, repr=False)
    _changed: anyio.Event = field(default_factory=anyio.Event, repr=False)

    async def handler(self, msg: ConsumerMessage) -> None:
        """A consumer handler that counts what it is given."""
        stored = (msg.queue, msg.queue_offset)
        if stored in self._delivered:
            self.redelivered[msg.queue] += 1
        else:
            self._delivered.add(stored)
        self.record(msg.body)

    def record(self, body: bytes) -> None:
        """Count one delivery of ``body`` (by a consumer that is not ``handler``,
        such as one in another process)."""
        self.consumed[body] += 1
        self._notify()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    @property
    def lost(self) -> set[bytes]:
        """Acknowledged and never consumed."""
        return self.acked - self.consumed.keys()

    @property
    def duplicates(self) -> int:
        return sum(n - 1 for n in self.consumed.values() if n > 1)

    def longest_ack_gap(self, start: float, end: float) -> float:
        """The longest time between acknowledged sends from ``start`` to ``end`` (the
        bounds count as acknowledgements: a window without any is one long gap)."""
        times = [start, *(t for t in self.ack_times if start < t < end), end]
        return max(b - a for a, b in itertools.pairwise(times))

    def _count(self, body: bytes, result: SendResult | None, error: RocketMQError | None,
               took: float) -> None:  # fmt: skip
        if error is not None:
            self.send_errors[type(error).__name__] += 1
        else:
            assert result is not None
            self.acked.add(body)
            self.acked_by_broker[result.queue.broker_name] += 1
            self.ack_times.append(time.monotonic())
        self.send_times.append(took)
        self.slowest_send = max(self.slowest_send, took)
        self._notify()

    async def wait_acked(self, count: int) -> None:
        """Wait until ``count`` sends have been acknowledged."""
        while len(self.acked) < count:
            await self._changed.wait()

    async def wait_acked_on(self, broker: str, count: int) -> None:
        """Wait until ``count`` more sends have been acknowledged by ``broker``."""
        target = self.acked_by_broker[broker] + count
        while self.acked_by_broker[broker] < target:
            await self._changed.wait()

    async def wait_send_errors(self, error: str, count: int) -> None:
        """Wait until ``count`` more sends have failed with the error class named ``error``."""
        target = self.send_errors[error] + count
        while self.send_errors[error] < target:
            await self._changed.wait()

    async def wait_all_consumed(self) -> None:
        """Wait until every acknowledged message has been consumed."""
        while self.lost:
            await self._changed.wait()

    def summary(self) -> dict[str, Any]:
        return {
            "produced": len(self.acked),
            "send_errors": dict(self.send_errors),
            "consumed_distinct": len(self.consumed.keys() & self.acked),
            "duplicates": self.duplicates,
            "redelivered": sum(self.redelivered.values()),
            "lost": len(self.lost),
            "acked_by_broker": dict(self.acked_by_broker),
            "median_send_s": round(sorted(self.send_times)[len(self.send_times) // 2], 3)
            if self.send_times
            else None,
            "slowest_send_s": round(self.slowest_send, 3),
        }


async def produce_steadily(
    producer: Producer,
    topic: str,
    tally: Tally,
    *,
    rate: float,
    stop: anyio.Event,
    prefix: str = "m",
    size: int = 0,
) -> None:
    """Send one message every ``1/rate`` seconds until ``stop`` is set, counting each
    acknowledged send (and each failure) in ``tally``; bodies padded to ``size`` bytes
    with random ones, so that compression does not shrink what reaches the wire and the
    store."""
    interval = 1.0 / rate
    next_at = anyio.current_time()
    i = 0
    while not stop.is_set():
        head = f"{prefix}-{i}-".encode()
        body = head + os.urandom(max(0, size - len(head)))
        i += 1
        await _send_counted(producer, Message(topic, body), tally)
        next_at += interval
        # Pacing, not waiting for an event: the scenario's load is a rate.
        with anyio.move_on_after(max(0.0, next_at - anyio.current_time())):
            await stop.wait()


async def _send_counted(producer: Producer, msg: Message, tally: Tally) -> None:
    started = time.monotonic()
    try:
        result = await producer.send(msg)
    except RocketMQError as exc:
        tally._count(msg.body, None, exc, time.monotonic() - started)
    else:
        tally._count(msg.body, result, None, time.monotonic() - started)


async def produce_concurrently(
    producer: Producer,
    topic: str,
    tally: Tally,
    *,
    rate: float,
    stop: anyio.Event,
    concurrency: int = 64,
    prefix: str = "c",
) -> None:
    """Start ``rate`` sends per second, each in its own task, at most ``concurrency`` at
    once (as an application's pool of request handlers would), until ``stop`` is set;
    counted in ``tally`` like :func:`produce_steadily`. When every one of them waits (a
    broker that holds them), no new send starts: the load pauses as the application's
    would."""
    slots = anyio.Semaphore(concurrency)
    tick = 0.01  # sends start in groups, every 10 ms: one task per send, no timer each
    per_tick = max(1, round(rate * tick))
    next_at = anyio.current_time()
    i = 0

    async def one(msg: Message) -> None:
        try:
            await _send_counted(producer, msg, tally)
        finally:
            slots.release()

    async with anyio.create_task_group() as tg:
        while not stop.is_set():
            for _ in range(per_tick):
                await slots.acquire()
                tg.start_soon(one, Message(topic, f"{prefix}-{i}".encode()))
                i += 1
            next_at += tick
            # Pacing, not waiting for an event: the scenario's load is a rate.
            with anyio.move_on_after(max(0.0, next_at - anyio.current_time())):
                await stop.wait()
