"""Workload: the remoting pull consumer (``Consumer``, clustering) against
``SimPullCluster``, in one of its shapes (``params["shape"]``): a handler run
concurrently, orderly with queue locks, a batch handler, or ``async for``.

Messages are stored over the run; the first member runs until every message is
consumed (the brokers' committed offsets cover every queue, the retry topic included),
other members join and leave at drawn times. The faults: pull answers with errors,
connections reset, a broker crashed and restarted (losing the consumer offsets it had
not written yet), members joining and leaving, handler faults. The checker bounds
duplicates by what the group committed (``duplicates_within_window``).
"""

from __future__ import annotations

import tempfile
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import anyio

from aiorocket.consumer import ConsumeFromWhere, Consumer, MessageModel, PullConsumer
from aiorocket.results import Reconsume
from aiorocket.testing.sim._client import (
    SimHandler,
    cancelled_from_outside,
    client_tasks,
    record_error,
)
from aiorocket.testing.sim.dedup_sim import dedup_kwargs
from aiorocket.testing.sim.features import pauser, rate_kwargs, topic_rate_kwargs
from aiorocket.testing.sim.pull import PULL_GROUP, PULL_TOPIC, SimPullCluster

if TYPE_CHECKING:
    from aiorocket.testing.sim.history import History
    from aiorocket.testing.sim.nemesis import Schedule

__all__ = ["pull_remoting"]

SETTINGS: dict[str, Any] = {
    "long_poll_timeout": 5.0, "pull_request_timeout": 10.0, "persist_offset_interval": 1.0,
    "rebalance_interval": 5.0, "route_refresh_interval": 5.0, "heartbeat_interval": 5.0,
    "request_timeout": 3.0, "shutdown_timeout": 5.0, "consume_timeout": 20.0,
    "pull_backoff_on_error": 1.0, "local_retry_delay": 2.0, "max_reconsume_times": 3,
    "consume_from_where": ConsumeFromWhere.FIRST_OFFSET, "lock_renew_interval": 5.0,
    "suspend_current_queue_time": 1.0,
}  # fmt: skip
#: how long (virtual seconds) the run may take, before the drawn waits (``_run_bound``)
RUN = 200.0


def _run_bound(schedule: Schedule) -> float:
    """RUN plus the waits the schedule itself asks for, which RUN (older than their
    draws) did not count: each ``handler_retry``'s delay, once per attempt (an orderly
    queue retries in place, the messages behind it waiting: docs/consumer.md), and each
    offset fault's window (a queue whose broker lost its offset is not pulled until the
    offset is stored again: ``committer.verify_offset``). Seed 60033 drew two messages
    retried twice at 31 s in an orderly queue and a 40 s commit fault after a crash: its
    client was on its last message at 200 s, the message still uncommitted in the
    group's queue, not lost."""
    waits = sum(f.args["delay"] * f.args["attempts"] for f in schedule.of("handler_retry"))
    waits += sum(f.args["seconds"] for f in schedule.of("commit_fault"))
    waits += sum(f.args["seconds"] for f in schedule.of("query_fault"))
    return RUN + float(waits)

Handler = Callable[[Any], Awaitable[None]]
Handlers = Callable[[str], SimHandler]


def _consumer(cluster: SimPullCluster, shape: str, handler: SimHandler, name: str,
              offsets_dir: str) -> Consumer:  # fmt: skip
    kw: dict[str, Any] = dict(SETTINGS)
    kw.update(rate_kwargs(cluster.schedule, handler.history, name,
                          loops=len(cluster.brokers) * (cluster.queues + 1)))  # fmt: skip
    kw.update(topic_rate_kwargs(cluster.schedule, handler.history, name, PULL_TOPIC,
                                loops=len(cluster.brokers) * cluster.queues))  # fmt: skip
    if shape == "batch":
        async def batch(msgs: list[Any]) -> None:
            for m in msgs:
                await handler(m)

        kw.update(batch_handler=batch, consume_batch_size=4)
    elif shape == "broadcast":
        # offsets of its own, in a file (a fresh directory per member)
        kw.update(handler=handler, message_model=MessageModel.BROADCASTING,
                  offset_store_dir=offsets_dir)  # fmt: skip
    elif shape != "async_for":
        kw.update(handler=handler, orderly=shape == "orderly")
        kw.update(dedup_kwargs(cluster, cluster.schedule, handler.history))
    consumer = Consumer(PULL_GROUP, cluster.namesrv.address, client_id=f"sim-{name}", **kw)
    consumer.subscribe(PULL_TOPIC)
    return consumer


async def _iterate(consumer: Consumer, handler: SimHandler, history: History,
                   break_at: int | None) -> None:  # fmt: skip
    """``async for``; if drawn, ``break`` at the ``break_at``-th message received (that
    one in hand, unsettled: the iterator must release it and what it prefetched), then
    iterate again."""
    received = 0
    while True:
        async for msg in consumer:
            if received == break_at:
                received += 1
                history.add("iter_break", bytes(msg.body).decode(errors="replace"))
                break
            received += 1
            try:
                result = await handler(msg)
            except Exception:
                await msg.nack()
            else:
                if isinstance(result, Reconsume):  # the handler asked for a retry delay
                    await msg.nack(delay=result.delay)
        else:
            return


async def _get(consumer: PullConsumer, handler: SimHandler, history: History) -> None:
    """A PullConsumer's application: ``getmany``, each message handled until it
    succeeds (its failures are the application's), then ``commit`` (auto_commit off),
    again a second later while it fails."""
    dirty = False
    while True:
        batch = await consumer.getmany(timeout=1.0)
        for msgs in batch.values():
            for msg in msgs:
                for _attempt in range(4):
                    try:
                        await handler(msg)
                        break
                    except Exception:
                        msg.reconsume_times += 1  # the handler's attempt count
        dirty = dirty or bool(batch)
        if dirty:
            try:
                await consumer.commit()
            except Exception as exc:  # a broker out of reach, a queue moved: typed
                record_error(history, exc, "commit")
            else:
                dirty = False


async def _member(cluster: SimPullCluster, history: History, shape: str, handlers: Handlers,
                  name: str, until: Callable[[], Awaitable[None]]) -> None:  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="aiorocket-sim-") as offsets_dir:
        await _run_member(cluster, history, shape, handlers(name), name, until, offsets_dir)


async def _run_member(cluster: SimPullCluster, history: History, shape: str,
                      handler: SimHandler, name: str, until: Callable[[], Awaitable[None]],
                      offsets_dir: str) -> None:  # fmt: skip
    consumer: Consumer | PullConsumer
    if shape == "pull_consumer":
        consumer = PullConsumer(PULL_GROUP, cluster.namesrv.address, client_id=f"sim-{name}",
                                auto_commit=False, **SETTINGS)  # fmt: skip
        consumer.subscribe(PULL_TOPIC)
    else:
        consumer = _consumer(cluster, shape, handler, name, offsets_dir)
    started = finished = False

    async def application() -> None:
        nonlocal started, finished
        try:
            async with consumer:
                started = True
                async with anyio.create_task_group() as tg:
                    if isinstance(consumer, PullConsumer):
                        tg.start_soon(_get, consumer, handler, history)
                    elif shape == "async_for":
                        breaks = [f.args["at"] for f in cluster.schedule.of("iter_break")]
                        at = breaks[0] if breaks and name == "first" else None
                        tg.start_soon(_iterate, consumer, handler, history, at)
                    if name == "first" and not isinstance(consumer, PullConsumer):
                        tg.start_soon(pauser, consumer, cluster.schedule, history, PULL_TOPIC,
                                      name)  # fmt: skip
                    await until()
                    tg.cancel_scope.cancel()
                finished = True
                history.add("close_start", "", consumer=name)
        except Exception as exc:
            record_error(history, exc, f"{name}: {'async with' if started else 'start'}")

    cancelled = await cancelled_from_outside(application, cluster.schedule, history, name)
    if started and not finished and not cancelled:
        history.add("app_interrupted", "", consumer=name)
    history.add("close_end", "", consumer=name)
    if started:
        _record_left_behind(cluster, history, name)


def _record_left_behind(cluster: SimPullCluster, history: History, name: str) -> None:
    """After member ``name``'s close (cancelled from outside or not): what a broker
    still keeps of it (``left_behind``): a member that did not unregister is still
    handed queues by the others' rebalances, a lock it did not release keeps its queues
    from the next owner until the lock expires."""
    client = f"sim-{name}"
    since = max((e.at for e in history.of("close_start") if e.info.get("consumer") == name),
                default=anyio.current_time())  # fmt: skip
    for broker in cluster.brokers:
        kept = broker.remembers(client, since)
        if kept:
            history.add("left_behind", "", broker=broker.name, consumer=name, kept=kept)


async def _all_consumed(cluster: SimPullCluster, history: History, schedule: Schedule) -> None:
    total = schedule.params["messages"]
    if schedule.params["shape"] == "broadcast":
        await _all_handled(history, total)
        return
    while len(history.of("stored")) < total or not cluster.settled():  # noqa: ASYNC110
        await anyio.sleep(0.25)
    await anyio.sleep(1.0)


async def _all_handled(history: History, total: int) -> None:
    """Broadcasting (one member here): the group commits nothing to the brokers, its
    member keeps its offsets; a message is consumed once its handler succeeded."""
    while len(history.keys("handler_ok")) < total:  # noqa: ASYNC110
        await anyio.sleep(0.25)
    for key in sorted(history.keys("handler_ok")):
        history.add("acked", key, by="broadcast member")


async def _store(cluster: SimPullCluster, schedule: Schedule) -> None:
    for i, at in enumerate(schedule.params["store_at"]):
        await anyio.sleep(max(0.0, at - anyio.current_time()))
        cluster.store(f"p-{i}", i)


async def _joiner(cluster: SimPullCluster, history: History, shape: str, handlers: Handlers,
                  args: dict[str, Any], n: int) -> None:  # fmt: skip
    await anyio.sleep(args["at"])

    async def until() -> None:
        await anyio.sleep(args["stay"])

    await _member(cluster, history, shape, handlers, f"joiner-{n}", until)


async def pull_remoting(
    schedule: Schedule, history: History, handler: Handler | None = None
) -> None:
    params = schedule.params
    shape = params["shape"]
    nb, nq = params["brokers"], params["queues"]

    def group_of(key: str) -> tuple[str, int] | None:
        """Orderly: a queue's messages in their order (the index says where it went)."""
        if shape != "orderly":
            return None
        index = int(key.rsplit("-", 1)[1])
        return f"{index % nb}:{(index // nb) % nq}", index // (nb * nq)

    async with SimPullCluster(schedule, history, brokers=nb, queues=nq) as cluster:
        def handlers(member: str) -> SimHandler:
            """The application's handler in one member (its events say whose)."""
            return SimHandler(schedule, history, handler, group_of=group_of,
                              extra={"member": member, "by_offset": True},
                              levels=shape != "orderly")  # fmt: skip

        with anyio.move_on_after(_run_bound(schedule)):
            async with anyio.create_task_group() as tg:
                tg.start_soon(_store, cluster, schedule)
                tg.start_soon(cluster.run_nemesis)
                for n, f in enumerate(schedule.of("member_join")):
                    tg.start_soon(_joiner, cluster, history, shape, handlers, f.args, n)

                async def until() -> None:
                    await _all_consumed(cluster, history, schedule)

                await _member(cluster, history, shape, handlers, "first", until)
                if history.of("app_cancelled"):  # the rest is another member's
                    await _member(cluster, history, shape, handlers, "second", until)
                tg.cancel_scope.cancel()
        await anyio.sleep(0.5)
        left = client_tasks()
        if left:
            history.add("tasks_left", "", count=len(left), names=sorted(set(left))[:5])
        history.add("end")
    if cluster.errors:
        raise RuntimeError("the simulated broker failed:\n" + cluster.errors[0])
