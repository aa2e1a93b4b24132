"""Workload: a POP consumer over remoting with a handler, against ``SimCluster``.

Phase one runs the consumer under the schedule (error answers, delays, undecodable
and compressed records, handler faults, a close at a random point); phase two, if
anything is left unsettled, runs a second member of the group with no faults of its own
until everything is acked or dead-lettered, so that "none lost" is checked against the
brokers' truth, not the first consumer's view.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial
from typing import TYPE_CHECKING, Any

import anyio

from aiorocket.consumer import Consumer
from aiorocket.testing.sim._client import (
    SimHandler,
    cancelled_from_outside,
    held_by_renewer,
    record_after_close,
    record_error,
)
from aiorocket.testing.sim.features import pauser, rate_kwargs, topic_rate_kwargs
from aiorocket.testing.sim.remoting import GROUP, TOPIC, SimCluster
from aiorocket.testing.sim.silence import pop_half_open_info, run_half_open

if TYPE_CHECKING:
    from aiorocket.testing.sim.history import History
    from aiorocket.testing.sim.nemesis import Schedule

__all__ = ["pop_remoting"]

#: the consumer's settings in a run (virtual seconds)
SETTINGS: dict[str, Any] = {
    "consume_mode": "pop", "long_poll_timeout": 5.0, "request_timeout": 3.0,
    "invisible_duration": 10.0, "consume_timeout": 20.0, "shutdown_timeout": 5.0,
    "max_reconsume_times": 3,
}  # fmt: skip
#: the bounds (virtual seconds) to a request on a new connection after a silence, in
#: the ``half_open`` events (``silence.pop_half_open_info``)
HALF_OPEN_INFO = pop_half_open_info(SETTINGS)
#: how long (virtual seconds) the first phase may run
PHASE = 150.0
#: ...and the second: it ends as soon as the brokers have everything settled, so only a
#: run that needs it spends it. An orderly run with a low max_rate, tens of POLLING_FULL
#: answers (each followed by the receive's pause) and retry delays of 31 s did not fit
#: in 150 s (seed 1180): the workload's time, not a loss.
SECOND_PHASE = 300.0


def _store(cluster: SimCluster, schedule: Schedule) -> None:
    undecodable = {f.args["message"] for f in schedule.of("undecodable_record")}
    compressed = {f.args["message"]: f.args["codec"] for f in schedule.of("compressed")}
    for i in range(schedule.params["messages"]):
        broker = cluster.brokers[i % len(cluster.brokers)]
        broker.store(f"m-{i}", i % cluster.queues, undecodable=i in undecodable,
                     compressed=compressed.get(i))  # fmt: skip


async def _phase(cluster: SimCluster, history: History, handler: Callable[[Any], Awaitable[None]],
                 close_at: float | None, name: str, bound: float = PHASE) -> None:  # fmt: skip
    orderly = bool(cluster.schedule.params.get("orderly"))
    # receive loops: one per (topic, broker), the retry topic's included, at least two
    rate = rate_kwargs(cluster.schedule, history, name, loops=max(2, 2 * len(cluster.brokers)))
    rate.update(topic_rate_kwargs(cluster.schedule, history, name, TOPIC, loops=1))
    consumer = Consumer(GROUP, cluster.namesrv.address, handler=handler, orderly=orderly,
                        **SETTINGS, **rate)  # fmt: skip
    consumer.subscribe(TOPIC)
    probed = False

    async def application() -> None:
        nonlocal probed
        try:
            async with consumer, anyio.create_task_group() as tg:
                if name == "first":
                    tg.start_soon(pauser, consumer, cluster.schedule, history, TOPIC, name)
                with anyio.move_on_after(close_at if close_at is not None else bound):
                    while not cluster.all_settled():  # noqa: ASYNC110  (the brokers' truth)
                        await anyio.sleep(0.25)
                    await anyio.sleep(1.0)  # room to let go of what was settled
                    history.add("held", "", where=name, **held_by_renewer(consumer))
                    probed = True
                tg.cancel_scope.cancel()
                history.add("close_start", "", consumer=name)
        except Exception as exc:
            record_error(history, exc, f"{name}: async with")

    await cancelled_from_outside(application, cluster.schedule, history, name)
    history.add("close_end", "", consumer=name, probed=probed)
    for b in cluster.brokers:
        b.revive()
    inflight = [(m.key, m.visible_at) for b in cluster.brokers for m in b.messages
                if m.state == "inflight"]  # fmt: skip
    await record_after_close(history, name, inflight)


async def pop_remoting(
    schedule: Schedule, history: History, handler: Callable[[Any], Awaitable[None]] | None = None
) -> None:
    params = schedule.params
    closes = [f.args["seconds"] for f in schedule.of("close_at")]
    async with SimCluster(schedule, history, brokers=params["brokers"],
                          queues=params["queues"]) as cluster:  # fmt: skip
        _store(cluster, schedule)
        sim_handler = SimHandler(schedule, history, handler)
        async with anyio.create_task_group() as tg:
            silences = {b.name: b.silence for b in cluster.brokers}
            tg.start_soon(partial(run_half_open, schedule, silences, **HALF_OPEN_INFO))
            await _phase(cluster, history, sim_handler, closes[0] if closes else None, "first")
            if not cluster.all_settled():
                # the second member must not inherit phase one's spent close
                await _phase(cluster, history, sim_handler, None, "second", SECOND_PHASE)
            tg.cancel_scope.cancel()
        for b in cluster.brokers:
            b.revive()
        history.add("end")
