"""POP over remoting beside the pull consumer (issue 33): throughput, CPU, join gap.

    python benchmarks/pop.py [--count 50000] [--size 1024] [--rate 2000] [--window 24]

1. Throughput: a fresh 8-queue topic on ``broker-a`` is pre-filled with ``--count``
   messages; a child process drains it with a no-op handler, once pulling
   (``consume_mode="pull"``) and once popping (``consume_mode="pop"``), each with a
   fresh group from the first offset; then the Java push consumer in POP mode
   (benchmarks/java, ``BENCH_POP=1``; ``--skip-java`` leaves it out). Prints messages/s
   and CPU microseconds per message of the consumer process.
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
import contextlib
import itertools
import json
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import _common as c
import _setup
import anyio

from aiorocket import Message
from aiorocket.client.instance import ClientInstance
from aiorocket.consumer import ConsumeFromWhere, Consumer, ConsumerMessage
from aiorocket.errors import RocketMQError
from aiorocket.producer import Producer

HERE = Path(__file__).parent


def throughput(cl: Any, count: int, size: int, skip_java: bool) -> dict[str, dict[str, Any]]:
    import consume

    topic = f"bench_pop_{uuid.uuid4().hex[:8]}"

    async def fill() -> None:
        await cl.create_topic(topic, queues=8, brokers=[next(iter(cl.broker_addrs))])
        await c.prefill(cl.namesrv_addr, topic, count, size)

    anyio.run(fill)
    out = {}
    for mode in ("handler", "pop"):
        r = consume.run_child(cl.namesrv_addr, topic, count, mode)
        name = "pull" if mode == "handler" else "pop"
        out[name] = r
        c.log(f"{name:>9}: {r['msgs_per_s']:,.0f} msgs/s, {r['us_cpu_per_msg']:.1f} µs CPU/msg")
    java = None if skip_java else _setup.build_java(cl.version)
    if java is not None:  # the Java push consumer in POP mode (rocketmq-client, same version)
        group = f"bench_java_pop_{uuid.uuid4().hex[:8]}"
        anyio.run(set_pop_mode, cl, topic, group)
        argv = [*java, "consume", cl.namesrv_addr, topic, group, str(count), "20", "0"]
        child = c.Child("java pop", argv, {"BENCH_POP": "1"}).start()
        r = consume.summarize(child.wait(timeout=3600), child)
        out["java-pop"] = r
        c.log(f"java-pop: {r['msgs_per_s']:,.0f} msgs/s, {r['us_cpu_per_msg']:.1f} µs CPU/msg")
    return out


async def set_pop_mode(cl: Any, topic: str, group: str) -> None:
    """SET_MESSAGE_REQUEST_MODE (401) on every broker: the Java push consumer pops this
    (topic, group) when it does not rebalance itself (``setClientRebalance(false)``)."""
    body = json.dumps({"topic": topic, "consumerGroup": group, "mode": "POP",
                       "popShareQueueNum": 0}).encode()  # fmt: skip
    async with ClientInstance(cl.namesrv_addr) as client:
        for addr in cl.broker_addrs.values():
            resp = await client.broker.call(addr, 401, {}, body)
            if resp.code not in (0, 17):  # 17: the topic is not on that broker
                raise RuntimeError(f"SET_MESSAGE_REQUEST_MODE refused: {resp.remark}")


async def membership(cl: Any, mode: str, rate: int, window: float) -> dict[str, Any]:
    topic = f"bench_popjoin_{uuid.uuid4().hex[:8]}"
    group = f"bench_join_{mode}_{uuid.uuid4().hex[:6]}"
    await cl.create_topic(topic, queues=8)
    handled: dict[bytes, float] = {}
    times: list[float] = []
    sent_at: dict[bytes, float] = {}

    async def handle(msg: ConsumerMessage) -> None:
        now = time.monotonic()
        if msg.body not in handled:
            handled[msg.body] = now
        times.append(now)

    def member() -> Consumer:
        consumer = Consumer(group, cl.namesrv_addr, handler=handle, consume_mode=mode,
                            consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
                            invisible_duration=10) if mode == "pop" else Consumer(
            group, cl.namesrv_addr, handler=handle,
            consume_from_where=ConsumeFromWhere.FIRST_OFFSET)  # fmt: skip
        consumer.subscribe(topic)
        return consumer

    child_mode = "pop" if mode == "pop" else "handler"
    member_c = c.Child(f"member C ({mode})", [
        sys.executable, str(HERE / "consume.py"), "child", cl.namesrv_addr, topic, group,
        str(10**9), child_mode, "--idle-timeout", "3600",
    ]).start()  # fmt: skip
    member_c.wait_ready()
    changes: dict[str, float] = {}
    async with member(), Producer("bench_popjoin", cl.namesrv_addr) as producer:
        b = member()
        start = time.monotonic()
        drained = anyio.Event()
        failed: list[bytes] = []
        n = 0
        async with anyio.create_task_group() as tg:

            async def changes_at() -> None:
                await anyio.sleep(window / 3)
                changes["join"] = time.monotonic()
                async with b:  # member B, until the drain below is over
                    await anyio.sleep(window / 3)
                    changes["kill"] = time.monotonic()
                    member_c.kill()
                    await drained.wait()

            async def send(body: bytes) -> None:
                try:
                    await producer.send(Message(topic, body))
                except RocketMQError:  # a loaded machine: counted, not a crash
                    del sent_at[body]
                    failed.append(body)

            tg.start_soon(changes_at)
            while time.monotonic() - start < window:
                body = b"m%d" % n
                sent_at[body] = time.monotonic()
                tg.start_soon(send, body)  # paced, not awaited
                n += 1
                ahead = n / rate - (time.monotonic() - start)
                if ahead > 0:
                    await anyio.sleep(ahead)
            after_kill = [k for k, t in sent_at.items() if t >= changes.get("kill", 1e18)]
            with anyio.move_on_after(60):
                while any(k not in handled for k in after_kill):  # noqa: ASYNC110
                    await anyio.sleep(0.2)
            drained.set()
    times.sort()
    steady = [t for t in times if start + 1 < t < start + window]
    gap = max((later - t for t, later in itertools.pairwise(steady)), default=0.0)
    worst = {}
    for what, at in changes.items():
        lat = [handled[k] - s for k, s in sent_at.items() if at <= s < at + 3 and k in handled]
        worst[what] = max(lat, default=float("nan"))
    with contextlib.suppress(RuntimeError):  # killed: no RESULT
        member_c.wait(timeout=5)
    lost = [k for k, t in list(sent_at.items()) if t >= changes["kill"] and k not in handled]
    sent = n - len(failed)
    return {"sent": sent, "rate": sent / window, "unhandled_after_kill": len(lost),
            "longest_gap_s": gap, "worst_latency_after_s": worst}  # fmt: skip


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
            f"{mode:>4}: longest gap {r['longest_gap_s'] * 1000:,.0f} ms; worst latency after "
            f"join {w['join']:.2f} s, after kill {w['kill']:.2f} s; "
            f"{r['rate']:,.0f} msgs/s sent; {r['unhandled_after_kill']} sent after the kill "
            "never handled by A/B"
        )


if __name__ == "__main__":
    main()
