"""Run one seed: draw its schedule, run its workload, check the history.

Remoting workloads run on trio with ``MockClock(autojump_threshold=0)``: virtual time,
so invisible times of seconds cost nothing and time-dependent behaviour replays; their
connections are in memory (``memnet``), so a seed replays whatever the machine's load. The
gRPC ones run on asyncio (the Proxy fake is grpclib) in real time.
"""

from __future__ import annotations

import random
import time
import traceback
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from aiorocket.testing.sim.checker import Bounds, Violation, check
from aiorocket.testing.sim.history import History
from aiorocket.testing.sim.nemesis import FULL, LATE, LATE_WORKLOADS, Schedule, base_workload, draw

__all__ = ["WORKLOADS", "Report", "run", "shrink"]

Handler = Callable[[Any], Awaitable[None]]


@dataclass(slots=True)
class Report:
    """One run: its seed and schedule, the violations found, the history."""

    schedule: Schedule
    violations: list[Violation]
    history: History
    seconds: float = 0.0
    crash: str | None = None
    invariants: int = 0
    faults: int = field(default=0)

    @property
    def ok(self) -> bool:
        return not self.violations and self.crash is None

    def __str__(self) -> str:
        head = "ok" if self.ok else "FAILED"
        lines = [f"{head}: replay with --workload {self.schedule.workload} "
                 f"--seed {self.schedule.seed}", str(self.schedule)]  # fmt: skip
        lines += [f"  ! {v}" for v in self.violations[:20]]
        if self.crash:
            lines.append("  ! crash: " + self.crash)
        return "\n".join(lines)


def _on_trio(workload: Callable[..., Awaitable[None]]) -> Callable[..., Any]:
    def go(schedule: Schedule, handler: Handler | None) -> History:
        import trio
        from trio.testing import MockClock

        from aiorocket.testing.sim.memnet import in_memory_network

        clock = MockClock(autojump_threshold=0)
        history = History(clock.current_time)
        # trio shuffles each batch of runnable tasks with its own Random, seeded once per
        # process: seeded per run here, a seed replays its interleaving in any process
        shuffler = getattr(getattr(trio, "_core", None), "_run", None)
        if isinstance(getattr(shuffler, "_r", None), random.Random):
            shuffler._r.seed(f"trio:{schedule.workload}:{schedule.seed}")  # type: ignore[union-attr]
        # and shuffles it from the tasks' creation order (as under Hypothesis), not from
        # the order they woke in: timers due at the same instant wake in the order of
        # their cancel scopes' memory addresses, which differ from process to process
        ordered = getattr(shuffler, "_ALLOW_DETERMINISTIC_SCHEDULING", None)
        if ordered is not None:
            shuffler._ALLOW_DETERMINISTIC_SCHEDULING = True  # type: ignore[union-attr]
        # The client reads time.monotonic() for deadlines and due times (renewals, ack
        # retries, consume timeouts): in a run it must read the virtual clock too.
        real = time.monotonic
        time.monotonic = clock.current_time
        try:
            # no socket: with nothing in flight the autojump cannot race an answer
            with in_memory_network():
                trio.run(workload, schedule, history, handler, clock=clock)
        except Exception as exc:
            exc.sim_history = history  # type: ignore[attr-defined]  # checked all the same
            raise
        finally:
            time.monotonic = real
            if ordered is not None:
                shuffler._ALLOW_DETERMINISTIC_SCHEDULING = ordered  # type: ignore[union-attr]
        return history

    return go


def _on_asyncio(workload: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., Any]:
    def go(schedule: Schedule, handler: Handler | None) -> History:
        import asyncio

        start = time.monotonic()
        history = History(lambda: time.monotonic() - start)
        asyncio.run(workload(schedule, history, handler))
        return history

    return go


def _on_virtual_asyncio(workload: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., Any]:
    """asyncio on a virtual clock (``vloop``): the gRPC runs, as trio's MockClock runs
    the remoting ones."""

    def go(schedule: Schedule, handler: Handler | None) -> History:
        import asyncio

        from aiorocket.testing.sim.vloop import VirtualTimeLoop

        loop = VirtualTimeLoop()
        asyncio.set_event_loop(loop)
        history = History(loop.time)
        real = time.monotonic
        time.monotonic = loop.time  # the client's deadlines and due times
        try:
            loop.run_until_complete(workload(schedule, history, handler))
        finally:
            try:
                tasks = asyncio.all_tasks(loop)
                for task in tasks:
                    task.cancel()
                if tasks:
                    loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
                loop.run_until_complete(loop.shutdown_asyncgens())
            finally:
                time.monotonic = real
                asyncio.set_event_loop(None)
                loop.close()
        return history

    return go


def _workloads() -> dict[str, Callable[..., History]]:
    from aiorocket.testing.sim.pop_workload import pop_remoting
    from aiorocket.testing.sim.producer_workload import producer_stall

    out = {"pop_remoting": _on_trio(pop_remoting), "producer_stall": _on_trio(producer_stall)}
    out.update(_consumer_workloads())
    out.update(_producer_workloads())
    try:
        from aiorocket.testing.sim.grpc_workload import fifo_async_for, grpc_receive
    except ImportError:  # the grpc extra is not installed
        return out
    out["grpc_receive"] = _on_virtual_asyncio(grpc_receive)
    out["fifo_async_for"] = _on_virtual_asyncio(fifo_async_for)
    return out


def _consumer_workloads() -> dict[str, Callable[..., History]]:
    from aiorocket.testing.sim.lite_workload import lite_remoting
    from aiorocket.testing.sim.pull_workload import pull_remoting

    return {"lite_remoting": _on_trio(lite_remoting), "pull_remoting": _on_trio(pull_remoting)}


def _producer_workloads() -> dict[str, Callable[..., History]]:
    from aiorocket.testing.sim.producer_sends import producer_sends
    from aiorocket.testing.sim.producer_txn import producer_txn
    from aiorocket.testing.sim.reply_workload import request_reply

    out = {"producer_sends": _on_trio(producer_sends), "producer_txn": _on_trio(producer_txn),
           "request_reply": _on_trio(request_reply)}  # fmt: skip
    try:
        from aiorocket.testing.sim.grpc_producer import grpc_producer
    except ImportError:  # the grpc extra is not installed
        return out
    from aiorocket.testing.sim.grpc_lite import grpc_lite
    from aiorocket.testing.sim.grpc_restart import grpc_restart

    out["grpc_producer"] = _on_virtual_asyncio(grpc_producer)
    out["grpc_restart"] = _on_virtual_asyncio(grpc_restart)
    out["grpc_lite"] = _on_virtual_asyncio(grpc_lite)
    return out


def _runner(workload: str) -> Callable[..., History]:
    """A workload's runner (a ``LATE`` or ``FULL`` variant's is its base workload's)."""
    return _workloads()[base_workload(workload)]


WORKLOADS = ("pop_remoting", "grpc_receive", "fifo_async_for", "producer_stall",
             "lite_remoting", "pull_remoting", "producer_sends", "producer_txn",
             "grpc_producer", "grpc_restart", "request_reply", "grpc_lite",
             *(w + LATE for w in LATE_WORKLOADS), "producer_sends" + FULL)  # fmt: skip


def run(seed: int, workload: str = "pop_remoting", *, handler: Handler | None = None,
        bounds: Bounds | None = None, schedule: Schedule | None = None) -> Report:  # fmt: skip
    """Run ``workload`` under the schedule of ``seed`` (or ``schedule``, one of
    ``shrink``'s); ``handler`` (a user's) runs inside the simulated application's
    handler."""
    schedule = schedule or draw(seed, workload)
    # the client's own random choices (a first queue, a jitter) replay with the seed too
    # (a variant's as its base workload's: the same run, the variant's draws added)
    random.seed(f"client:{base_workload(workload)}:{seed}")
    started = time.monotonic()
    crash = None
    history = History(lambda: 0.0)
    try:
        history = _runner(workload)(schedule, handler)
    except Exception as exc:
        crash = traceback.format_exc(limit=8)
        # what happened up to the crash (a client that corrupted trio's state, say)
        history = getattr(exc, "sim_history", history)
    from aiorocket.testing.sim.checker import INVARIANTS

    violations = check(history, bounds)
    return Report(schedule, violations, history, time.monotonic() - started, crash,
                  len(INVARIANTS), len(schedule.faults))  # fmt: skip


def shrink(report: Report, *, handler: Handler | None = None) -> Report:
    """The failing ``report``'s schedule with every fault removed that the failure does
    not need (one at a time, kept out while every invariant it broke still breaks): the
    faults left name the defect."""
    broken = {v.invariant for v in report.violations}
    best = report
    for fault in list(report.schedule.faults):
        faults = [f for f in best.schedule.faults if f is not fault]
        trial = Schedule(best.schedule.seed, best.schedule.workload,
                         dict(best.schedule.params), faults)  # fmt: skip
        again = run(trial.seed, trial.workload, handler=handler, schedule=trial)
        if broken <= {v.invariant for v in again.violations}:
            best = again
    return best
