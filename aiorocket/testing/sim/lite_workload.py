"""Workload: a lite consumer over remoting (``Consumer(bind_topic=...)`` with a handler)
against ``SimLiteCluster``, the application subscribing and unsubscribing lite topics
while it runs. (``grpc_lite`` runs the same application through ``SimLiteProxy``: both
answer ``LiteTruth``.)

The application's script (drawn by the nemesis): each lite topic subscribed before the
start or at a time of the run, some unsubscribed and subscribed again later; messages
stored on the lite topics over the run. A refused ``subscribe_lite`` is recorded (typed
or not) and tried again a second later, as an application would. The faults: error
answers and delays of LITE_SUBSCRIPTION_CTL (the resync every 30 s included), a broker
paused (its requests time out), ack errors, the other member of an exclusive group
taking lite topics (its notice at our add, or later), handler faults, ``close()`` at a
random point. Phase two (a second member, no faults of its own) takes what is left, so
"none lost" is judged by the brokers' truth.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

import anyio

from aiorocket.consumer import Consumer
from aiorocket.errors import RocketMQError
from aiorocket.testing.sim._client import (
    SimHandler,
    cancelled_from_outside,
    held_by_renewer,
    record_after_close,
)
from aiorocket.testing.sim.lite import SimLiteCluster
from aiorocket.testing.sim.silence import pop_reconnect_bound, run_half_open

if TYPE_CHECKING:
    from aiorocket.testing.sim.history import History
    from aiorocket.testing.sim.nemesis import Schedule

__all__ = ["LiteTruth", "lite_group_of", "lite_handler", "lite_phases", "lite_remoting"]

SETTINGS: dict[str, Any] = {
    "long_poll_timeout": 5.0, "request_timeout": 3.0, "invisible_duration": 10.0,
    "consume_timeout": 20.0, "shutdown_timeout": 5.0, "max_reconsume_times": 3,
}  # fmt: skip
#: the bound (virtual seconds) to a request on a new connection after a silence
RECONNECT = pop_reconnect_bound(SETTINGS)
#: how long (virtual seconds) each phase may run
PHASE = 150.0

Handler = Callable[[Any], Awaitable[None]]


class LiteTruth(Protocol):
    """The simulated servers of a lite workload (``SimLiteCluster``, ``SimLiteProxy``):
    what the application's script and the checks ask of them."""

    def consumer(self, handler: Any, client_id: str, settings: dict[str, Any]) -> Consumer: ...

    def store_lite(self, key: str, k: int, index: int) -> None: ...

    def unsettled(self) -> list[str]: ...

    def evicted_from(self, client: str) -> set[str]: ...

    def inflight(self) -> list[tuple[str, float]]: ...


def lite_key(topic: int, seq: int, index: int) -> str:
    """A message's key (its body): lite topic, place in it, index in the run."""
    return f"r{topic}.{seq}-{index}"


def lite_group_of(key: str) -> tuple[str, int] | None:
    """(lite topic, seq) of a key: the FIFO group the checker orders."""
    head = key.rsplit("-", 1)[0]
    topic, _, seq = head.partition(".")
    return (topic, int(seq)) if seq.isdigit() else None


def record_app_error(history: History, exc: BaseException, where: str) -> None:
    """An exception that reached the application: typed means one ``aiorocket.errors``
    error (an exception group of them is not what the docs promise)."""
    history.add("app_error", "", where=where, error=repr(exc)[:300],
                typed=isinstance(exc, RocketMQError))  # fmt: skip


async def _subscribe(consumer: Consumer, history: History, lite_topic: str,
                     wanted: set[str], *, add: bool = True) -> None:  # fmt: skip
    """``subscribe_lite`` (``add``) or ``unsubscribe_lite``, tried again a second later
    after an error (recorded), up to 5 times."""
    call = consumer.subscribe_lite if add else consumer.unsubscribe_lite
    for _attempt in range(5):
        try:
            await call(lite_topic)
        except Exception as exc:
            record_app_error(history, exc, f"{call.__name__}({lite_topic})")
            await anyio.sleep(1.0)
        else:
            (wanted.add if add else wanted.discard)(lite_topic)
            history.add("note", "", what=call.__name__, lite_topic=lite_topic)
            return


async def _script(consumer: Consumer, schedule: Schedule, history: History,
                  wanted: set[str]) -> None:  # fmt: skip
    """The application's subscription changes, in time order."""
    steps: list[tuple[float, str, str]] = []
    for k, plan in enumerate(schedule.params["lite_plan"]):
        name = f"r{k}"
        if plan["sub"] > 0:
            steps.append((plan["sub"], "sub", name))
        if plan.get("unsub"):
            steps.append((plan["unsub"], "unsub", name))
            steps.append((plan["resub"], "sub", name))
    for at, what, name in sorted(steps):
        await anyio.sleep(max(0.0, at - anyio.current_time()))
        await _subscribe(consumer, history, name, wanted, add=what == "sub")


async def _store(cluster: LiteTruth, schedule: Schedule) -> None:
    seqs: dict[int, int] = {}
    for i, (at, k) in enumerate(schedule.params["lite_messages"]):
        await anyio.sleep(max(0.0, at - anyio.current_time()))
        seq = seqs[k] = seqs.get(k, -1) + 1
        cluster.store_lite(lite_key(k, seq, i), k, i)


def _view(cluster: LiteTruth, consumer: Consumer, history: History, name: str) -> None:
    """The client's lite topics against the servers' truth: none the server gave away."""
    client = consumer.client_id
    kept = sorted(cluster.evicted_from(client) & consumer.lite_topics)
    if kept:
        history.add("lite_view", "", consumer=name, client=client, kept=kept)


async def _phase(cluster: LiteTruth, schedule: Schedule, history: History,
                 handler: Handler, close_at: float | None, name: str,
                 topics: set[str], settings: dict[str, Any], span: float) -> set[str]:  # fmt: skip
    """One member's run; a start that fails (a broker refused the first resync) is
    tried again a second later with a new consumer, as an application would."""
    first = name == "first"
    wanted: set[str] = set()
    for attempt in range(8):  # the faults refuse at most 6 updates in a row
        client = f"sim-{name}-{attempt}"
        consumer = cluster.consumer(handler, client, settings)
        for k, plan in enumerate(schedule.params["lite_plan"]):
            if (first and plan["sub"] == 0) or (not first and f"r{k}" in topics):
                await _subscribe(consumer, history, f"r{k}", wanted)
        started = await _member(cluster, schedule, history, consumer, client, close_at, name,
                                wanted, span)  # fmt: skip
        if started:
            break
        await anyio.sleep(1.0)
    await _after_close(cluster, history, name)
    return wanted | {f"r{k}" for k in range(len(schedule.params["lite_plan"]))}


async def _member(cluster: LiteTruth, schedule: Schedule, history: History,
                  consumer: Consumer, client: str, close_at: float | None, name: str,
                  wanted: set[str], span: float) -> bool:  # fmt: skip
    """Runs ``consumer`` (client id ``client``, named in its close's events) until
    everything is settled (or ``close_at``); whether it started. The first member's
    application may be cancelled from outside (``app_cancel``: ``cancelled_from_outside``)."""
    started = finished = probed = False

    async def application() -> None:
        nonlocal started, finished, probed
        try:
            async with consumer:
                started = True
                with anyio.move_on_after(close_at if close_at is not None else span):
                    if name == "first":
                        await _script(consumer, schedule, history, wanted)
                    # settled by the servers' truth, once everything was stored
                    while cluster.unsettled() or not _all_stored(history, schedule):  # noqa: ASYNC110
                        await anyio.sleep(0.25)
                    await anyio.sleep(1.0)
                    _view(cluster, consumer, history, name)
                    history.add("held", "", where=name, **held_by_renewer(consumer))
                    probed = True
                finished = True
                history.add("close_start", "", consumer=name, client=client)
        except Exception as exc:
            record_app_error(history, exc, f"{name}: {'async with' if started else 'start'}")

    cancelled = await cancelled_from_outside(application, schedule, history, name,
                                             client=client)  # fmt: skip
    if started and not finished and not cancelled:
        history.add("app_interrupted", "", consumer=name)
    if started:
        history.add("close_end", "", consumer=name, client=client, probed=probed)
    return started


async def _after_close(cluster: LiteTruth, history: History, name: str) -> None:
    await record_after_close(history, name, cluster.inflight())


def lite_handler(schedule: Schedule, history: History, handler: Handler | None) -> SimHandler:
    """The application's handler, ordering each lite topic's messages (but those the
    other member of an exclusive group took: two members consume them, no order)."""
    contested = {f.args["lite_topic"] for f in schedule.of("contested")}

    def group_of(key: str) -> tuple[str, int] | None:
        place = lite_group_of(key)
        return None if place is None or place[0] in contested else place

    def lane_of(key: str) -> str | None:
        place = lite_group_of(key)
        return None if place is None else place[0]

    return SimHandler(schedule, history, handler, group_of=group_of, lane_of=lane_of)


async def lite_phases(cluster: LiteTruth, schedule: Schedule, history: History,
                      handler: Handler, *, settings: dict[str, Any], span: float,
                      nemesis: list[Callable[[], Coroutine[Any, Any, None]]]) -> None:  # fmt: skip
    """The run: the producers and ``nemesis`` (they do not stop with a consumer), the
    first member (the application's script, its drawn close), then a second member
    if anything is left."""
    closes = [f.args["seconds"] for f in schedule.of("close_at")]
    async with anyio.create_task_group() as tg:
        tg.start_soon(_store, cluster, schedule)
        for task in nemesis:
            tg.start_soon(task)
        topics = await _phase(cluster, schedule, history, handler,
                              closes[0] if closes else None, "first", set(), settings,
                              span)  # fmt: skip
        if cluster.unsettled() or not _all_stored(history, schedule):
            await _phase(cluster, schedule, history, handler, None, "second", topics,
                         settings, span)  # fmt: skip
        tg.cancel_scope.cancel()


async def lite_remoting(
    schedule: Schedule, history: History, handler: Handler | None = None
) -> None:
    params = schedule.params
    async with SimLiteCluster(schedule, history, brokers=params["brokers"],
                              exclusive=params["exclusive"]) as cluster:  # fmt: skip
        silences = {b.name: b.silence for b in cluster.brokers}
        half_open = partial(run_half_open, schedule, silences, within=RECONNECT)
        await lite_phases(cluster, schedule, history, lite_handler(schedule, history, handler),
                          settings=SETTINGS, span=PHASE,
                          nemesis=[cluster.run_nemesis, half_open])  # fmt: skip
        for b in cluster.brokers:
            b.revive()
        cluster.record_pauses()
        history.add("end")
    if cluster.errors:
        raise RuntimeError("the simulated broker failed:\n" + cluster.errors[0])


def _all_stored(history: History, schedule: Schedule) -> bool:
    return len(history.of("stored")) >= len(schedule.params["lite_messages"])
