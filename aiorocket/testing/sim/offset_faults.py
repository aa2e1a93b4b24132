"""The nemesis's faults of the consumer offsets' own requests on ``pull_remoting``:
UPDATE_CONSUMER_OFFSET (``commit_fault``) and QUERY_CONSUMER_OFFSET (``query_fault``)
of one broker failing for a window of the run.

A commit fails three ways: an error code answered (``SYSTEM_BUSY``: a 5.x broker's
remoting server rejects a request its executor's queue has no room for;
``SYSTEM_ERROR``: the processor failed), nothing stored; ``timeout``: neither stored
nor answered (the request lost, or the broker stuck past the client's request
timeout); ``lost_answer``: stored, its answer lost (the client cannot tell it from a
timeout). A query fails with an error code or a timeout. What the contract promises
then (the checker's ``duplicates_within_window`` and ``none_lost``): at-least-once; a
commit that did not reach the broker bounds nothing, so the messages it covered may be
handled again (docs/reliability.md, the in-flight window), and the orderly handover's
"the next owner starts after the last message handled here" holds only for a commit
that was stored (docs/consumer.md: a revoke whose commit keeps failing is unlocked
uncommitted, ``orderly_handover_uncommitted``).

Drawn from a stream of their own (``{workload}:{seed}:offsets``), after every other
draw, so a seed's other faults are the ones it drew before. Not on broadcasting runs
(the member keeps its offsets in a file).
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Any

import anyio

from aiorocket.testing.sim.nemesis import SYSTEM_BUSY, SYSTEM_ERROR, Fault

if TYPE_CHECKING:
    from aiorocket.testing.sim.nemesis import Schedule

__all__ = ["draw_offset_faults", "offset_fault"]

#: how a commit fails: an error code answered (nothing stored), or no answer
COMMIT_HOWS: list[int | str] = [SYSTEM_BUSY, SYSTEM_ERROR, "timeout", "lost_answer"]
QUERY_HOWS: list[int | str] = [SYSTEM_ERROR, "timeout"]


def _window(rng: random.Random, broker: str, joins: list[float],
            how: int | str) -> dict[str, Any]:  # fmt: skip
    # with members joining, half the windows open at a join: the revokes' commits (an
    # orderly revoke's retries) and the new owners' queries come right after it
    at = rng.choice(joins) if joins and rng.random() < 0.5 else rng.uniform(0.0, 40.0)
    # 40 s outlasts an orderly revoke's retries (lock_max_live_time, 30 s)
    seconds = rng.choice([0.5, 3.0, 10.0, 40.0])
    return {"broker": broker, "at": round(at, 2), "seconds": seconds, "how": how}


def draw_offset_faults(seed: int, workload: str, params: dict[str, Any],
                       faults: list[Fault]) -> list[Fault]:  # fmt: skip
    """The offset requests' faults of run ``seed`` (``faults``: the run's others)."""
    if workload != "pull_remoting" or params["shape"] == "broadcast":
        return []
    rng = random.Random(f"{workload}:{seed}:offsets")
    brokers = ["sim-broker-a", "sim-broker-b"][: params["brokers"]]
    joins = [f.args["at"] for f in faults if f.kind == "member_join"]
    out: list[Fault] = []
    if rng.random() < 0.5:
        for _ in range(rng.randint(1, 2)):
            args = _window(rng, rng.choice(brokers), joins, rng.choice(COMMIT_HOWS))
            out.append(Fault("commit_fault", args))
    if rng.random() < 0.3:
        args = _window(rng, rng.choice(brokers), joins, rng.choice(QUERY_HOWS))
        out.append(Fault("query_fault", args))
    return out


def offset_fault(schedule: Schedule, kind: str, broker: str) -> int | str | None:
    """How ``broker`` fails a request of ``kind`` (``commit_fault``, ``query_fault``)
    now: an error code, ``timeout``, ``lost_answer``; None when it does not."""
    now = anyio.current_time()
    for f in schedule.of(kind):
        if f.args["broker"] == broker and f.args["at"] <= now < f.args["at"] + f.args["seconds"]:
            how: int | str = f.args["how"]
            return how
    return None
