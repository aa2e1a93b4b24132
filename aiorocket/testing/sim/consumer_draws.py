"""The nemesis's draws for the lite and pull consumer workloads (``nemesis.draw`` reads
them): each returns a workload's parameters and its faults, from the run's own
``random.Random``."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from aiorocket.testing.sim.nemesis import SYSTEM_BUSY, SYSTEM_ERROR, Fault, _handler_faults

__all__ = ["DRAWS"]

Draw = Callable[[random.Random], tuple[dict[str, Any], list[Fault]]]

_BROKERS = ("sim-broker-a", "sim-broker-b")


def _lite_remoting(rng: random.Random) -> tuple[dict[str, Any], list[Fault]]:
    brokers = rng.randint(1, 2)
    topics = rng.randint(2, 4)
    plan = []
    for _ in range(topics):
        sub = 0.0 if rng.random() < 0.5 else round(rng.uniform(0.5, 20), 2)
        step: dict[str, float] = {"sub": sub}
        if rng.random() < 0.3:
            step["unsub"] = round(step["sub"] + rng.uniform(2, 20), 2)
            step["resub"] = round(step["unsub"] + rng.uniform(1, 20), 2)
        plan.append(step)
    messages = sorted((round(rng.uniform(0, 40), 2), rng.randrange(topics))
                      for _ in range(rng.randint(6, 24)))  # fmt: skip
    exclusive = rng.random() < 0.5
    params: dict[str, Any] = {"brokers": brokers, "exclusive": exclusive, "lite_plan": plan,
                              "lite_messages": messages}  # fmt: skip
    names = _BROKERS[:brokers]
    faults: list[Fault] = []
    for _ in range(rng.randint(0, 2)):  # subscription updates refused (resyncs included)
        faults.append(Fault("ctl_error", {"broker": rng.choice(names), "from": rng.randint(0, 6),
                                          "count": rng.choice([1, 2, 3]),
                                          "code": rng.choice([SYSTEM_ERROR, SYSTEM_BUSY])}))
    if rng.random() < 0.3:
        faults.append(Fault("ctl_delay", {"broker": rng.choice(names), "ctl": rng.randint(0, 6),
                                          "seconds": rng.choice([1.0, 5.0])}))
    if rng.random() < 0.2:  # SIGSTOP: requests time out, then answered late
        faults.append(Fault("broker_pause", {"broker": rng.choice(names),
                                             "at": round(rng.uniform(5, 60), 2),
                                             "seconds": rng.choice([5.0, 20.0])}))
    if rng.random() < 0.3:
        faults.append(Fault("ack_error", {"from": rng.randint(0, 6), "count": rng.choice([1, 2]),
                                          "code": SYSTEM_BUSY}))
    if exclusive:  # the other member of the group takes lite topics
        for k in rng.sample(range(topics), k=rng.randint(0, 2)):
            at_add = rng.random() < 0.5
            args: dict[str, Any] = {"lite_topic": f"r{k}", "at_add": at_add}
            if not at_add:
                args["at"] = round(rng.uniform(1, 60), 2)
            faults.append(Fault("contested", args))
    faults += _handler_faults(rng, len(messages), hang=True)
    if rng.random() < 0.3:
        faults.append(Fault("close_at", {"seconds": round(rng.uniform(0.1, 40.0), 2)}))
    return params, faults


DRAWS: dict[str, Draw] = {"lite_remoting": _lite_remoting}


def _pull_remoting(rng: random.Random) -> tuple[dict[str, Any], list[Fault]]:
    brokers = rng.randint(1, 2)
    messages = rng.randint(8, 40)
    shape = rng.choice(["handler", "handler", "orderly", "batch", "async_for", "pull_consumer",
                        "broadcast"])  # fmt: skip
    store_at = sorted(round(rng.uniform(0, 30), 2) for _ in range(messages))
    params: dict[str, Any] = {"brokers": brokers, "queues": rng.randint(1, 3), "shape": shape,
                              "messages": messages, "store_at": store_at}  # fmt: skip
    names = _BROKERS[:brokers]
    faults: list[Fault] = []
    for _ in range(rng.randint(0, 2)):
        faults.append(Fault("pull_error", {"broker": rng.choice(names), "from": rng.randint(0, 20),
                                           "count": rng.choice([1, 3, 5]),
                                           "code": rng.choice([SYSTEM_ERROR, SYSTEM_BUSY])}))
    if rng.random() < 0.25:
        faults.append(Fault("connection_reset", {"broker": rng.choice(names),
                                                 "at": round(rng.uniform(1, 40), 2)}))
    # a crash and members coming and going are drawn apart: a queue another member took
    # may be anywhere (docs/reliability.md), the crash bound is the queue owner's
    if rng.random() < 0.45:
        faults.append(Fault("broker_restart", {"broker": rng.choice(names),
                                               "at": round(rng.uniform(3, 35), 2),
                                               "down": rng.choice([3.0, 8.0, 20.0])}))
    elif shape != "broadcast":  # (a broadcasting member consumes every message)
        for _ in range(rng.randint(0, 2)):
            faults.append(Fault("member_join", {"at": round(rng.uniform(0, 30), 2),
                                                "stay": rng.choice([3.0, 10.0, 30.0])}))
    hang = shape not in ("async_for", "pull_consumer")  # no consume timeout there
    faults += _handler_faults(rng, messages, hang=hang, slow=(2, 8, 25))
    return params, faults


DRAWS["pull_remoting"] = _pull_remoting
