"""compare.py's measurements: one child process per client and case."""

from __future__ import annotations

import os
import sys
import time
import uuid
from dataclasses import dataclass
from typing import Any

import _common as c
import _setup as s
import anyio
from _pop import set_pop_mode
from consume import summarize

from aiorocket.testing.broker import LocalRocketMQ

PY = sys.executable
#: clients consuming through the Proxy (pop)
GRPC_CONSUMERS = ("official", "aiorocket-grpc", "java-grpc")
#: POP over remoting: aiorocket's ``consume_mode="pop"``, the Java push consumer in POP
#: mode (``setClientRebalance(false)``, the topic and group switched to POP on the brokers)
REMOTING_POP = ("aiorocket-pop", "java-pop")
Argv = tuple[list[str], dict[str, str] | None]


@dataclass
class Env:
    cl: LocalRocketMQ
    broker: str  # the broker holding the benchmark topics (the proxy's)
    java: list[str] | None  # java command line up to the main class
    size: int
    java_grpc: list[str] | None = None  # the Java 5.x gRPC client's command line

    def consumer(self, client: str, topic: str, group: str, n: int, latency: bool) -> Argv:
        extra = ["--latency"] if latency else []
        idle = "10" if latency else "20"  # stop after this many seconds without messages
        if client == "aiorocket-grpc":
            script = os.path.join(c.HERE, "consume.py")
            args = [self.cl.proxy_grpc, topic, group, str(n), "grpc", "--idle-timeout", idle]
            return [PY, script, "child", *args, *extra], None
        if client == "java-grpc":
            assert self.java_grpc is not None
            flag = "1" if latency else "0"
            args = [self.cl.proxy_grpc, topic, group, str(n), idle, flag]
            return [*self.java_grpc, "consume", *args], None
        return self._remoting_consumer(client, topic, group, n, latency)

    def _remoting_consumer(
        self, client: str, topic: str, group: str, n: int, latency: bool
    ) -> Argv:
        extra = ["--latency"] if latency else []
        idle = "10" if latency else "20"  # stop after this many seconds without messages
        if client.startswith("aiorocket"):  # -plain: the producer differs, not the consumer
            modes = {"aiorocket-iter": "iter", "aiorocket-pop": "pop"}
            mode = modes.get(client, "handler")
            script = os.path.join(c.HERE, "consume.py")
            args = [self.cl.namesrv_addr, topic, group, str(n), mode, "--idle-timeout", idle]
            return [PY, script, "child", *args, *extra], None
        if client in ("java", "java-pop"):
            assert self.java is not None
            flag = "1" if latency else "0"
            pop = {"BENCH_POP": "1"} if client == "java-pop" else None
            return [
                *self.java,
                "consume",
                self.cl.namesrv_addr,
                topic,
                group,
                str(n),
                idle,
                flag,
            ], pop
        script = os.path.join(c.HERE, "official.py")
        args = [self.cl.proxy_grpc, topic, group, str(n), "--idle-timeout", idle]
        return [s.OFFICIAL_PY, script, "consume", *args, *extra], s.OFFICIAL_ENV

    def producer(
        self, client: str, mode: str, topic: str, n: int, k: int, in_flight: int = 0
    ) -> Argv:
        """``k``: sends in flight (produce) or the rate (paced); ``in_flight`` > 0 bounds
        a paced producer's sends in flight."""
        args = [topic, str(n), str(self.size), str(k)]
        if client in ("aiorocket-grpc", "aiorocket-grpc-batch"):
            script = os.path.join(c.HERE, "aio_children.py")
            batching = "grpc-auto" if client == "aiorocket-grpc-batch" else "grpc"
            return [PY, script, mode, self.cl.proxy_grpc, *args, batching], None
        if client == "java-grpc":
            assert self.java_grpc is not None
            return [*self.java_grpc, mode, self.cl.proxy_grpc, *args], None
        if client.startswith("aiorocket"):
            script = os.path.join(c.HERE, "aio_children.py")
            batching = "plain" if client == "aiorocket-plain" else "auto"
            bound = [str(in_flight)] if in_flight else []
            return [PY, script, mode, self.cl.namesrv_addr, *args, batching, *bound], None
        if client in ("java", "java-batch"):
            assert self.java is not None
            batching = "auto" if client == "java-batch" else "plain"  # setAutoBatch(true)
            extra = [str(in_flight), batching] if mode == "paced" else [batching]
            return [*self.java, mode, self.cl.namesrv_addr, *args, *extra], None
        script = os.path.join(c.HERE, "official.py")
        bound = [str(in_flight)] if in_flight else []
        return [s.OFFICIAL_PY, script, mode, self.cl.proxy_grpc, *args, *bound], s.OFFICIAL_ENV


def consume(env: Env, client: str, topic: str, n: int) -> dict[str, Any]:
    """Drain ``n`` pre-filled messages with a fresh group from the first offset."""
    group = f"bench_{client.replace('-', '_')}_{uuid.uuid4().hex[:8]}"
    if client in GRPC_CONSUMERS:  # pop starts a new group at the end: start it at 0
        anyio.run(env.cl.set_group_offsets, topic, group, 0)
    if client == "java-pop":
        anyio.run(set_pop_mode, env.cl, topic, group)
    argv, extra_env = env.consumer(client, topic, group, n, latency=False)
    child = c.Child(client, argv, extra_env).start()
    return {**summarize(child.wait(timeout=7200), child), "expected": n}


def produce(env: Env, client: str, topic: str, n: int, in_flight: int) -> dict[str, Any]:
    argv, extra_env = env.producer(client, "produce", topic, n, in_flight)
    child = c.Child(f"{client} producer", argv, extra_env).start()
    r = child.wait(timeout=7200)
    rate, cpu = r["count"] / r["elapsed"], r["cpu"] / r["count"] * 1e5
    return {**r, "msgs_per_s": rate, "cpu_per_100k": cpu, "peak_rss_mb": child.maxrss_mb}


#: the one paced producer of the e2e latency case, whatever the consumer
COMMON_SENDER = "aiorocket"


def latency(
    env: Env, client: str, rate: int, seconds: float, warmup: float, *, spread: bool = False
) -> dict[str, Any]:
    """The common paced producer -> ``client``'s consumer on a fresh topic; steady-state
    percentiles of the consumer's ``now - stamp``.

    Every consumer column is fed by the same producer (aiorocket's, auto-batch), so the
    figure is the consumer's, not its own producer's queueing (issue 17: Java's
    unbounded async sends queued for seconds and failed). Send latency per producer is
    the produce case's. The producer runs ``warmup + seconds``; consumers count latency
    only for messages sent at least 1 s after their first message arrived. ``spread``:
    the topic has 8 queues on every broker (else on ``env.broker``).
    """
    topic = s.new_topic(env.cl, f"bench_lat_{client}", None if spread else env.broker)
    n = int(rate * (seconds + warmup))
    group = f"bench_lat_{uuid.uuid4().hex[:8]}"
    if client in GRPC_CONSUMERS:
        anyio.run(lambda: env.cl.create_group(group))  # the proxy wants the group to exist
    if client == "java-pop":
        anyio.run(set_pop_mode, env.cl, topic, group)
    argv, extra_env = env.consumer(client, topic, group, n, latency=True)
    quiet = s.wait_cluster_quiet(env.cl)
    consumer = c.Child(f"{client} e2e consumer", argv, extra_env).start()
    consumer.wait_ready()
    time.sleep(3)
    argv, extra_env = env.producer(COMMON_SENDER, "paced", topic, n, rate)
    p = c.Child(f"common paced producer -> {client}", argv, extra_env).start().wait(timeout=600)
    r = consumer.wait(timeout=600)
    return {
        **r,
        "producer": p,
        "sender": COMMON_SENDER,
        "rate": rate,
        "messages": n,
        "expected": n,
        "spread": spread,
        "cluster_cpu_pct_before": quiet,
    }


def latency_floor(env: Env, rate: int, seconds: float, warmup: float) -> dict[str, Any]:
    """The common paced producer of :func:`latency` alone: the same child, rate and
    count on a fresh topic on ``env.broker``, with no consumer. Its send p99 is what the
    brokers and the machine give every side's send -> stored without any consumer's
    work beside it (goal 4 of issue 43: "the rest is the shared machine"); the sides'
    own runs carry the same producer's send p99 beside their consumer."""
    topic = s.new_topic(env.cl, "bench_lat_floor", env.broker)
    n = int(rate * (seconds + warmup))
    quiet = s.wait_cluster_quiet(env.cl)
    argv, extra_env = env.producer(COMMON_SENDER, "paced", topic, n, rate)
    p = c.Child("common paced producer alone", argv, extra_env).start().wait(timeout=600)
    return {
        "send_p50_ms": p.get("send_p50_ms"),  # shown as the run ends (compare.measure)
        "send_p99_ms": p.get("send_p99_ms"),
        "producer": p,
        "sender": COMMON_SENDER,
        "rate": rate,
        "messages": n,
        "cluster_cpu_pct_before": quiet,
    }


def send_latency(
    env: Env, client: str, topic: str, rate: int, seconds: float, in_flight: int
) -> dict[str, Any]:
    """``client``'s producer paced at ``rate`` for ``seconds`` with at most ``in_flight``
    sends outstanding (the same bound for every client): send-to-ack percentiles."""
    n = int(rate * seconds)
    quiet = s.wait_cluster_quiet(env.cl)
    argv, extra_env = env.producer(client, "paced", topic, n, rate, in_flight)
    child = c.Child(f"{client} paced sender", argv, extra_env).start()
    r = child.wait(timeout=600)
    achieved = r["count"] / r["elapsed"] if r["elapsed"] else 0.0
    return {
        **r,
        "rate": rate,
        "in_flight": in_flight,
        "achieved_rate": achieved,
        "cpu_per_100k": r["cpu"] / r["count"] * 1e5,
        "peak_rss_mb": child.maxrss_mb,
        "cluster_cpu_pct_before": quiet,
    }


def idle(env: Env, topics: int, seconds: float) -> dict[str, Any]:
    """One aiorocket consumer subscribed to ``topics`` x 8 queues, no traffic."""
    names = [f"bench_idle_{i:03d}" for i in range(topics)]

    async def create() -> None:
        for t in names:
            if not await env.cl.route(t):
                await env.cl.create_topic(t, queues=8, brokers=[env.broker])

    c.log(f"  creating/checking {len(names)} topics x 8 queues")
    anyio.run(create)
    group = f"bench_idle_{uuid.uuid4().hex[:8]}"
    script = os.path.join(c.HERE, "aio_children.py")
    argv = [PY, script, "idle", env.cl.namesrv_addr, group, str(seconds), *names]
    child = c.Child("idle consumer", argv).start()
    return {**child.wait(timeout=seconds + 300), "peak_rss_mb": child.maxrss_mb}


def backlog(env: Env, topic: str, waiting: int, seconds: float, delay: float) -> dict[str, Any]:
    group = f"bench_backlog_{uuid.uuid4().hex[:8]}"
    script = os.path.join(c.HERE, "aio_children.py")
    argv = [PY, script, "backlog", env.cl.namesrv_addr, topic, group, str(seconds), str(delay)]
    child = c.Child("backlog consumer", argv).start()
    r = child.wait(timeout=seconds + 300)
    return {**r, "peak_rss_mb": child.maxrss_mb, "backlog": waiting, "delay": delay}
