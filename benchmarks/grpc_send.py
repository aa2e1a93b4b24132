"""The single-message gRPC send path alone (issue 43, goal 5): IN_FLIGHT tasks each
awaiting ``send`` in a loop, one message per request (``auto_batch=False``), as
compare.py's "produce msg/s" row for aiorocket over gRPC, in one process, with the
figures that do not depend on the machine's load beside the ones that do.

    PYTHONPATH=. .venv/bin/python benchmarks/grpc_send.py [--count 20000] [--in-flight 64]
        [--size 1024] [--handles]

Prints msg/s, CPU µs per send (user + system, ``os.times``) and, with ``--handles``,
event-loop callbacks and selector polls per send (counted by wrapping asyncio's
``Handle._run``: that costs CPU of its own, so the CPU figure of that run is not the
plain one). Uses the running local cluster's Proxy; the topic lives on the Proxy's
own broker.
"""

from __future__ import annotations

import argparse
import asyncio
import asyncio.events
import os
import time
from collections.abc import Callable
from typing import Any

import anyio

from aiorocket import Message
from aiorocket.producer import Producer
from aiorocket.testing.broker import LocalRocketMQ


def count_handles(counts: dict[str, int]) -> Callable[[], None]:
    """Count the loop's callbacks and polls into ``counts``; returns the undo."""
    handle: Any = asyncio.events.Handle
    run = handle._run
    loop: Any = asyncio.get_running_loop()
    selector = loop._selector
    select = selector.select

    def counted_run(self: asyncio.Handle) -> None:
        counts["handles"] += 1
        run(self)

    def counted_select(timeout: float | None = None) -> Any:
        counts["polls"] += 1
        return select(timeout)

    handle._run, selector.select = counted_run, counted_select

    def undo() -> None:
        handle._run, selector.select = run, select

    return undo


async def run(
    rmq: LocalRocketMQ, count: int, size: int, in_flight: int, handles: bool, timeout: float
) -> None:
    stamp = int(time.time())
    topic = f"bench_grpc_send_{stamp}"
    await rmq.create_topic(topic, queues=8, brokers=[rmq.state["proxy_broker"]])
    body = os.urandom(size)
    # send_timeout: the first sends to a new topic wait for its settings sync, seconds on
    # a loaded machine; the default 3 s failed some there (old and new code alike)
    settings: dict[str, Any] = {"auto_batch": False, "max_in_flight": in_flight, "send_timeout": 30}
    settings["request_timeout"] = timeout
    async with Producer("bench-grpc-send", proxy=rmq.proxy_grpc, **settings) as producer:

        async def sends(n: int) -> None:
            for _ in range(n):
                await producer.send(Message(topic, body))

        async def all_sends(total: int) -> int:
            each = max(total // in_flight, 1)
            async with anyio.create_task_group() as tg:
                for _ in range(in_flight):
                    tg.start_soon(sends, each)
            return each * in_flight

        await all_sends(min(count, 2000))  # settings, route, connection, caches warm
        counts = {"handles": 0, "polls": 0}
        undo = count_handles(counts) if handles else None
        t0, wall = os.times(), time.perf_counter()
        n = await all_sends(count)
        wall, t1 = time.perf_counter() - wall, os.times()
        if undo is not None:
            undo()
    user, system = (t1.user - t0.user) / n * 1e6, (t1.system - t0.system) / n * 1e6
    line = (
        f"send     {n / wall:9.0f} msg/s   {user + system:7.1f} µs CPU/send"
        f" (user {user:.1f}, system {system:.1f})   {in_flight} in flight"
        f"   load {os.getloadavg()[0]:.1f}"
    )
    if handles:
        per = {k: v / n for k, v in counts.items()}
        line += f"   loop callbacks/send {per['handles']:.2f}, polls/send {per['polls']:.3f}"
    print(line)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=20000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--in-flight", type=int, default=64)
    ap.add_argument("--handles", action="store_true", help="count loop callbacks per send")
    ap.add_argument(
        "--request-timeout", type=float, default=3.0,
        help="the producer's request timeout (its start waits this long for the Proxy's "
        "settings: raise it under valgrind)",
    )  # fmt: skip
    args = ap.parse_args()
    rmq = LocalRocketMQ.attach()
    if rmq is None:
        raise SystemExit("no local cluster: python -m aiorocket.testing.broker start")
    anyio.run(run, rmq, args.count, args.size, args.in_flight, args.handles,
              args.request_timeout)  # fmt: skip


if __name__ == "__main__":
    main()
