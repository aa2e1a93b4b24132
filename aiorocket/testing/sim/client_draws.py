"""The nemesis's application-side draws of issue 40 not drawn before: the application
cancelled from outside at a random point (the task running ``async with consumer``),
and ``break`` out of ``async for`` at a random message.

They come from a stream of their own (``random.Random(f"{workload}:{seed}:client")``),
drawn after the workload's and the features', so a seed's other faults are the ones it
drew before (the seeds that found old defects still find them)."""

from __future__ import annotations

import random
from typing import Any

from aiorocket.testing.sim.nemesis import Fault

__all__ = ["CLIENT_WORKLOADS", "draw_client"]

#: workload -> the span (virtual seconds) a cancellation is drawn in
CLIENT_WORKLOADS = {"pop_remoting": 20.0}


def draw_client(seed: int, workload: str, params: dict[str, Any]) -> list[Fault]:
    """The application-side faults of run ``seed``."""
    if workload not in CLIENT_WORKLOADS:
        return []
    rng = random.Random(f"{workload}:{seed}:client")
    out: list[Fault] = []
    if rng.random() < 0.3:
        out.append(Fault("app_cancel", {"at": round(rng.uniform(0.0, CLIENT_WORKLOADS[workload]),
                                                      2)}))  # fmt: skip
    if params.get("shape") == "async_for" and rng.random() < 0.5:
        out.append(Fault("iter_break", {"after": rng.randrange(params["messages"])}))
    return out
