"""Consumer throughput (issue 3): one aiorocket consumer drains a pre-filled topic.

    python benchmarks/consume.py [--count 200000] [--size 1024] [--mode handler|iter|both]
                                 [--runs 1] [--reuse-topic TOPIC] [--profile FILE[.txt]]

Pre-fills a fresh 8-queue topic on ``broker-a`` of the local cluster (or reuses
``--reuse-topic``, which must already hold ``--count`` messages), then, for each mode and
run, starts a child process running one consumer with a fresh group from the first
offset and prints messages/s, CPU seconds of that process over the consume phase and
its peak RSS. Only messages delivered to user code are counted.

``handler`` = push consumer with a no-op async handler; ``iter`` = ``async for``;
``pop`` = the handler consumer in POP mode (``consume_mode="pop"``, benchmarks/pop.py).
The child alone: ``python benchmarks/consume.py child NAMESRV TOPIC GROUP N MODE``.
"""

from __future__ import annotations

import argparse
import collections
import os
import statistics
import sys
import time
import uuid
from typing import Any

import _common as c
import anyio
from _pull_split import PullSplit
from _receive_split import ReceiveSplit

from aiorocket.consumer import Consumer, ConsumerMessage
from aiorocket.consumer.config import ConsumeFromWhere

SLOW_US = 10_000  # e2e samples above this are counted per 100 ms window of their send


async def consume(
    namesrv: str,
    topic: str,
    group: str,
    expected: int,
    mode: str,
    *,
    latency: bool = False,
    idle_timeout: float = 20.0,
    settings: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Consume ``expected`` messages; return count, timings, CPU (and latency percentiles)."""
    count = 0
    first = last = 0.0
    lat: list[int] = []
    # e2e split at the broker's store time (ms resolution): send -> stored and stored -> user
    # code, so a tail can be placed on the producer+broker side or on the consumer side.
    to_store: list[int] = []
    from_store: list[int] = []
    slow: collections.Counter[int] = collections.Counter()  # 100 ms send window -> count
    steady_us = 0  # latency counts only messages sent 1 s after the first one arrived
    done = anyio.Event()
    # over gRPC: stored -> user split at the receive (benchmarks/_receive_split.py)
    # over remoting: the same at the pull (benchmarks/_pull_split.py)
    split: ReceiveSplit | None = None
    if latency:
        split = ReceiveSplit() if mode == "grpc" else PullSplit() if mode != "pop" else None
    by_id = mode != "grpc"  # a pulled message is keyed by the object (no id decoded)
    if split is not None:
        split.install()

    def seen(msg: ConsumerMessage) -> None:
        nonlocal count, first, last, steady_us
        count += 1
        if count == 1:
            first = time.perf_counter()
            steady_us = c.now_us() + 1_000_000
        if latency:
            sent_us = c.sent_us(msg.body)
            if split is not None:
                key = id(msg) if by_id else msg.message_id
                split.sample(key, msg.store_timestamp * 1000, c.now_us(),
                             steady=sent_us >= steady_us)  # fmt: skip
            if sent_us >= steady_us:
                now_us = c.now_us()
                lat_us = now_us - sent_us
                lat.append(lat_us)
                stored_us = msg.store_timestamp * 1000
                to_store.append(stored_us - sent_us)
                from_store.append(now_us - stored_us)
                if lat_us > SLOW_US:
                    slow[sent_us // 100_000] += 1
        if count >= expected:
            last = time.perf_counter()
            done.set()

    async def handler(msg: ConsumerMessage) -> None:
        seen(msg)

    async def watchdog() -> None:
        shown = idle = 0
        while not done.is_set():
            await anyio.sleep(0.5)
            idle = 0 if count != shown else idle + 1
            if count != shown:
                c.emit(f"PROGRESS {count}")
            shown = count
            if idle * 0.5 >= (idle_timeout if count else 90.0):  # stalled, or nothing in 90 s
                done.set()

    if mode == "grpc":  # ``namesrv`` is the Proxy; where the group starts is set on it
        consumer = Consumer(group, proxy=namesrv, handler=handler, **(settings or {}))
    else:  # pop: POP over remoting (consume_mode="pop"), with the handler
        consumer = Consumer(
            group,
            namesrv,
            handler=handler if mode in ("handler", "pop") else None,
            consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
            consume_mode="pop" if mode == "pop" else "pull",
            **(settings or {}),
        )
    consumer.subscribe(topic)
    cpu0, t0 = time.process_time(), time.perf_counter()
    async with consumer, anyio.create_task_group() as tg:
        c.emit("READY")
        tg.start_soon(watchdog)
        if mode in ("handler", "grpc", "pop"):
            await done.wait()
        else:
            async for msg in consumer:
                seen(msg)
                if done.is_set():
                    break
        cpu, end = time.process_time() - cpu0, time.perf_counter()
        tg.cancel_scope.cancel()
    out: dict[str, Any] = {
        "count": min(count, expected),
        "elapsed": end - t0,
        "first_to_last": (last or end) - first,
        "startup": first - t0 if first else -1.0,
        "cpu": cpu,
    }
    if latency:
        lat.sort()
        out["lat_p50_ms"] = c.percentile(lat, 50) / 1000
        out["lat_p99_ms"] = c.percentile(lat, 99) / 1000
        out["lat_samples"] = len(lat)
        to_store.sort()
        from_store.sort()
        out["send_to_store_p99_ms"] = c.percentile(to_store, 99) / 1000
        out["store_to_user_p99_ms"] = c.percentile(from_store, 99) / 1000
        # When the tail happened (send time, wall clock): lines it up with GC logs and
        # other processes' activity.
        out["slow_windows"] = {f"{w / 10:.1f}": n for w, n in sorted(slow.items())}
        if split is not None:
            out["receive_split"] = split.summary()
    return out


def child_main(argv: list[str]) -> None:
    p = argparse.ArgumentParser(prog="consume.py child")
    p.add_argument("namesrv")
    p.add_argument("topic")
    p.add_argument("group")
    p.add_argument("expected", type=int)
    # grpc: NAMESRV is the Proxy; pop: POP over remoting
    p.add_argument("mode", choices=["handler", "iter", "grpc", "pop"])
    p.add_argument("--latency", action="store_true")
    p.add_argument("--idle-timeout", type=float, default=20.0)
    p.add_argument("--profile", default=None, help="FILE.txt: pyinstrument, else cProfile")
    a = p.parse_args(argv)
    if os.environ.get("BENCH_GRPC_RECEIVERS"):  # issue 43, goal 5b: the receives parked
        from aiorocket.consumer.pop import grpc_source

        grpc_source.RECEIVERS = int(os.environ["BENCH_GRPC_RECEIVERS"])

    def run() -> dict[str, Any]:
        kw = {"latency": a.latency, "idle_timeout": a.idle_timeout}
        return anyio.run(lambda: consume(a.namesrv, a.topic, a.group, a.expected, a.mode, **kw))

    if a.profile and a.profile.endswith(".txt"):  # statistical: pyinstrument's call tree
        from pyinstrument import Profiler
        from pyinstrument.stack_sampler import get_stack_sampler

        # Sample CPU time, not wall time: on a busy machine wall time mostly measures
        # preemption inside syscalls.
        get_stack_sampler().timer_func = time.process_time
        profiler = Profiler(interval=0.0005)
        profiler.start()
        result = run()
        profiler.stop()
        with open(a.profile, "w") as f:
            f.write(profiler.output_text(unicode=True, show_all=False))
    elif a.profile:  # deterministic: a cProfile dump (pstats)
        import cProfile

        prof = cProfile.Profile()
        result = prof.runcall(run)
        prof.dump_stats(a.profile)
    else:
        result = run()
    c.emit_result(result)


def run_child(namesrv: str, topic: str, count: int, mode: str, **kw: Any) -> dict[str, Any]:
    """One measured consumer run in a fresh process; adds rate, CPU/100k and peak RSS."""
    group = f"bench_{mode}_{uuid.uuid4().hex[:8]}"
    argv = [sys.executable, __file__, "child", namesrv, topic, group, str(count), mode]
    if kw.get("profile"):
        argv += ["--profile", kw["profile"]]
    child = c.Child(f"aiorocket {mode}", argv).start()
    r = child.wait(timeout=kw.get("timeout", 3600))
    return summarize(r, child)


def summarize(r: dict[str, Any], child: c.Child) -> dict[str, Any]:
    n = r["count"]
    span = r["first_to_last"] if r["first_to_last"] > 0 else r["elapsed"]
    return {
        **r,
        "msgs_per_s": (n - 1) / span if n > 1 else 0.0,
        "msgs_per_s_total": n / r["elapsed"],
        "cpu_per_100k": r["cpu"] / n * 100_000 if n else float("nan"),
        "us_cpu_per_msg": r["cpu"] / n * 1e6 if n else float("nan"),
        "cpu_util": r["cpu"] / r["elapsed"],  # < 1: waiting on the broker or the CPU
        "peak_rss_mb": child.maxrss_mb,
        "cpu_process_total": child.cpu_total,
    }


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "child":
        child_main(sys.argv[2:])
        return
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--count", type=int, default=200_000)
    p.add_argument("--size", type=int, default=1024)
    p.add_argument("--mode", choices=["handler", "iter", "both"], default="both")
    p.add_argument("--runs", type=int, default=1)
    p.add_argument("--reuse-topic", default=None)
    p.add_argument(
        "--profile",
        default=None,
        help="profile the first run: FILE.txt pyinstrument tree, else cProfile dump",
    )
    a = p.parse_args()
    cl = c.cluster()
    topic = a.reuse_topic
    if topic is None:
        topic = f"bench_consume_{uuid.uuid4().hex[:8]}"

        async def fill() -> None:
            await cl.create_topic(topic, queues=8, brokers=[next(iter(cl.broker_addrs))])
            c.log(f"pre-filling {topic} with {a.count:,} x {a.size} B")
            with c.progress_bar("pre-fill", a.count) as progress:
                s = await c.prefill(cl.namesrv_addr, topic, a.count, a.size, progress=progress)
            c.log(f"pre-filled in {s:.1f}s ({a.count / s:,.0f} msgs/s)")

        anyio.run(fill)
    modes = ["handler", "iter"] if a.mode == "both" else [a.mode]
    rates: dict[str, list[float]] = {m: [] for m in modes}
    cpus: dict[str, list[float]] = {m: [] for m in modes}
    for i in range(a.runs):
        for mode in modes:
            prof = a.profile if i == 0 and a.profile else None
            r = run_child(cl.namesrv_addr, topic, a.count, mode, profile=prof)
            rates[mode].append(r["msgs_per_s"])
            cpus[mode].append(r["us_cpu_per_msg"])
            print(
                f"{mode:<8} run {i + 1}: {r['count']:,} msgs, {r['msgs_per_s']:,.0f} msgs/s "
                f"(incl. start-up {r['msgs_per_s_total']:,.0f}), CPU {r['cpu']:.2f}s "
                f"= {r['us_cpu_per_msg']:.1f} µs/msg ({r['cpu_util']:.0%} of a core), "
                f"peak RSS {r['peak_rss_mb']:.0f} MiB",
                flush=True,
            )
    for mode, xs in rates.items():
        print(
            f"{mode:<8} median {statistics.median(xs):,.0f} msgs/s, "
            f"{statistics.median(cpus[mode]):.1f} µs CPU/msg over {len(xs)} run(s)"
        )
    print(f"topic {topic} (reuse with --reuse-topic {topic} --count {a.count})")


if __name__ == "__main__":
    main()
