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
                                             "fifo_async_for": None,
                                             "grpc_lite": 30.0}  # fmt: skip


def draw_client(seed: int, workload: str, params: dict[str, Any],
                faults: list[Fault]) -> list[Fault]:  # fmt: skip
    """The application-side faults of run ``seed`` (``faults``: the run's others)."""
    if workload in ("producer_txn", "grpc_producer"):
        return _txn_cancel(seed, workload, params) + _half_open(seed, workload, params, faults)
    if workload not in CLIENT_WORKLOADS:
        return _half_open(seed, workload, params, faults)
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
    return out + _half_open(seed, workload, params, faults)


def _txn_cancel(seed: int, workload: str, params: dict[str, Any]) -> list[Fault]:
    """Transactions (and, through the Proxy, plain and FIFO sends) cancelled from
    outside: a cancel scope around ``send_in_transaction`` (``send``) whose deadline
    comes at once, during the half send, the local transaction or the end (own
    stream)."""
    rng = random.Random(f"{workload}:{seed}:cancel")
    if rng.random() >= 0.5:
        return []
    count = params["messages"] if workload == "producer_txn" else params["txns"]
    names = [f"t-{i}" for i in range(count)]
    if workload == "grpc_producer":
        names += [f"p{s}-{n}" for s in range(params["senders"])
                  for n in range(params["per_sender"])]  # fmt: skip
        names += [f"o{g}-{n}" for g in range(params["groups"])
                  for n in range(params["per_group"])]  # fmt: skip
    return [Fault("send_cancel", {"key": key, "after": rng.choice([0.0, 0.0, 0.2, 0.5, 1.5, 3.0])})
            for key in rng.sample(names, k=min(len(names), rng.randint(1, 2)))]  # fmt: skip


#: workload -> the span (virtual seconds) a half-open connection is drawn in, from a
#: stream of its own (``pull_remoting`` draws its own from the client stream, above);
#: 0: the Proxy's, drawn as the delivery it strikes before
HALF_OPEN_SPANS = {"pop_remoting": 20.0, "lite_remoting": 40.0, "grpc_receive": 0.0,
                   "fifo_async_for": 0.0, "grpc_producer": 0.0, "grpc_lite": 0.0}  # fmt: skip


def _half_open(seed: int, workload: str, params: dict[str, Any],
               faults: list[Fault]) -> list[Fault]:  # fmt: skip
    """Every connection to one broker (gRPC: to the Proxy) silent, open, at a drawn
    time. Not with a paused broker (its requests time out already), nor with a consumer
    paused (``pause()``: it sends no pop, only its heartbeat every 30 s, so its bound
    to notice is the heartbeat's)."""
    span = HALF_OPEN_SPANS.get(workload)
    rng = random.Random(f"{workload}:{seed}:half_open")
    if span is None or rng.random() >= 0.3 or \
            any(f.kind in ("broker_pause", "pause") for f in faults):  # fmt: skip
        return []
    if workload == "grpc_producer":  # before the Proxy stores the n-th send request
        sends = params["senders"] * params["per_sender"] + \
            params["groups"] * params["per_group"] + params["txns"]  # fmt: skip
        return [Fault("half_open", {"broker": "proxy", "sent": rng.randrange(sends)})]
    if span == 0:  # the gRPC runs last a fraction of a second: before a delivery
        if "lite_messages" in params:
            messages = len(params["lite_messages"])
        else:
            messages = params.get("messages") or params["groups"] * params["per_group"]
        return [Fault("half_open", {"broker": "proxy", "delivered": rng.randrange(messages)})]
    brokers = ["sim-broker-a", "sim-broker-b"][: params["brokers"]]
    at = round(rng.uniform(1.0, span), 2)
    return [Fault("half_open", {"broker": rng.choice(brokers), "at": at})]
