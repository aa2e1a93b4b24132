"""Workload: the remoting producer against slow (not dead) brokers: plain sends with
few or no retries, and transactions' half messages, while the stall detection is on.

The truth is the brokers' (``send_stored``); the checker holds it against what each
send reported (``send_ok`` / ``send_failed``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import anyio

from aiorocket.message import Message
from aiorocket.producer import Producer, TransactionState
from aiorocket.testing.sim.remoting import TOPIC, SimCluster

if TYPE_CHECKING:
    from aiorocket.testing.sim.history import History
    from aiorocket.testing.sim.nemesis import Schedule

__all__ = ["producer_stall"]

#: the producer's send timeout (virtual seconds); slow answers stay well within it
TIMEOUT = 5.0


async def _commit(msg: Any, result: Any) -> TransactionState:
    return TransactionState.COMMIT


async def producer_stall(
    schedule: Schedule, history: History, handler: Callable[[Any], Awaitable[None]] | None = None
) -> None:
    params = schedule.params
    async with SimCluster(schedule, history, brokers=2, queues=2) as cluster:
        producer = Producer("sim-producers", cluster.namesrv.address,
                            retries=params["retries"], send_timeout=TIMEOUT)  # fmt: skip
        async with producer:
            for i in range(params["warm"]):  # latencies known on both brokers
                await producer.send(Message(TOPIC, f"warm-{i}".encode()))
            for i in range(params["messages"]):
                key = f"s-{i}"
                half = i in params["halves"]
                started = anyio.current_time()
                try:
                    if half:
                        await producer.send_in_transaction(Message(TOPIC, key.encode()), _commit)
                    else:
                        await producer.send(Message(TOPIC, key.encode()))
                except Exception as exc:  # the checker judges it
                    elapsed = anyio.current_time() - started
                    history.add("send_failed", key, error=repr(exc)[:200], half=half,
                                elapsed=elapsed, timeout=TIMEOUT)  # fmt: skip
                else:
                    history.add("send_ok", key, half=half)
        history.add("end")
