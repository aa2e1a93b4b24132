"""The nemesis's client-side draws of issue 44's consumer features, for the consumer
workloads (pull_remoting, pop_remoting, grpc_receive): handlers that ask for their
message back after a delay (``Reconsume(delay=)`` / ``nack(delay=)``), ``pause`` /
``resume`` at drawn times, a ``max_rate`` and a ``topic_max_rate``.

They come from a stream of their own (``random.Random(f"{workload}:{seed}:features")``),
drawn after the workload's, so a seed's other faults are the ones it drew before these
features existed (the seeds that found old defects still find them)."""

from __future__ import annotations

import random
from typing import Any

from aiorocket.testing.sim.nemesis import Fault

__all__ = ["FEATURE_WORKLOADS", "draw_features", "settle_delay"]

FEATURE_WORKLOADS = ("pull_remoting", "pop_remoting", "grpc_receive", "fifo_async_for")

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


def _pauses(rng: random.Random, span: float) -> list[Fault]:
    """One or two pauses (of everything, or of the topic) within the run's first span."""
    out: list[Fault] = []
    if rng.random() < 0.35:
        at = 0.0
        for _ in range(rng.randint(1, 2)):
            at = round(at + rng.uniform(0.0, span / 2), 2)
            seconds = round(rng.uniform(0.2, span / 3), 2)
            out.append(Fault("pause", {"at": at, "seconds": seconds,
                                       "what": rng.choice(["all", "topic"])}))  # fmt: skip
            at += seconds
    return out


def draw_features(seed: int, workload: str, params: dict[str, Any],
                  faults: list[Fault]) -> tuple[dict[str, Any], list[Fault]]:  # fmt: skip
    """The feature draws of run ``seed`` (params to add, faults to append)."""
    if workload not in FEATURE_WORKLOADS:
        return {}, []
    rng = random.Random(f"{workload}:{seed}:features")
    grpc = workload in ("grpc_receive", "fifo_async_for")
    span = 3.0 if grpc else 30.0  # how long the run's messages keep coming (seconds)
    if workload == "fifo_async_for":
        # FIFO groups: a pause only (order is its invariant), early: a run without
        # failures lasts milliseconds
        if rng.random() < 0.6:
            return {}, [Fault("pause", {"at": round(rng.uniform(0.0, 0.02), 3),
                                        "seconds": round(rng.uniform(0.05, 0.5), 2),
                                        "what": rng.choice(["all", "topic"])})]  # fmt: skip
        return {}, []
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
    pauses = _pauses(rng, span)  # drawn in any case: the draws after it stay the same
    if shape != "pull_consumer":
        out += pauses
    joins = any(f.kind == "member_join" for f in faults)
    if rng.random() < 0.35 and not joins and shape not in ("broadcast", "pull_consumer"):
        extra["max_rate"] = rng.choice([1.0, 2.0, 5.0] if not grpc else [5.0, 10.0, 20.0])
        if "store_at" in params and rng.random() < 0.5:  # all waiting at once: the cap shows
            extra["store_at"] = [0.0] * messages
    # topic_max_rate, drawn last (the draws above stay each seed's). These workloads
    # subscribe one topic: its own bucket limits it (and, over POP and gRPC, its own
    # receive loop receives it, the shared ones not started), with max_rate or without.
    # Not with a long run of failed pops: one loop retries them at the receive backoff's
    # 10 s cap, so 60 of them (drawn by count, not time) outlast the run's phase.
    stalls = any(f.kind == "pop_error" and f.args["count"] > 10 for f in faults)
    if rng.random() < 0.35 and not joins and not stalls and \
            shape not in ("broadcast", "pull_consumer"):  # fmt: skip
        extra["topic_max_rate"] = rng.choice([0.5, 1.0, 2.0] if not grpc else [2.0, 5.0, 10.0])
    return extra, out
