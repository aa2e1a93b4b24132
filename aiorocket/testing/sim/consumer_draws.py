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


def _lite_app(rng: random.Random, topics: int, span: float) -> tuple[list[Any], list[Any]]:
    """A lite application's script: when each lite topic is subscribed (0: before the
    start), unsubscribed and subscribed again (within ``span`` seconds each), and when
    each message is stored on which lite topic (within twice ``span``)."""
    plan = []
    for _ in range(topics):
        sub = 0.0 if rng.random() < 0.5 else round(rng.uniform(0.5, span), 2)
        step: dict[str, float] = {"sub": sub}
        if rng.random() < 0.3:
            step["unsub"] = round(step["sub"] + rng.uniform(2, span), 2)
            step["resub"] = round(step["unsub"] + rng.uniform(1, span), 2)
        plan.append(step)
    messages = sorted((round(rng.uniform(0, 2 * span), 2), rng.randrange(topics))
                      for _ in range(rng.randint(6, 24)))  # fmt: skip
    return plan, messages


def _contested(rng: random.Random, topics: int, span: float) -> list[Fault]:
    """The other member of an exclusive group takes 0-2 lite topics: right after our
    add of it, or at a time within ``span``."""
    out = []
    for k in rng.sample(range(topics), k=rng.randint(0, 2)):
        at_add = rng.random() < 0.5
        args: dict[str, Any] = {"lite_topic": f"r{k}", "at_add": at_add}
        if not at_add:
            args["at"] = round(rng.uniform(1, span), 2)
        out.append(Fault("contested", args))
    return out


def _lite_remoting(rng: random.Random) -> tuple[dict[str, Any], list[Fault]]:
    brokers = rng.randint(1, 2)
    topics = rng.randint(2, 4)
    plan, messages = _lite_app(rng, topics, 20.0)
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
        faults += _contested(rng, topics, 60.0)
    faults += _handler_faults(rng, len(messages), hang=True)
    if rng.random() < 0.3:
        faults.append(Fault("close_at", {"seconds": round(rng.uniform(0.1, 40.0), 2)}))
    return params, faults


#: the Proxy's status codes the nemesis answers SyncLiteSubscription with
#: (pb.Code: INTERNAL_SERVER_ERROR, TOO_MANY_REQUESTS)
_PROXY_ERRORS = (50001, 42900)


def _grpc_lite(rng: random.Random) -> tuple[dict[str, Any], list[Fault]]:
    topics = rng.randint(2, 4)
    plan, messages = _lite_app(rng, topics, 10.0)
    exclusive = rng.random() < 0.5
    params: dict[str, Any] = {"exclusive": exclusive, "lite_plan": plan,
                              "lite_messages": messages}  # fmt: skip
    faults: list[Fault] = []
    for _ in range(rng.randint(0, 2)):  # subscription updates refused (resyncs included)
        faults.append(Fault("sync_error", {"from": rng.randint(0, 6),
                                           "count": rng.choice([1, 2, 3]),
                                           "code": rng.choice(_PROXY_ERRORS)}))  # fmt: skip
    if rng.random() < 0.5:
        faults.append(Fault("stream_break", {"receive": rng.randint(0, 6),
                                             "after": rng.randint(0, 3),
                                             "how": rng.choice(["unavailable", "reset"])}))
    if rng.random() < 0.35:  # the Telemetry stream cut with them: lite subscriptions dropped
        faults.append(Fault("connection_drop", {"at": round(rng.uniform(0.5, 30.0), 2)}))
    if rng.random() < 0.2:
        faults.append(Fault("proxy_restart", {"seconds": round(rng.uniform(0.5, 30.0), 2),
                                              "down": rng.choice([0.1, 1.0, 3.0])}))
    if rng.random() < 0.4:  # (the ack batcher's retries, 0.1 s doubling, end one
        # within acked_after_success's 3 s: longer refusals are grpc_receive's to judge)
        faults.append(Fault("ack_refused", {"from_ack": rng.randint(0, 4),
                                            "seconds": rng.choice([0.3, 1.0, 1.4])}))
    for index in rng.sample(range(len(messages)), k=rng.randint(0, 1)):
        faults.append(Fault("compressed_as_gzip", {"message": index,
                                                   "codec": rng.choice(["lz4", "zstd", "zlib"])}))
    if exclusive:
        faults += _contested(rng, topics, 30.0)
    # (slow: 4 s, not 5: the messages of its lite topic behind it wait as long, and
    # received_handed_on's bound is 5 s; 25 s: they are renewed meanwhile or released by
    # a close, and received_handed_on counts from the end of the call they wait behind)
    faults += _handler_faults(rng, len(messages), hang=True, slow=(4, 25))
    if rng.random() < 0.3:
        faults.append(Fault("close_at", {"seconds": round(rng.uniform(0.1, 30.0), 2)}))
    # The Proxy handles an old Telemetry stream's end (and drops the client's lite
    # subscriptions) late, after the client's new stream and resync (a cold 5.5.0 Proxy).
    # Drawn last: the draws above, and the seeds pinned on them, stay as they were.
    if rng.random() < 0.5:
        faults.append(Fault("late_offline", {"seconds": round(rng.uniform(0.3, 6.0), 2)}))
    return params, faults


DRAWS: dict[str, Draw] = {"lite_remoting": _lite_remoting, "grpc_lite": _grpc_lite}


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
