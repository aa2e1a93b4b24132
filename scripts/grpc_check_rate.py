"""How fast the broker checks back half messages and the Proxy takes the answers.

    python scripts/grpc_check_rate.py [--count 3000]

Against the local cluster's Proxy: ``--count`` half messages (recovery time 6 s) are
sent into a fresh ``TRANSACTION`` topic by a client that does not publish it; a second
client, publishing it, answers every check-back COMMIT at once (128 in flight), as the
Spark sink's driver does through a Proxy (``aiorocket/spark/_grpc.py``). Prints when the
check-backs arrived and when the Proxy took the answers, from the first send; the
arrival span is the broker's check pass (one put-back write and one check-back per half
message, one thread per broker), which bounds that sink's rows per second.
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from aiorocket.grpc._producer import GrpcProducer
from aiorocket.message import Message, MessageExt
from aiorocket.producer.config import ProducerConfig
from aiorocket.testing.broker import LocalRocketMQ


def span(times: list[float]) -> str:
    if not times:
        return "none"
    rate = len(times) / max(max(times) - min(times), 1e-3)
    return f"{len(times)} from {min(times):.1f} s to {max(times):.1f} s ({rate:,.0f}/s)"


async def main(count: int) -> None:
    cluster = LocalRocketMQ.attach()
    assert cluster is not None, "no local cluster (python -m aiorocket.testing.broker start)"
    topic = f"check_rate_{uuid.uuid4().hex[:8]}"
    await cluster.create_topic(topic, queues=2, message_type="TRANSACTION")
    arrived: list[float] = []
    taken: list[float] = []
    t0 = time.monotonic()
    all_taken = anyio.Event()

    async def verdict(msg: MessageExt) -> bool:
        arrived.append(time.monotonic() - t0)
        return True

    def answered(msg: MessageExt, commit: bool) -> None:
        taken.append(time.monotonic() - t0)
        if len(taken) >= count:
            all_taken.set()

    config = ProducerConfig(auto_batch=False, retries=0, check_concurrency=128)
    sender = GrpcProducer("rate-send", cluster.proxy_grpc, config=config, announce=False)
    checker = GrpcProducer("rate-check", cluster.proxy_grpc, config=config, on_orphan=verdict,
                           topics=[topic], on_answered=answered)  # fmt: skip
    await sender.start()
    await checker.start()
    try:
        limiter = anyio.CapacityLimiter(128)

        async def one() -> None:
            async with limiter:
                await sender.send_half(Message(topic, b"x" * 256), recovery_s=6)

        async with anyio.create_task_group() as tg:
            for _ in range(count):
                tg.start_soon(one)
        print(f"sent {count} half messages in {time.monotonic() - t0:.1f} s", flush=True)
        with anyio.move_on_after(240):
            await all_taken.wait()
        print(f"check-backs arrived: {span(arrived)}")
        print(f"answers taken:       {span(taken)}")
    finally:
        await checker.close(None, None, None)
        await sender.close(None, None, None)


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--count", type=int, default=3000)
    anyio.run(main, p.parse_args().count)
