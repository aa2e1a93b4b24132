"""A fault simulator for aiorocket's message paths (docs/simulator.md).

    from aiorocket.testing.sim import run
    report = run(seed=7, workload="pop_remoting")
    assert report.ok, str(report)   # prints the seed and its fault schedule

A seeded nemesis draws a fault schedule (``nemesis``), simulated servers with their own
truth answer the real client over its own wire formats (``remoting``, ``proxy``), a
workload drives a consumer shape, and the checker judges the run's history against the
at-least-once contract (``checker``).
"""

from aiorocket.testing.sim.checker import INVARIANTS, Bounds, Violation, check
from aiorocket.testing.sim.history import Event, History
from aiorocket.testing.sim.nemesis import Fault, Schedule, draw
from aiorocket.testing.sim.runner import WORKLOADS, Report, run, shrink

__all__ = [
    "INVARIANTS",
    "WORKLOADS",
    "Bounds",
    "Event",
    "Fault",
    "History",
    "Report",
    "Schedule",
    "Violation",
    "check",
    "draw",
    "run",
    "shrink",
]
