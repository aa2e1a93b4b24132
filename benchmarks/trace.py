"""The cost of message trace (``trace=True``): produce and consume msg/s and CPU per
message, trace off then on, one run each, against the local cluster.

    .venv/bin/python benchmarks/trace.py [--count 20000] [--size 256] [--in-flight 64]

Producing: ``count`` single sends (``in_flight`` at once, no auto-batching: one Pub
record per send). Consuming: the same messages from the first offset by an async
handler (one SubBefore and one SubAfter per message). With trace on, the records go to
a trace topic this script creates (the shared broker has no RMQ_SYS_TRACE_TOPIC); the
figures say how many records were sent, dropped (full buffer) or failed.
"""

from __future__ import annotations

import argparse
import os
import time
import uuid

import _common as c
import anyio

from aiorocket.consumer import ConsumeFromWhere, Consumer, ConsumerMessage
from aiorocket.message import Message
from aiorocket.producer import Producer


async def produce(namesrv: str, topic: str, n: int, size: int, in_flight: int,
                  trace_topic: str | None) -> dict[str, object]:  # fmt: skip
    body = os.urandom(size)
    settings = {"trace": True, "trace_topic": trace_topic} if trace_topic else {}
    async with Producer("bench_trace_p", namesrv, max_in_flight=in_flight, auto_batch=False,
                        **settings) as producer:  # fmt: skip
        cpu, t0 = time.process_time(), time.perf_counter()
        async with anyio.create_task_group() as tg:
            for _ in range(n):
                await producer.start_send(tg, Message(topic, body))
        elapsed, cpu = time.perf_counter() - t0, time.process_time() - cpu
    tracer = producer.tracer
    return {"msg_s": round(n / elapsed), "cpu_us": round(cpu / n * 1e6, 1),
            "trace": None if tracer is None else tracer.stats()}  # fmt: skip


async def consume(namesrv: str, topic: str, n: int, trace_topic: str | None) -> dict[str, object]:
    done = anyio.Event()
    count = 0

    async def handle(msg: ConsumerMessage) -> None:
        nonlocal count
        count += 1
        if count >= n:
            done.set()

    settings = {"trace": True, "trace_topic": trace_topic} if trace_topic else {}
    consumer = Consumer(f"bench_trace_{uuid.uuid4().hex[:8]}", namesrv, handler=handle,
                        consume_from_where=ConsumeFromWhere.FIRST_OFFSET, **settings)  # fmt: skip
    consumer.subscribe(topic)
    async with consumer:
        cpu, t0 = time.process_time(), time.perf_counter()
        with anyio.fail_after(300):
            await done.wait()
        elapsed, cpu = time.perf_counter() - t0, time.process_time() - cpu
    tracer = consumer.tracer
    return {"msg_s": round(n / elapsed), "cpu_us": round(cpu / n * 1e6, 1),
            "trace": None if tracer is None else tracer.stats()}  # fmt: skip


async def main(args: argparse.Namespace) -> None:
    cl = c.cluster()
    tag = uuid.uuid4().hex[:8]
    topic, trace_topic = f"bench_trace_{tag}", f"bench_trace_records_{tag}"
    await cl.create_topic(topic, queues=4)
    await cl.create_topic(trace_topic, queues=4)
    for label, tt in (("off", None), ("on", trace_topic)):
        sent = await produce(cl.namesrv_addr, topic, args.count, args.size, args.in_flight, tt)
        c.log(f"produce trace {label}: {sent}")
    # Each run consumes the 2 x count messages both produce runs stored.
    for label, tt in (("off", None), ("on", trace_topic)):
        got = await consume(cl.namesrv_addr, topic, 2 * args.count, tt)
        c.log(f"consume trace {label}: {got}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=20_000)
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--in-flight", type=int, default=64)
    anyio.run(main, parser.parse_args())
