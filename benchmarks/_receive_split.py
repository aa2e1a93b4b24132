"""Where a gRPC consumer's stored -> handler time goes (issue 43, goal 5).

``consume.py --latency`` over gRPC splits each steady message's stored -> handler time
at the receive that brought it:

* ``wait``: stored -> that receive left the client (0 when a receive was already out,
  parked at the broker or on its way: the broker's arrival notice woke it);
* ``server``: max(stored, receive left) -> its first message reached the client: the
  Proxy and the broker (the pop, the long-polling wake-up, the answer) and the network;
* ``stream``: the receive's first message -> this message read off the stream (its
  place in the batch: the Proxy writes a batch message by message);
* ``dispatch``: this message read (decoded) -> the handler (what the client does
  before the handler runs: until issue 43's round 5 the wait for the stream's end
  too, then the hand-on, the delivery strategy, the handler workers).

``dispatch`` is split again (``dispatch_cpu``: the loop thread's CPU time in it, the
client's own work run before the handler; ``dispatch_gc``: the garbage collector's
pauses in it; the rest is the thread off a core: descheduled, or idle in the poll) and,
with ``BENCH_DISPATCH_STEPS=1`` in the environment, ``dispatch_steps``: the event-loop
callbacks run in it (each callback counted: a few % of CPU, so off by default).

It times ``SimpleConsumer.receive`` and ``SimpleConsumer._read`` from the outside
(private names of aiorocket.grpc, a benchmark's business only): a few clock reads per
receive, a clock read and one dict entry per message. Clocks: the broker's store time (ms)
and this host's wall clock, as the e2e figure.
"""

from __future__ import annotations

import asyncio
import gc
import os
import time
from typing import Any

PARTS = ("wait", "server", "stream", "dispatch")
#: the parts of ``dispatch`` (cpu and gc in µs, steps a count)
DISPATCH_PARTS = ("dispatch_cpu", "dispatch_gc", "dispatch_steps")


class _Clocks:
    """The loop thread's CPU time, the GC's pauses and the loop's callbacks so far."""

    def __init__(self, steps: bool) -> None:
        self.gc_us = 0
        self.steps = 0
        self._gc_start = 0
        self.gc_pauses: dict[int, list[int]] = {0: [], 1: [], 2: []}
        self._steps = steps

    def install(self) -> None:
        gc.callbacks.append(self._on_gc)
        if self._steps:
            handle: Any = asyncio.events.Handle
            run = handle._run

            def counted(h: Any) -> None:
                self.steps += 1
                run(h)

            handle._run = counted

    def _on_gc(self, phase: str, info: dict[str, int]) -> None:
        now = time.perf_counter_ns() // 1000
        if phase == "start":
            self._gc_start = now
        else:
            self.gc_us += now - self._gc_start
            self.gc_pauses[info["generation"]].append(now - self._gc_start)

    def read(self) -> tuple[int, int, int]:
        return time.thread_time_ns() // 1000, self.gc_us, self.steps


class ReceiveSplit:
    """Times receives; ``sample`` splits a handled message's stored -> handler time."""

    def __init__(self) -> None:
        #: message id -> (receive left, its first message read, this one read), wall µs
        self._at: dict[object, tuple[int, int, int]] = {}
        self._parts: dict[str, list[int]] = {p: [] for p in PARTS}
        self._total: list[int] = []
        #: per receive: messages it brought; per loop (task): its last receive's end,
        #: and the gaps from one receive's end to the loop's next receive leaving
        self._sizes: list[int] = []
        self._ends: dict[int, int] = {}
        self._gaps: list[int] = []
        #: message id -> its receive's "stream ended" flag, and the messages handled
        #: before their receive's stream ended (handed on as read: ``early_pct``)
        self._ended: dict[object, list[bool]] = {}
        self._early = 0
        #: every receive that brought messages: (left, its first message), wall µs; and
        #: each steady message's store time, to count the receives out when it was
        #: stored (``out_p50``: left, first message not yet back)
        self._spans: list[tuple[int, int]] = []
        self._stored: list[int] = []
        #: message id -> the clocks at its read; and the dispatch parts per message
        self._clocks = _Clocks(os.environ.get("BENCH_DISPATCH_STEPS") == "1")
        self._at_clocks: dict[object, tuple[int, int, int]] = {}
        self._dparts: dict[str, list[int]] = {p: [] for p in DISPATCH_PARTS}

    def install(self) -> None:
        from aiorocket.grpc import _simple

        cls: Any = _simple.SimpleConsumer
        self._clocks.install()
        read, receive, at, ended = cls._read, cls.receive, self._at, self._ended
        spans, clocks, at_clocks = self._spans, self._clocks, self._at_clocks
        sizes, ends, gaps = self._sizes, self._ends, self._gaps

        #: the asyncio task of a receive -> when it left (its ``_read`` runs in it)
        lefts: dict[int, int] = {}

        async def timed_read(consumer: Any, response: Any, req: Any, timeout: float,
                             broker: str, out: list[Any], bad: list[Any],
                             *rest: Any) -> None:  # fmt: skip
            left = lefts.get(id(asyncio.current_task()), 0)
            first = 0
            done = [False]

            class Arrivals(list[Any]):
                def append(self, msg: Any) -> None:
                    nonlocal first
                    now = time.time_ns() // 1000
                    first = first or now
                    at[msg.message_id] = (left, first, now)
                    at_clocks[msg.message_id] = clocks.read()
                    ended[msg.message_id] = done
                    super().append(msg)

            got = Arrivals()
            try:
                await read(consumer, response, req, timeout, broker, got, bad, *rest)
            finally:
                done[0] = True
                if first:
                    spans.append((left, first))
                out.extend(got)

        async def timed_receive(consumer: Any, *args: Any, **kw: Any) -> Any:
            left = time.time_ns() // 1000
            loop = id(asyncio.current_task())
            if loop in ends:
                gaps.append(left - ends[loop])
            lefts[loop] = left
            msgs = await receive(consumer, *args, **kw)
            ends[loop] = time.time_ns() // 1000
            sizes.append(len(msgs))
            return msgs

        cls._read, cls.receive = timed_read, timed_receive

    def sample(self, message_id: object, stored_us: int, now_us: int, steady: bool) -> None:
        """The handler got ``message_id`` at ``now_us``; counted when ``steady``."""
        times = self._at.pop(message_id, None)
        done = self._ended.pop(message_id, None)
        then = self._at_clocks.pop(message_id, None)
        if times is None or not steady:
            return
        if then is not None:
            for part, a, b in zip(DISPATCH_PARTS, then, self._clocks.read(), strict=True):
                self._dparts[part].append(b - a)
        if done is not None and not done[0]:
            self._early += 1
        left, first, read = times
        self._parts["wait"].append(max(0, left - stored_us))
        self._parts["server"].append(first - max(stored_us, left))
        self._parts["stream"].append(read - first)
        self._parts["dispatch"].append(now_us - read)
        self._total.append(now_us - stored_us)
        self._stored.append(stored_us)

    def summary(self) -> dict[str, float]:
        """p50/p99 of each part (ms), and each part's mean over the slowest 1% of the
        messages by stored -> handler time (``tail_<part>_ms``): the tail's make-up,
        which the parts' own p99s (of different messages) do not show."""
        out: dict[str, float] = {}
        total = self._total
        if not total:
            return out
        slowest = sorted(range(len(total)), key=total.__getitem__, reverse=True)
        tail = slowest[: max(1, len(total) // 100)]
        for part, xs in self._parts.items():
            s = sorted(xs)
            out[f"{part}_p50_ms"] = s[len(s) // 2] / 1000
            out[f"{part}_p99_ms"] = s[min(len(s) - 1, round(0.99 * len(s)) - 1)] / 1000
            out[f"tail_{part}_ms"] = sum(xs[i] for i in tail) / len(tail) / 1000
        # dispatch's make-up: its parts' p50/p99, and their means over the slowest 1%
        # by dispatch (cpu and gc in ms, steps a count)
        disp = self._parts["dispatch"]
        if len(self._dparts["dispatch_cpu"]) == len(disp):
            dtail = sorted(range(len(disp)), key=disp.__getitem__, reverse=True)
            dtail = dtail[: max(1, len(disp) // 100)]
            out["tail_dispatch_ms"] = sum(disp[i] for i in dtail) / len(dtail) / 1000
            for part, xs in self._dparts.items():
                scale = 1 if part == "dispatch_steps" else 1000
                s = sorted(xs)
                unit = "" if part == "dispatch_steps" else "_ms"
                out[f"{part}_p50{unit}"] = s[len(s) // 2] / scale
                out[f"{part}_p99{unit}"] = s[min(len(s) - 1, round(0.99 * len(s)) - 1)] / scale
                out[f"tail_{part}{unit}"] = sum(xs[i] for i in dtail) / len(dtail) / scale
        for gen, pauses in self._clocks.gc_pauses.items():
            if pauses:
                out[f"gc{gen}_n"] = float(len(pauses))
                out[f"gc{gen}_max_ms"] = max(pauses) / 1000
        out["tail_stored_to_user_ms"] = sum(total[i] for i in tail) / len(tail) / 1000
        out["samples"] = float(len(total))
        out["early_pct"] = 100 * self._early / len(total)
        outs = _receives_out(self._spans, self._stored)
        if outs:
            out["out_p50"] = float(outs[len(outs) // 2])
            out["out_zero_pct"] = 100 * sum(n == 0 for n in outs) / len(outs)
        # the receives: how many, how full (32 a receive at most: a backlog), and each
        # loop's turnaround from an answer to its next receive (hand-on, cache room)
        sizes, gaps = self._sizes, sorted(self._gaps)
        out["receives"] = float(len(sizes))
        out["mean_batch"] = sum(sizes) / max(1, len(sizes))
        out["full_pct"] = 100 * sum(n >= 32 for n in sizes) / max(1, len(sizes))
        if gaps:
            out["gap_p50_ms"] = gaps[len(gaps) // 2] / 1000
            out["gap_p99_ms"] = gaps[min(len(gaps) - 1, round(0.99 * len(gaps)) - 1)] / 1000
        return out


def _receives_out(spans: list[tuple[int, int]], stored: list[int]) -> list[int]:
    """Sorted: for each store time, the receives out then (left, first message not yet
    back: parked at the broker, or on their way back with an answer)."""
    events = sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans])
    out, level, i = [], 0, 0
    for t in sorted(stored):
        while i < len(events) and events[i][0] <= t:
            level += events[i][1]
            i += 1
        out.append(level)
    return sorted(out)
