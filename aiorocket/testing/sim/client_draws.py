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

#: workload -> the span (virtual seconds) a cancellation is drawn in (None: not drawn)
CLIENT_WORKLOADS: dict[str, float | None] = {"pop_remoting": 20.0, "pull_remoting": 40.0,
                                             "grpc_receive": 3.0, "producer_sends": None,
                                             "fifo_async_for": None}  # fmt: skip


def draw_client(seed: int, workload: str, params: dict[str, Any],
                faults: list[Fault]) -> list[Fault]:  # fmt: skip
    """The application-side faults of run ``seed`` (``faults``: the run's others)."""
    if workload not in CLIENT_WORKLOADS:
        return []
    rng = random.Random(f"{workload}:{seed}:client")
    out: list[Fault] = []
    span = CLIENT_WORKLOADS[workload]
    # not with a broker crash on pull: the crash bound is the queue owner's, and the
    # member cancelled is gone (as members joining are drawn apart from crashes)
    crash = any(f.kind == "broker_restart" for f in faults)
    if span is not None and rng.random() < 0.3 and not crash:
        out.append(Fault("app_cancel", {"at": round(rng.uniform(0.0, span), 2)}))
    iterated = workload == "fifo_async_for" or params.get("shape") == "async_for"
    if iterated and rng.random() < 0.5:
        # the application breaks out of its async for at its n-th message received (0
        # first), that message in hand, unsettled, then iterates again
        messages = params.get("messages") or params["groups"] * params["per_group"]
        out.append(Fault("iter_break", {"at": rng.randrange(messages)}))
    if workload == "pull_remoting" and rng.random() < 0.3 and not crash:
        # a half-open connection: every connection to a broker silent, open
        broker = rng.choice(["sim-broker-a", "sim-broker-b"][: params["brokers"]])
        out.append(Fault("half_open", {"broker": broker, "at": round(rng.uniform(1.0, 30.0), 2)}))
    if workload == "producer_sends" and rng.random() < 0.5:
        # sends cancelled from outside (a cancel scope around ``send``)
        names = [f"o{k}-{n}" for k in range(params["keys"]) for n in range(params["per_key"])]
        names += [f"p{s}-{n}" for s in range(params["senders"]) if not params["start_send"][s]
                  for n in range(params["per_sender"])]  # fmt: skip
        for key in rng.sample(names, k=min(len(names), rng.randint(1, 2))):
            after = rng.choice([0.0, 0.0, 0.2, 0.5, 1.5])  # at once, or while it waits
            out.append(Fault("send_cancel", {"key": key, "after": after}))
    return out
