"""POP over remoting beside the pull consumer (issue 33): throughput, CPU, join gap.

    python benchmarks/pop.py [--count 50000] [--size 1024] [--rate 2000] [--window 24]

1. Throughput: a fresh 8-queue topic on ``broker-a`` is pre-filled with ``--count``
   messages; a child process drains it with a no-op handler, once pulling
   (``consume_mode="pull"``) and once popping (``consume_mode="pop"``), each with a
   fresh group from the first offset; then the Java push consumer in POP mode
   (benchmarks/java, ``BENCH_POP=1``; ``--skip-java`` leaves it out). Prints messages/s
   and CPU microseconds per message of the consumer process. (compare.py's ``pop``
   case runs the same sides, with the e2e latency and repeats; this script is the
   quick look.)
2. Membership changes under load: a producer sends ``--rate`` messages/s to a topic of
   8 queues on each broker for ``--window`` seconds; members A (in this process) and C
   (a child process) consume from the start; at a third of the window member B joins (in
   this process), at two thirds C is SIGKILLed. Prints, for pull and POP, the longest
   gap between two messages handled by A or B, the largest send-to-handle latency of
   the messages sent in the 3 s after each change, and how many of those sent after the
   kill A and B never handled (within 60 s). In POP mode, what C had popped when it died
   (also from its long polls held by the broker at that moment) comes back only after
   C's invisible time (30 s): that is the worst latency after the kill.

Figures, not assertions: the tests check behaviour (tests/integration/test_remoting_pop.py).
"""

from __future__ import annotations

import argparse
import uuid
from typing import Any

import _common as c
import _runs
import _setup
import anyio
from _pop import membership


def throughput(cl: Any, count: int, size: int, skip_java: bool) -> dict[str, dict[str, Any]]:
    topic = f"bench_pop_{uuid.uuid4().hex[:8]}"
    broker = next(iter(cl.broker_addrs))

    async def fill() -> None:
        await cl.create_topic(topic, queues=8, brokers=[broker])
        await c.prefill(cl.namesrv_addr, topic, count, size)

    anyio.run(fill)
    java = None if skip_java else _setup.build_java(cl.version)
    env = _runs.Env(cl, broker, java, size)
    out = {}
    # the Java push consumer in POP mode: rocketmq-client of the cluster's version
    for name in ("aiorocket", "aiorocket-pop") + ("java-pop",) * bool(java):
        out[name] = r = _runs.consume(env, name, topic, count)
        c.log(f"{name:>13}: {r['msgs_per_s']:,.0f} msgs/s, {r['us_cpu_per_msg']:.1f} µs CPU/msg")
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--count", type=int, default=50_000)
    p.add_argument("--size", type=int, default=1024)
    p.add_argument("--rate", type=int, default=2000)
    p.add_argument("--window", type=float, default=24.0)
    p.add_argument("--skip-throughput", action="store_true")
    p.add_argument("--skip-java", action="store_true", help="no Java POP consumer run")
    a = p.parse_args()
    cl = c.cluster()
    if not a.skip_throughput:
        throughput(cl, a.count, a.size, a.skip_java)
    for mode in ("pull", "pop"):
        r = anyio.run(membership, cl, mode, a.rate, a.window)
        w = r["worst_latency_after_s"]
        c.log(
            f"{mode:>4}: longest gap {r['longest_gap_s'] * 1000:,.0f} ms (while B joins "
            f"{r['join_gap_ms']:,.0f} ms, before {r['gap_before_join_ms']:,.0f} ms); "
            f"{r['failed']} sends failed; worst latency after "
            f"join {w['join']:.2f} s, after kill {w['kill']:.2f} s; "
            f"{r['rate']:,.0f} msgs/s sent; {r['unhandled_after_kill']} sent after the kill "
            "never handled by A/B"
        )


if __name__ == "__main__":
    main()
