"""Workload: request-reply over remoting (issue 44) against ``SimReplyCluster``.

A requester (``Producer.request``) sends ``requests`` requests from ``workers``
concurrent tasks, each with a timeout of its own; a replier (the run's consumer: the
broker hands it each stored request decoded from its record, as a pull would) answers
each with ``Producer.reply`` (``reply:<key>``), after a drawn handler time. The
nemesis refuses requests' first attempts, loses, delays or doubles the broker's reply
push, pushes a stray reply, and cancels requests from outside.

The draw is the workload's own stream (``random.Random(f"request_reply:{seed}")``), so
no other workload's schedule changed when it came. What the checker reads
(``checker_reply``): ``request_start`` / ``request_ok`` (the reply's body and
correlation id) / ``request_failed`` / ``request_cancelled``, ``waiters_left``.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import anyio

from aiorocket.errors import RequestTimeoutError, RocketMQError
from aiorocket.message import Message
from aiorocket.producer import Producer
from aiorocket.testing.sim._client import client_tasks, record_error
from aiorocket.testing.sim.compat import PROPERTY_CORRELATION_ID
from aiorocket.testing.sim.nemesis import SYSTEM_BUSY, SYSTEM_ERROR, Fault
from aiorocket.testing.sim.remoting import TOPIC
from aiorocket.testing.sim.reply_broker import SimReplyCluster

if TYPE_CHECKING:
    from aiorocket.testing.sim.history import History
    from aiorocket.testing.sim.nemesis import Schedule

__all__ = ["HUNG", "draw_request_reply", "request_reply"]

#: virtual seconds past its timeout a request is deemed hung (the harness stops it)
HUNG = 30.0


def draw_request_reply(rng: random.Random) -> tuple[dict[str, Any], list[Fault]]:
    requests = rng.randint(3, 12)
    params: dict[str, Any] = {
        "requests": requests, "workers": rng.randint(1, 4), "brokers": rng.randint(1, 2),
        "retries": rng.choice([0, 1, 2]),
        "timeouts": [rng.choice([1.0, 3.0, 6.0]) for _ in range(requests)],
    }  # fmt: skip
    faults: list[Fault] = []

    def some(kind: str, most: int, **args: Any) -> None:
        for i in rng.sample(range(requests), k=rng.randint(0, min(most, requests))):
            drawn = {k: rng.choice(v) for k, v in args.items()}
            faults.append(Fault(kind, {"request": i, **drawn}))

    some("request_error", 2, code=[SYSTEM_BUSY, SYSTEM_ERROR], count=[1, 2])
    some("reply_lost", 2)
    some("reply_delay", 3, seconds=[0.2, 0.9, 2.5, 8.0])
    some("reply_twice", 2)
    some("handler_slow", 2, seconds=[0.5, 2.0, 7.0])
    some("request_cancel", 2, after=[0.0, 0.0, 0.1, 0.5, 2.0])
    if rng.random() < 0.4:
        faults.append(Fault("stray_reply", {"at": round(rng.uniform(0.0, 5.0), 2)}))
    return params, faults


async def _replier(cluster: SimReplyCluster, schedule: Schedule, history: History) -> None:
    slow = {f.args["request"]: f.args["seconds"] for f in schedule.of("handler_slow")}

    async def handle(producer: Producer, msg: Any) -> None:
        key = bytes(msg.body).decode(errors="replace")
        await anyio.sleep(float(slow.get(int(key.rsplit("-", 1)[1]), 0.0)))
        try:
            await producer.reply(msg, f"reply:{key}".encode())
        except RocketMQError as exc:  # the requester gone: the broker cannot push
            history.add("reply_failed", key, error=repr(exc)[:200])
        else:
            history.add("replied", key)

    async with Producer("sim-repliers", cluster.namesrv.address) as producer, \
            anyio.create_task_group() as tg:  # fmt: skip
        async for msg in cluster.from_brokers:
            tg.start_soon(handle, producer, msg)


async def request_reply(
    schedule: Schedule, history: History, handler: Callable[[Any], Awaitable[None]] | None = None
) -> None:
    p = schedule.params
    cancels = {f.args["request"]: f.args["after"] for f in schedule.of("request_cancel")}
    async with SimReplyCluster(schedule, history, brokers=p["brokers"], queues=2) as cluster:
        producer = Producer("sim-requesters", cluster.namesrv.address, retries=p["retries"])
        pending = list(range(p["requests"]))

        async def one(i: int) -> None:
            key, timeout = f"q-{i}", p["timeouts"][i]
            started = history.now()
            history.add("request_start", key, timeout=timeout)
            with anyio.move_on_after(timeout + HUNG) as guard, \
                    anyio.move_on_after(cancels.get(i, float("inf"))) as app:  # fmt: skip
                try:
                    reply = await producer.request(Message(TOPIC, key.encode(), keys=[key]),
                                                   timeout=timeout)  # fmt: skip
                except Exception as exc:
                    history.add("request_failed", key, error=repr(exc)[:200],
                                typed=isinstance(exc, RocketMQError), timeout=timeout,
                                elapsed=history.now() - started,
                                timed_out=isinstance(exc, RequestTimeoutError))  # fmt: skip
                    record_error(history, exc, f"request {key}")
                    return
                history.add("request_ok", key, body=bytes(reply.body).decode(errors="replace"),
                            correlation=reply.properties.get(PROPERTY_CORRELATION_ID, ""),
                            elapsed=history.now() - started, timeout=timeout)  # fmt: skip
            if app.cancelled_caught:
                history.add("request_cancelled", key, elapsed=history.now() - started)
            elif guard.cancelled_caught:
                history.add("request_hung", key, timeout=timeout)

        async def worker() -> None:
            while pending:
                await one(pending.pop(0))

        async def stray(at: float) -> None:
            await anyio.sleep(at)
            for b in cluster.brokers:
                for client in list(b.clients):
                    await b.push_stray(client)

        try:
            async with anyio.create_task_group() as outer:
                outer.start_soon(_replier, cluster, schedule, history)
                async with producer:
                    async with anyio.create_task_group() as tg:
                        for f in schedule.of("stray_reply"):
                            tg.start_soon(stray, f.args["at"])
                        for _ in range(p["workers"]):
                            tg.start_soon(worker)
                    replies = producer.replies
                    assert replies is not None  # started
                    history.add("waiters_left", "", count=replies.waiting, where="all returned",
                                dropped=replies.dropped)  # fmt: skip
                    history.add("close_start", "")
                history.add("waiters_left", "", count=replies.waiting, where="after close")
                outer.cancel_scope.cancel()
        except Exception as exc:
            record_error(history, exc, "request-reply")
        history.add("close_end", "")
        await anyio.sleep(1.0)
        left = client_tasks()
        if left:
            history.add("tasks_left", "", count=len(left), names=sorted(set(left))[:5])
        history.add("end")
