"""The nemesis: a fault schedule drawn up front from the run's seed, so that a seed
names its faults and replaying the seed replays them.

A schedule is data (a list of :class:`Fault`), drawn by ``random.Random(seed)`` before
anything runs; the simulated servers and the workloads read it, nothing else draws
from the seed's stream. ``str(schedule)`` prints it, one fault a line.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

__all__ = ["LATE", "LATE_WORKLOADS", "Fault", "Schedule", "draw"]

#: broker answer codes the nemesis uses (ResponseCode)
SYSTEM_ERROR, SYSTEM_BUSY, POLLING_FULL = 1, 2, 209


@dataclass(slots=True, frozen=True)
class Fault:
    """One fault: ``kind`` and where it strikes (request counts, message indexes,
    seconds of the run), in ``args``."""

    kind: str
    args: dict[str, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        args = " ".join(f"{k}={v}" for k, v in sorted(self.args.items()))
        return f"{self.kind} {args}".strip()


@dataclass(slots=True)
class Schedule:
    """A run's workload parameters and faults."""

    seed: int
    workload: str
    params: dict[str, Any]
    faults: list[Fault]

    def of(self, kind: str) -> list[Fault]:
        return [f for f in self.faults if f.kind == kind]

    def __str__(self) -> str:
        head = f"seed={self.seed} workload={self.workload} " + " ".join(
            f"{k}={v}" for k, v in sorted(self.params.items())
        )
        return "\n".join([head, *(f"  {f}" for f in self.faults)])


def _handler_faults(rng: random.Random, messages: int, *, hang: bool,
                    slow: tuple[float, ...] = (5, 25, 40)) -> list[Fault]:  # fmt: skip
    """Handlers that raise (on their first attempts), run past the invisible time, or
    hang until the consume timeout."""
    out = []
    kinds = ["raise", "raise", "slow"] + (["hang"] if hang else [])
    for index in rng.sample(range(messages), k=rng.randint(0, min(3, messages))):
        kind = rng.choice(kinds)
        args: dict[str, Any] = {"message": index}
        if kind == "raise":
            args["attempts"] = rng.randint(1, 2)
        elif kind == "slow":
            args["seconds"] = rng.choice(slow)
        out.append(Fault("handler_" + kind, args))
    return out


def _pop_remoting(rng: random.Random) -> tuple[dict[str, Any], list[Fault]]:
    messages = rng.randint(4, 24)
    params = {"messages": messages, "queues": rng.randint(1, 3), "brokers": rng.randint(1, 2),
              "orderly": rng.random() < 0.3}  # fmt: skip
    faults: list[Fault] = []
    for _ in range(rng.randint(0, 3)):
        code = rng.choice([POLLING_FULL, POLLING_FULL, SYSTEM_BUSY, SYSTEM_ERROR])
        # a long burst only of 'full' (answered at once, it tests the backoff); errors
        # in bursts that leave the run time to finish
        count = rng.choice([1, 3, 60] if code == POLLING_FULL else [1, 3, 5])
        faults.append(Fault("pop_error", {"from_pop": rng.randint(0, 12), "count": count,
                                          "code": code}))
    for _ in range(rng.randint(0, 2)):
        code = rng.choice([SYSTEM_BUSY, SYSTEM_ERROR])
        faults.append(Fault("ack_error", {"from_ack": rng.randint(0, 6),
                                          "count": rng.choice([1, 2, 4]), "code": code}))
    if rng.random() < 0.3:
        faults.append(Fault("change_error", {"from_change": rng.randint(0, 3),
                                             "count": rng.randint(1, 3), "code": SYSTEM_BUSY}))
    if rng.random() < 0.35:
        faults.append(Fault("undecodable_record", {"message": rng.randrange(messages)}))
    for index in rng.sample(range(messages), k=rng.randint(0, min(3, messages))):
        faults.append(Fault("compressed", {"message": index,
                                           "codec": rng.choice(["zlib", "lz4", "zstd"])}))
    if rng.random() < 0.2:
        faults.append(Fault("pop_delay", {"pop": rng.randint(0, 10),
                                          "seconds": rng.choice([2.0, 8.0])}))
    faults += _handler_faults(rng, messages, hang=True)
    if rng.random() < 0.3:
        faults.append(Fault("close_at", {"seconds": round(rng.uniform(0.1, 20.0), 2)}))
    return params, faults


def _grpc_receive(rng: random.Random) -> tuple[dict[str, Any], list[Fault]]:
    messages = rng.randint(4, 16)
    params = {"messages": messages}
    faults: list[Fault] = []
    if rng.random() < 0.6:
        faults.append(Fault("stream_break", {"receive": rng.randint(0, 2),
                                             "after": rng.randint(0, 4),
                                             "how": rng.choice(["unavailable", "reset"])}))
    for index in rng.sample(range(messages), k=rng.randint(0, 2)):
        faults.append(Fault("compressed_as_gzip", {"message": index,
                                                   "codec": rng.choice(["lz4", "zstd", "zlib"])}))
    if rng.random() < 0.5:
        faults.append(Fault("ack_refused", {"from_ack": rng.randint(0, 2),
                                            "seconds": rng.choice([0.3, 1.5, 3.0])}))
    faults += _handler_faults(rng, messages, hang=False, slow=(0.5, 2.0))
    if rng.random() < 0.2:
        faults.append(Fault("close_at", {"seconds": round(rng.uniform(0.2, 3.0), 2)}))
    return params, faults


def _fifo_async_for(rng: random.Random) -> tuple[dict[str, Any], list[Fault]]:
    groups = rng.randint(1, 3)
    per_group = rng.randint(2, 5)
    params = {"groups": groups, "per_group": per_group}
    faults = [Fault("iter_fail", {"message": i, "attempts": 1})
              for i in rng.sample(range(groups * per_group), k=rng.randint(1, 2))]
    return params, faults


def _producer_stall(rng: random.Random) -> tuple[dict[str, Any], list[Fault]]:
    messages = rng.randint(4, 12)
    params: dict[str, Any] = {
        "messages": messages, "warm": 4, "retries": rng.choice([0, 0, 1, 2]),
        "halves": sorted(rng.sample(range(messages), k=rng.randint(0, 3))),
    }  # fmt: skip
    faults = [Fault("broker_slow", {"broker": rng.choice(["sim-broker-a", "sim-broker-b"]),
                                    "from_send": rng.randint(4, 4 + messages),
                                    "count": rng.randint(1, 4),
                                    "seconds": rng.choice([1.0, 1.5, 3.0])})
              for _ in range(rng.randint(0, 2))]  # fmt: skip
    return params, faults


_DRAWS = {
    "producer_stall": _producer_stall,
    "pop_remoting": _pop_remoting,
    "grpc_receive": _grpc_receive,
    "fifo_async_for": _fifo_async_for,
}


def _draws() -> dict[str, Any]:
    # the consumer workloads' draws live with them (they import this module's helpers)
    from aiorocket.testing.sim.consumer_draws import DRAWS
    from aiorocket.testing.sim.producer_draws import PRODUCER_DRAWS
    from aiorocket.testing.sim.reply_workload import draw_request_reply

    return {**_DRAWS, **DRAWS, **PRODUCER_DRAWS, "request_reply": draw_request_reply}


#: the suffix of a workload's variant whose requests reach the Proxy late: the network
#: holding a connection's bytes (``arrival``) and the Proxy's consumer pool busy
#: (``pool_busy``), drawn after the base workload's draws of the same seed
LATE = "_late"
#: the workloads that have one (their Proxy is ``SimProxy`` or a subclass)
LATE_WORKLOADS = ("grpc_receive", "fifo_async_for", "grpc_restart", "grpc_lite")
#: the suffix of ``producer_sends``'s variant that also fills requests while every
#: ``start_send`` slot is taken (``producer_draws.draw_full``): the base workload's draws
#: of the seed, and the full senders' drawn after them from a stream of their own
FULL = "_full"


def base_workload(workload: str) -> str:
    """The workload whose draws (and runner) a variant's are: ``LATE`` or ``FULL`` off."""
    return workload.removesuffix(LATE).removesuffix(FULL)


def draw(seed: int, workload: str) -> Schedule:
    """The schedule of run ``seed`` of ``workload`` (a ``LATE`` variant: the base
    workload's schedule of ``seed`` and the late faults; ``FULL``: and the full
    senders)."""
    base = base_workload(workload)
    params, faults = _draw_base(seed, base)
    if workload.endswith(FULL):
        from aiorocket.testing.sim.producer_draws import draw_full

        more, extra = draw_full(seed, base, params)
        params.update(more)
        faults += extra
    elif base != workload:
        from aiorocket.testing.sim.arrival import draw_arrival_delay
        from aiorocket.testing.sim.pool_busy import draw_pool_busy

        faults += draw_arrival_delay(seed, base) + draw_pool_busy(seed, base)
    return Schedule(seed, workload, params, faults)


def _draw_base(seed: int, workload: str) -> tuple[dict[str, Any], list[Fault]]:
    rng = random.Random(f"{workload}:{seed}")
    params, faults = _draws()[workload](rng)
    params["server_seed"] = rng.randrange(2**32)
    from aiorocket.testing.sim.feature_draws import draw_features

    extra, more = draw_features(seed, workload, params, faults)
    params.update(extra)
    faults += more
    from aiorocket.testing.sim.client_draws import draw_client

    faults += draw_client(seed, workload, params, faults)
    from aiorocket.testing.sim.dedup_sim import draw_dedup

    params.update(draw_dedup(seed, workload, params))
    from aiorocket.testing.sim.producer_draws import draw_send_rate

    params.update(draw_send_rate(seed, workload))
    faults += _settings_late(seed, workload)
    from aiorocket.testing.sim.offset_faults import draw_offset_faults

    faults += draw_offset_faults(seed, workload, params, faults)
    return params, faults


def _settings_late(seed: int, workload: str) -> list[Fault]:
    """The Proxy's client-manage pool applying the client's settings messages late (by
    ``seconds``, or at a termination that comes meanwhile: ``aiorocket.testing.sim.proxy``),
    from a stream of its own, drawn last: a seed's other faults are those it drew before."""
    if workload != "grpc_receive":
        return []
    rng = random.Random(f"{workload}:{seed}:settings_late")
    if rng.random() < 0.3:
        return [Fault("settings_late", {"seconds": round(rng.uniform(0.2, 1.5), 2)})]
    return []
