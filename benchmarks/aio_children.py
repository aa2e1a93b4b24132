"""aiorocket child processes of compare.py (the consumer child lives in consume.py).

    aio_children.py produce NAMESRV TOPIC COUNT SIZE IN_FLIGHT auto|auto-await|plain|grpc|grpc-auto
    aio_children.py paced   NAMESRV TOPIC COUNT SIZE RATE auto|plain       # fixed rate
    aio_children.py idle    NAMESRV GROUP SECONDS TOPIC...     # scale case: no traffic
    aio_children.py backlog NAMESRV TOPIC GROUP SECONDS DELAY  # slow handler on a backlog

``auto`` turns the producer's ``auto_batch`` on, ``plain`` leaves it off; ``grpc`` sends
one message per request through the Proxy at NAMESRV (a gRPC endpoint), ``grpc-auto``
with ``auto_batch`` (requests shared by concurrent sends). ``produce ... auto`` sends as
the Java children do (one loop, IN_FLIGHT messages in flight, a callback per result:
``start_send`` with ``on_result``); ``auto-await`` and the others run IN_FLIGHT tasks
each awaiting ``send`` in a loop.

Same line protocol as every child: READY, PROGRESS n, RESULT {json}.
"""

from __future__ import annotations

import os
import sys
import time
from collections import deque
from collections.abc import Awaitable, Callable
from functools import partial

import _common as c
import anyio
import anyio.abc
from produce import run_start_send, run_workers

from aiorocket.consumer import Consumer, ConsumerMessage
from aiorocket.consumer.config import ConsumeFromWhere
from aiorocket.errors import RocketMQError
from aiorocket.message import Message
from aiorocket.producer import Producer


async def produce(
    namesrv: str, topic: str, count: int, size: int, in_flight: int, auto_batch: bool,
    grpc: bool = False, callbacks: bool = False,
) -> None:  # fmt: skip
    """``in_flight`` tasks each awaiting ``send`` in a loop: that many messages in flight;
    ``callbacks``: one loop of ``start_send`` with ``in_flight`` slots instead (Java's
    ``send(msg, callback)`` with a semaphore of as many permits)."""
    body = os.urandom(size)
    settings = {"max_in_flight": in_flight, "auto_batch": auto_batch}
    if grpc:
        settings["transport"] = "grpc"

    async def run(producer: Producer, n: int) -> tuple[float, list[float]]:
        if callbacks:
            return await run_start_send(producer, topic, body, n)
        return await run_workers(producer, topic, body, n, in_flight)

    async with Producer("bench_aio_producer", namesrv, **settings) as producer:
        await run(producer, min(2000, count))  # warm-up
        c.emit("READY")
        cpu0 = time.process_time()
        elapsed, lat = await run(producer, count)
        cpu = time.process_time() - cpu0
    lat.sort()
    c.emit_result(
        {
            "count": len(lat),
            "elapsed": elapsed,
            "cpu": cpu,
            "send_p50_ms": c.percentile(lat, 50) * 1e3,
            "send_p99_ms": c.percentile(lat, 99) * 1e3,
            **batch_counts(producer),
        }
    )


def batch_counts(producer: Producer) -> dict[str, float]:
    b = producer.batcher
    if b is None:
        return {}
    return {"batches": b.batches, "mean_batch": b.batched_messages / max(b.batches, 1)}


#: a paced producer's send latency counts only sends started after this many seconds
WARM_SECONDS = 1.0


async def paced(
    namesrv: str,
    topic: str,
    count: int,
    size: int,
    rate: int,
    auto_batch: bool,
    senders: int = 512,
) -> None:
    """Send at ``rate`` with timed bodies, at most ``senders`` sends unanswered; the
    result has send latency percentiles.

    Auto-batched, as the Java harness's ``send(msg, callback)`` with a semaphore of
    ``senders`` permits: one loop of ``start_send`` with ``max_in_flight=senders`` and a
    callback per message, no task and no wake-up a message (the common producer of the
    e2e case: its CPU is taken from the cores the brokers and the consumer under test
    share; benchmarks/README.md, "Goal 4, round 9"). Plain (``auto_batch`` off), from
    ``senders`` long-lived tasks awaiting ``send``, each handed its message by a bare
    future (a task per message would cost anyio ~30 µs, a memory stream ~13 µs). When
    every send is unanswered, the pacing falls behind."""
    if auto_batch:
        await _paced_callbacks(namesrv, topic, count, size, rate, senders)
    else:
        await _paced_tasks(namesrv, topic, count, size, rate, senders)


async def _paced_callbacks(
    namesrv: str, topic: str, count: int, size: int, rate: int, senders: int
) -> None:
    import asyncio

    payload = os.urandom(size)
    lat: list[float] = []
    answered = 0
    clock = time.perf_counter
    loop = asyncio.get_running_loop()
    # Stamped when due and queued here while every slot is taken (as the tasks' harness
    # queued them for a free sender): a producer that falls behind shows in send ->
    # stored, not in a pacing that waits (which would stamp them late)
    backlog: deque[Message | None] = deque()
    waiting: list[asyncio.Future[None]] = []  # the sender's, while the backlog is empty
    async with Producer(
        "bench_aio_paced", namesrv, auto_batch=True, max_in_flight=senders
    ) as producer:

        def timed(start: list[float], _: object) -> None:
            nonlocal answered
            answered += 1
            if start[0] >= warm:
                lat.append(clock() - start[0])

        async def sender(tg: anyio.abc.TaskGroup) -> None:
            while True:
                while backlog:  # one wake-up a pacing step, not a message
                    msg = backlog.popleft()
                    if msg is None:
                        return
                    # The send's start stamped once its slot is taken, as the Java
                    # harness stamps after its semaphore's acquire (the send case's p99
                    # is a send's, not a wait for a slot); a callback run before it
                    # (a failure at once) is not a latency sample.
                    start = [0.0]
                    await producer.start_send(tg, msg, on_result=partial(timed, start))
                    start[0] = clock()
                waiter = loop.create_future()
                waiting.append(waiter)
                await waiter

        def wake() -> None:
            if waiting:
                waiting.pop().set_result(None)

        c.emit("READY")
        cpu0, t0 = time.process_time(), clock()
        warm = t0 + WARM_SECONDS
        sent = 0
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(sender, tg)
                while sent < count:
                    due = min(count, int((clock() - t0) * rate) + 1)
                    while sent < due:
                        backlog.append(Message(topic, c.stamped(payload)))
                        sent += 1
                    wake()
                    await anyio.sleep(0.0005)
                backlog.append(None)
                wake()
        except Exception as exc:  # a failed send ends the group: the rest count as failed
            if not all(isinstance(e, RocketMQError) for e in _leaves(exc)):
                raise
        elapsed = clock() - t0
        cpu = time.process_time() - cpu0
    _paced_result(producer, count, elapsed, cpu, count - answered, lat, senders)


def _leaves(exc: BaseException) -> list[BaseException]:
    """The exceptions in ``exc``, an exception group's nested ones flattened."""
    inner = getattr(exc, "exceptions", None)
    if inner is None:
        return [exc]
    return [leaf for e in inner for leaf in _leaves(e)]


async def _paced_tasks(
    namesrv: str, topic: str, count: int, size: int, rate: int, senders: int
) -> None:
    import asyncio

    payload = os.urandom(size)
    failed = 0
    loop = asyncio.get_running_loop()
    idle: deque[asyncio.Future[Message | None]] = deque()
    backlog: deque[Message] = deque()
    lat: list[float] = []
    async with Producer("bench_aio_paced", namesrv, auto_batch=False) as producer:

        async def sender() -> None:
            nonlocal failed
            while True:
                if backlog:
                    msg: Message | None = backlog.popleft()
                else:
                    waiter = loop.create_future()
                    idle.append(waiter)
                    msg = await waiter
                if msg is None:
                    return
                start = time.perf_counter()
                try:
                    await producer.send(msg)
                except RocketMQError:
                    failed += 1
                else:
                    if start - t0 >= WARM_SECONDS:
                        lat.append(time.perf_counter() - start)

        def submit(msg: Message | None) -> None:
            if idle:
                idle.popleft().set_result(msg)
            else:
                backlog.append(msg)

        c.emit("READY")
        cpu0, t0 = time.process_time(), time.perf_counter()
        sent = 0
        async with anyio.create_task_group() as tg:
            for _ in range(senders):
                tg.start_soon(sender)
            while sent < count:
                due = min(count, int((time.perf_counter() - t0) * rate) + 1)
                while sent < due:
                    submit(Message(topic, c.stamped(payload)))
                    sent += 1
                await anyio.sleep(0.0005)
            for _ in range(senders):
                submit(None)
        elapsed = time.perf_counter() - t0
        cpu = time.process_time() - cpu0
    _paced_result(producer, count, elapsed, cpu, failed, lat, senders)


def _paced_result(
    producer: Producer, count: int, elapsed: float, cpu: float, failed: int,
    lat: list[float], senders: int,
) -> None:  # fmt: skip
    lat.sort()
    c.emit_result(
        {
            "count": count,
            "elapsed": elapsed,
            "cpu": cpu,
            "failed": failed,
            "send_p50_ms": c.percentile(lat, 50) * 1e3,
            "send_p99_ms": c.percentile(lat, 99) * 1e3,
            "senders": senders,
            **batch_counts(producer),
        }
    )


async def idle(namesrv: str, group: str, seconds: float, topics: list[str]) -> None:
    """Subscribe to every topic, let start-up settle, then measure CPU and RSS at rest."""
    rss_before = c.rss_mb()

    async def nop(msg: ConsumerMessage) -> None:
        return None

    consumer = Consumer(group, namesrv, handler=nop)
    for t in topics:
        consumer.subscribe(t)
    t_start = time.perf_counter()
    async with consumer:
        started = time.perf_counter() - t_start
        queues = len(consumer.assignment())
        c.emit("READY")
        await anyio.sleep(min(10.0, seconds / 3))  # settle: first long polls under way
        rss_settled = c.rss_mb()
        cpu0, t0 = time.process_time(), time.perf_counter()
        peak = rss_settled
        while time.perf_counter() - t0 < seconds:
            await anyio.sleep(1.0)
            peak = max(peak, c.rss_mb())
            c.emit(f"PROGRESS {int(time.perf_counter() - t0)}")
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - t0
        rss_end = c.rss_mb()
    c.emit_result(
        {
            "queues": queues,
            "start_seconds": started,
            "seconds": wall,
            "cpu": cpu,
            "cpu_percent": 100 * cpu / wall,
            "rss_before_mb": rss_before,
            "rss_settled_mb": rss_settled,
            "rss_end_mb": rss_end,
            "rss_peak_mb": peak,
            "rss_growth_mb": rss_end - rss_before,
            "rss_growth_idle_mb": rss_end - rss_settled,
        }
    )


async def backlog(namesrv: str, topic: str, group: str, seconds: float, delay: float) -> None:
    """A slow handler on a big backlog: how far does memory grow?"""
    consumed = 0

    async def slow(msg: ConsumerMessage) -> None:
        nonlocal consumed
        await anyio.sleep(delay)
        consumed += 1

    consumer = Consumer(
        group, namesrv, handler=slow, consume_from_where=ConsumeFromWhere.FIRST_OFFSET
    )
    consumer.subscribe(topic)
    peak = rss0 = c.rss_mb()
    async with consumer:
        c.emit("READY")
        t0 = time.perf_counter()
        cached = 0
        while time.perf_counter() - t0 < seconds:
            await anyio.sleep(0.5)
            peak = max(peak, c.rss_mb())
            cached = max(cached, sum(s.cached for s in consumer.stats()))
            c.emit(f"PROGRESS {consumed}")
        elapsed = time.perf_counter() - t0
    c.emit_result(
        {
            "consumed": consumed,
            "seconds": elapsed,
            "rss_start_mb": rss0,
            "rss_peak_sampled_mb": peak,
            "max_cached_msgs": cached,
        }
    )


def main(argv: list[str]) -> None:
    cmd, namesrv, r = argv[0], argv[1], argv[2:]
    run: Callable[[], Awaitable[None]]
    if cmd in ("produce", "paced"):
        fn = produce if cmd == "produce" else paced
        auto = len(r) < 5 or r[4] in ("auto", "auto-await")
        run = partial(fn, namesrv, r[0], int(r[1]), int(r[2]), int(r[3]), auto)
        if cmd == "produce" and auto and (len(r) < 5 or r[4] == "auto"):
            run = partial(run, callbacks=True)
        if cmd == "produce" and len(r) > 4 and r[4] in ("grpc", "grpc-auto"):
            batched = r[4] == "grpc-auto"
            run = partial(produce, namesrv, r[0], int(r[1]), int(r[2]), int(r[3]), batched, True)
        if cmd == "paced" and len(r) > 5:  # paced ... RATE BATCHING SENDERS
            run = partial(run, int(r[5]))
    elif cmd == "idle":
        run = partial(idle, namesrv, r[0], float(r[1]), r[2:])
    elif cmd == "backlog":
        run = partial(backlog, namesrv, r[0], r[1], float(r[2]), float(r[3]))
    else:
        raise SystemExit(__doc__)
    anyio.run(run)


if __name__ == "__main__":
    main(sys.argv[1:])
