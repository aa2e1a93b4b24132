"""The cost of idempotent consumption (``dedup=``) per message, no broker: one handler
call of the shared runtime (``Handler.call``) per message, without dedup, with the
memory store, and with Redis (a ``redis-server`` this script starts on a free loopback
port, when installed). Prints microseconds per message (wall and CPU), one run each.

    .venv/bin/python benchmarks/dedup.py [--count 20000] [--redis-count 5000]

Each message has a new id: every call claims a key and marks it done (the store's two
round trips with Redis; a duplicate costs one: its claim answers DONE).
"""

from __future__ import annotations

import argparse
import shutil
import socket
import subprocess
import tempfile
import time
from typing import Any

import anyio

from aiorocket._log import get_logger
from aiorocket.consumer.config import ConsumerConfig
from aiorocket.consumer.dedup import Dedup, MemoryDedupStore
from aiorocket.consumer.handler import Handler
from aiorocket.consumer.process_queue import ProcessQueue
from aiorocket.consumer.state import ConsumerState
from aiorocket.consumer.threads import HandlerThreads
from aiorocket.message import MessageQueue
from aiorocket.received import ConsumerMessage


async def handle(msg: ConsumerMessage) -> None:
    return None


async def per_message(n: int, dedup: Dedup | None) -> dict[str, float]:
    log = get_logger("bench")
    state = ConsumerState("bench", ConsumerConfig(dedup=dedup), log)
    threads = HandlerThreads(concurrency=1, max_abandoned=1, log=log)
    handler = Handler(handle, batch=False, threads=threads, state=state)
    pq = ProcessQueue(MessageQueue("t", "b", 0), 0)
    msgs = [ConsumerMessage("t", b"x", {"UNIQ_KEY": f"id-{i}"}, 0, i, i) for i in range(n)]
    cpu, t0 = time.process_time(), time.perf_counter()
    for m in msgs:
        await handler.call(pq, [m])
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu
    return {"wall_us": round(wall / n * 1e6, 1), "cpu_us": round(cpu / n * 1e6, 1)}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def with_redis(n: int, port: int | None) -> dict[str, Any] | str:
    if port is None:
        return "redis-server not installed (scripts/ensure_redis.sh)"
    import redis.asyncio

    from aiorocket.consumer.dedup_redis import RedisDedupStore

    client = redis.asyncio.Redis(port=port)
    try:
        with anyio.fail_after(20):
            while True:  # until the server this script started answers
                try:
                    await client.ping()
                    break
                except redis.ConnectionError:
                    await anyio.sleep(0.05)
        return await per_message(n, Dedup(RedisDedupStore(client)))
    finally:
        await client.aclose()


async def main(count: int, redis_count: int, port: int | None) -> None:
    print("off   ", await per_message(count, None))
    print("memory", await per_message(count, Dedup(MemoryDedupStore())))
    print("redis ", await with_redis(redis_count, port))


def run(count: int, redis_count: int) -> None:
    server = shutil.which("redis-server")
    if server is None:
        anyio.run(main, count, redis_count, None)
        return
    port = _free_port()
    with tempfile.TemporaryDirectory() as workdir:
        proc = subprocess.Popen([server, "--port", str(port), "--bind", "127.0.0.1",
                                 "--save", "", "--appendonly", "no", "--dir", workdir],
                                stdout=subprocess.DEVNULL)  # fmt: skip
        try:
            anyio.run(main, count, redis_count, port)
        finally:
            proc.terminate()
            proc.wait(10)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=20_000)
    parser.add_argument("--redis-count", type=int, default=5_000)
    args = parser.parse_args()
    run(args.count, args.redis_count)
