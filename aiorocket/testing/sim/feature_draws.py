"""The nemesis's client-side draws of issue 44's consumer features, for the consumer
workloads (pull_remoting, pop_remoting, grpc_receive): handlers that ask for their
message back after a delay (``Reconsume(delay=)`` / ``nack(delay=)``), ``pause`` /
``resume`` at drawn times, and a ``max_rate``.

They come from a stream of their own (``random.Random(f"{workload}:{seed}:features")``),
drawn after the workload's, so a seed's other faults are the ones it drew before these
features existed (the seeds that found old defects still find them)."""

from __future__ import annotations

import random
from typing import Any

from aiorocket.testing.sim.nemesis import Fault

__all__ = ["FEATURE_WORKLOADS", "draw_features", "settle_delay"]

FEATURE_WORKLOADS = ("pull_remoting", "pop_remoting", "grpc_receive")

#: a default broker's ``messageDelayLevel`` (the simulated pull broker's own truth):
#: level n (from 1) waits this many seconds
BROKER_DELAY_LEVELS = (1, 5, 10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600,
                       1200, 1800, 3600, 7200)  # fmt: skip


def settle_delay(delay: float, *, levels: bool) -> float:
    """When a message asked back after ``delay`` may come back at the earliest: remoting
    pull rounds up to a delay level (docs/consumer.md), the others keep it exact."""
    if not levels:
        return delay
    for seconds in BROKER_DELAY_LEVELS:
        if seconds >= delay:
            return float(seconds)
    return float(BROKER_DELAY_LEVELS[-1])


def draw_features(seed: int, workload: str, params: dict[str, Any],
                  faults: list[Fault]) -> tuple[dict[str, Any], list[Fault]]:  # fmt: skip
    """The feature draws of run ``seed`` (params to add, faults to append)."""
    if workload not in FEATURE_WORKLOADS:
        return {}, []
    rng = random.Random(f"{workload}:{seed}:features")
    grpc = workload == "grpc_receive"
    span = 3.0 if grpc else 30.0  # how long the run's messages keep coming (seconds)
    messages = params["messages"]
    taken = {f.args["message"] for f in faults if f.kind.startswith("handler_")}
    out: list[Fault] = []
    extra: dict[str, Any] = {}
    shape = params.get("shape", "handler")
    if rng.random() < 0.4 and shape in ("handler", "orderly", "async_for"):
        free = [i for i in range(messages) if i not in taken]
        delays = [0.5, 1.5, 3.0] if grpc else [0.5, 3.0, 7.0, 12.0, 31.0]
        for index in rng.sample(free, k=min(len(free), rng.randint(1, 3))):
            out.append(Fault("handler_retry", {"message": index, "delay": rng.choice(delays),
                                               "attempts": rng.randint(1, 2)}))  # fmt: skip
    if rng.random() < 0.35 and shape != "pull_consumer":
        at = 0.0
        for _ in range(rng.randint(1, 2)):
            at = round(at + rng.uniform(0.0, span / 2), 2)
            seconds = round(rng.uniform(0.2, span / 3), 2)
            out.append(Fault("pause", {"at": at, "seconds": seconds,
                                       "what": rng.choice(["all", "topic"])}))  # fmt: skip
            at += seconds
    joins = any(f.kind == "member_join" for f in faults)
    if rng.random() < 0.35 and not joins and shape not in ("broadcast", "pull_consumer"):
        extra["max_rate"] = rng.choice([1.0, 2.0, 5.0] if not grpc else [5.0, 10.0, 20.0])
        if "store_at" in params and rng.random() < 0.5:  # all waiting at once: the cap shows
            extra["store_at"] = [0.0] * messages
    return extra, out
