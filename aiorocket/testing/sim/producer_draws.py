"""The nemesis's draws for the producer workloads (``producer_sends``,
``producer_txn``): parameters and faults from the run's seeded
``random.Random``, as ``nemesis.draw`` does for the others."""

from __future__ import annotations

import random
from typing import Any

from aiorocket.testing.sim.nemesis import SYSTEM_BUSY, SYSTEM_ERROR, Fault, _grpc_receive

__all__ = ["PRODUCER_DRAWS", "draw_full", "draw_send_rate"]

_BROKERS = ("sim-broker-a", "sim-broker-b")


def _send_faults(rng: random.Random, keys: list[str], *, resets: bool = True) -> list[Fault]:
    """Per message (by key, so that a seed replays whatever the interleaving): a broker
    slow for its first attempts there (late answers, within or past a short timeout),
    error answers (nothing stored), the connection closed after it was stored."""
    def pick() -> dict[str, Any]:
        return {"key": rng.choice(keys), "broker": rng.choice(_BROKERS),
                "count": rng.choice([1, 1, 2])}

    faults = [Fault("broker_slow", {**pick(), "seconds": rng.choice([0.8, 1.5, 3.0])})
              for _ in range(rng.randint(0, 2))]  # fmt: skip
    faults += [Fault("send_error", {**pick(), "code": rng.choice([SYSTEM_BUSY, SYSTEM_ERROR])})
               for _ in range(rng.randint(0, 2))]  # fmt: skip
    if resets and rng.random() < 0.3:
        faults.append(Fault("reset_after_store", pick()))
    return faults


def _producer_sends(rng: random.Random) -> tuple[dict[str, Any], list[Fault]]:
    """Ordered sends (sharding key or selector), and plain senders with timeouts of
    their own, auto-batched or not (``send`` and ``start_send``)."""
    keys, per_key = rng.randint(0, 3), rng.randint(2, 6)
    senders, per_sender = rng.randint(1, 4), rng.randint(2, 6)
    params: dict[str, Any] = {
        "keys": keys, "per_key": per_key, "senders": senders, "per_sender": per_sender,
        "retries": rng.choice([0, 1, 2]), "auto_batch": rng.random() < 0.7,
        "selector": rng.random() < 0.3, "queues": rng.randint(1, 4),
        "timeouts": [rng.choice([0.5, 1.0, 5.0]) for _ in range(senders)],
        "start_send": [rng.random() < 0.3 for _ in range(senders)],
        "big": sorted(rng.sample(range(per_sender), k=rng.randint(0, 1))),
    }  # fmt: skip
    names = [f"o{k}-{n}" for k in range(keys) for n in range(per_key)]
    names += [f"p{s}-{n}" for s in range(senders) for n in range(per_sender)]
    return params, _send_faults(rng, names)


def draw_send_rate(seed: int, workload: str) -> dict[str, Any]:
    """``producer_sends``'s ``max_rate`` (issue 44), from a stream of its own drawn after
    every other draw, so a seed's other parameters and faults stay those it drew before."""
    if workload != "producer_sends":
        return {}
    rng = random.Random(f"{workload}:{seed}:send_rate")
    return {"max_rate": rng.choice([2.0, 5.0, 20.0])} if rng.random() < 0.4 else {}


def draw_full(seed: int, workload: str,
              params: dict[str, Any]) -> tuple[dict[str, Any], list[Fault]]:  # fmt: skip
    """``producer_sends_full``'s full senders (``nemesis.FULL``), from a stream of its own
    drawn after every other draw (a seed's base draws are ``producer_sends``'): tasks
    that each keep one ``start_send`` of a 1 KiB body under way, as many as (or more
    than) ``max_in_flight`` (48 or 64), so that requests of 32 KiB (32 bodies) fill while
    every slot is taken and their answers take the topic's turn (``_TopicLane.turn``);
    auto-batched and unpaced (no ``max_rate``) whatever the base drew. Their faults: a
    broker slow, refusing or reset for one of their messages (the request of the turn's
    holder, or of an answer waiting for it, hangs, fails or times out), sends cancelled
    by the application, every full sender cancelled at once (``full_cancel``) while
    their requests are under way, the producer closed under every sender
    (``full_close``)."""
    rng = random.Random(f"{workload}:{seed}:full")
    slots = rng.choice([48, 64, 64])
    senders = slots + rng.choice([0, 0, 8])  # more: some wait for a slot
    per_sender = rng.randint(3, 6)
    full: dict[str, Any] = {
        "max_in_flight": slots, "senders": senders, "per_sender": per_sender,
        "short": sorted(rng.sample(range(senders), k=rng.randint(0, 8))),  # 1 s, else 5 s
    }  # fmt: skip
    names = [f"f{s}-{n}" for s in range(senders) for n in range(per_sender)]
    faults = _send_faults(rng, names)
    if rng.random() < 0.5:  # sends cancelled from outside: at once, or while under way
        faults += [Fault("send_cancel", {"key": key, "after": rng.choice([0.0, 0.2, 0.5, 1.5])})
                   for key in rng.sample(names, k=rng.randint(1, 3))]  # fmt: skip
    # both struck once n full sends had their outcome (they take a fraction of a
    # virtual second: a time would mostly fall after them)
    if rng.random() < 0.2:  # every full sender cancelled at once
        faults.append(Fault("full_cancel", {"outcomes": rng.randrange(len(names) * 3 // 4)}))
    if rng.random() < 0.2:  # the producer closed under them and the base sends
        faults.append(Fault("full_close", {"outcomes": rng.randrange(len(names) * 3 // 4)}))
    params.pop("max_rate", None)  # paced, requests would not fill
    return {"auto_batch": True, "full": full}, faults


def _producer_txn(rng: random.Random) -> tuple[dict[str, Any], list[Fault]]:
    """Transactions: each local transaction commits, rolls back, answers UNKNOWN (its
    database knows), or raises, after some seconds; ends lost, check-backs early (while
    the local transaction runs), a checker that fails once, a crash at a random point."""
    messages = rng.randint(2, 8)
    params: dict[str, Any] = {"messages": messages, "concurrency": rng.randint(1, 3),
                              "retries": rng.choice([0, 1, 2])}  # fmt: skip
    faults: list[Fault] = []
    for i in range(messages):
        outcome = rng.choice(["commit", "commit", "rollback", "unknown", "raise"])
        args: dict[str, Any] = {"key": f"t-{i}", "outcome": outcome,
                                "seconds": rng.choice([0.0, 0.0, 0.5, 2.0, 5.0])}
        if outcome == "unknown":
            args["truth"] = rng.choice(["commit", "rollback"])
        faults.append(Fault("local_txn", args))
    for i in rng.sample(range(messages), k=rng.randint(0, 2)):
        faults.append(Fault("end_lost", {"key": f"t-{i}"}))
    for i in rng.sample(range(messages), k=rng.randint(0, 2)):
        faults.append(Fault("check_early", {"key": f"t-{i}",
                                            "after": rng.choice([0.1, 0.3, 1.0])}))
    for i in rng.sample(range(messages), k=rng.randint(0, 1)):
        faults.append(Fault("checker_raises", {"key": f"t-{i}"}))
    faults += _send_faults(rng, [f"t-{i}" for i in range(messages)], resets=False)[:1]
    if rng.random() < 0.3:
        faults.append(Fault("crash_at", {"seconds": round(rng.uniform(0.1, 6.0), 2)}))
    return params, faults


def _grpc_producer(rng: random.Random) -> tuple[dict[str, Any], list[Fault]]:
    """Through the Proxy: senders with timeouts of their own (auto-batched or not), FIFO
    sends of message groups, transactions as ``producer_txn``; per message the Proxy
    slow or refusing; the Proxy restarted (every session and its settings lost)."""
    senders, per_sender = rng.randint(1, 4), rng.randint(2, 5)
    groups, per_group, txns = rng.randint(0, 2), rng.randint(2, 4), rng.randint(0, 4)
    params: dict[str, Any] = {
        "senders": senders, "per_sender": per_sender, "auto_batch": rng.random() < 0.6,
        "timeouts": [rng.choice([0.5, 1.0, 4.0]) for _ in range(senders)],
        "groups": groups, "per_group": per_group, "txns": txns,
        "batch_in_flight": rng.choice([1, 2]),
    }  # fmt: skip
    names = [f"p{s}-{n}" for s in range(senders) for n in range(per_sender)]
    names += [f"o{g}-{n}" for g in range(groups) for n in range(per_group)]
    faults = [Fault("proxy_slow", {"key": rng.choice(names), "count": 1,
                                   "seconds": rng.choice([0.7, 1.5])})
              for _ in range(rng.randint(0, 2))]  # fmt: skip
    faults += [Fault("send_refused", {"key": rng.choice(names), "count": rng.choice([1, 3])})
               for _ in range(rng.randint(0, 2))]  # fmt: skip
    for i in range(txns):
        outcome = rng.choice(["commit", "commit", "rollback", "unknown", "raise"])
        args: dict[str, Any] = {"key": f"t-{i}", "outcome": outcome,
                                "seconds": rng.choice([0.0, 0.3, 1.5])}
        if outcome == "unknown":
            args["truth"] = rng.choice(["commit", "rollback"])
        faults.append(Fault("local_txn", args))
    for i in rng.sample(range(txns), k=min(txns, rng.randint(0, 1))):
        faults.append(Fault("end_lost", {"key": f"t-{i}"}))
    if rng.random() < 0.4:
        faults.append(Fault("proxy_restart", {"seconds": round(rng.uniform(0.1, 2.0), 2),
                                              "down": rng.choice([0.1, 0.5, 1.0])}))
    if txns and rng.random() < 0.3:
        faults.append(Fault("crash_at", {"seconds": round(rng.uniform(0.1, 2.0), 2)}))
    return params, faults


def _grpc_restart(rng: random.Random) -> tuple[dict[str, Any], list[Fault]]:
    """``grpc_receive``'s draw, and a Proxy restart (0.2-3 s into the run, down 0.1-1 s)."""
    params, faults = _grpc_receive(rng)
    faults.append(Fault("proxy_restart", {"seconds": round(rng.uniform(0.2, 3.0), 2),
                                          "down": rng.choice([0.1, 0.5, 1.0])}))  # fmt: skip
    return params, faults


PRODUCER_DRAWS = {
    "producer_sends": _producer_sends,
    "producer_txn": _producer_txn,
    "grpc_producer": _grpc_producer,
    "grpc_restart": _grpc_restart,
}
