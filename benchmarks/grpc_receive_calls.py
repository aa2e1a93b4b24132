"""The gRPC push consumer's receive path alone, counted (issue 43, goal 5b, round 7):
Python calls per message through the fake Proxy, load-independent.

    PYTHONPATH=. .venv/bin/python benchmarks/grpc_receive_calls.py [--count 3200]
        [--batch 14] [--base 1600] [--mode profile|plain] [--simple] [--every] [--dump F]

The fake Proxy (``aiorocket.testing.fake_grpc``) runs in a child process with
``--count`` messages of 1 KiB queued; this process runs a ``Consumer`` over gRPC with
``pull_batch_size=--batch`` (the messages a receive brings) and a handler that counts,
until every message was handled. ``profile``: the consume under cProfile, twice
(``--base`` and ``--count`` messages), and the difference of the calls over the
difference of the messages (start-up and close cancel out): all calls, aiorocket's
(not ``aiorocket.testing``), and the top aiorocket functions by calls. ``plain``: one
consume of ``--count``, nothing measured (for ``valgrind --tool=cachegrind``: the
instructions of two counts' runs, differenced). ``--simple``: ``SimpleConsumer.receive``
in a loop instead of the push consumer (no timers, acks or workers: the count repeats).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import subprocess
import sys
from datetime import datetime, timezone
from typing import Any

import anyio


def serve(count: int) -> None:
    """The child: a fake Proxy with ``count`` messages, its port on stdout."""
    from aiorocket.grpc import _pb as pb
    from aiorocket.testing.fake_grpc import FakeProxy

    class Parking(FakeProxy):
        """Parks a receive that finds nothing, as the real Proxy's long poll does
        (the fake answers it at once: the consumer's loops would spin)."""

        async def _receive(self, stream: Any) -> None:
            if not self.messages:
                await asyncio.Event().wait()
            await super()._receive(stream)

    async def main() -> None:
        async with Parking() as proxy:
            now = datetime.now(timezone.utc)
            proxy.messages = [
                pb.Message(
                    topic=pb.Resource(name="t"),
                    system_properties=pb.SystemProperties(
                        message_id=f"id{i:08d}", receipt_handle=f"rh{i}", delivery_attempt=1,
                        born_timestamp=now, store_timestamp=now,
                    ),
                    body=b"x" * 1024,
                )
                for i in range(count)
            ]  # fmt: skip
            print(proxy.port, flush=True)
            await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)

    asyncio.run(main())


async def consume(port: int, count: int, batch: int) -> None:
    from aiorocket.consumer import Consumer, ConsumerMessage

    done = anyio.Event()
    seen = 0

    async def handle(msg: ConsumerMessage) -> None:
        nonlocal seen
        seen += 1
        if seen == count:
            done.set()

    consumer = Consumer("g", proxy=f"127.0.0.1:{port}", handler=handle,
                        long_poll_timeout=5, pull_batch_size=batch)  # fmt: skip
    consumer.subscribe("t")
    async with consumer:
        with anyio.fail_after(120):
            await done.wait()


async def receive_only(port: int, count: int, batch: int) -> None:
    """``SimpleConsumer.receive`` of ``batch`` in a loop, one at a time, nothing acked:
    the receive path without the push consumer's timers, acks and workers."""
    from aiorocket.grpc import SimpleConsumer

    async with SimpleConsumer("g", f"127.0.0.1:{port}", {"t": "*"}) as c:
        got = 0
        while got < count:
            got += len(await c.receive(batch, invisible_duration=60))


def run(count: int, batch: int, prof: cProfile.Profile | None, simple: bool = False) -> None:
    child = subprocess.Popen(
        [sys.executable, __file__, "--serve", str(count)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert child.stdout is not None and child.stdin is not None
        port = int(child.stdout.readline())
        if prof is not None:
            prof.enable()
        asyncio.run((receive_only if simple else consume)(port, count, batch))
        if prof is not None:
            prof.disable()
    finally:
        if child.stdin is not None:
            child.stdin.close()
        child.wait(10)


def _calls(prof: cProfile.Profile, every: bool) -> tuple[int, int, dict[str, int]]:
    stats: Any = pstats.Stats(prof).stats
    total = ours = 0
    by_fn: dict[str, int] = {}
    for (file, line, fn), (_cc, nc, *_rest) in stats.items():
        total += nc
        mine = "/aiorocket/" in file and "/aiorocket/testing/" not in file
        ours += nc if mine else 0
        if mine or every:
            by_fn[f"{file.split('/site-packages/')[-1].split('/aiorocket/')[-1]}:{line}({fn})"] = nc
    return total, ours, by_fn


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--serve", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--count", type=int, default=3200)
    p.add_argument("--base", type=int, default=1600)
    p.add_argument("--batch", type=int, default=14)
    p.add_argument("--mode", choices=("profile", "plain"), default="profile")
    p.add_argument("--top", type=int, default=25)
    p.add_argument(
        "--simple",
        action="store_true",
        help="SimpleConsumer.receive in a loop instead of the push consumer",
    )
    p.add_argument("--dump", default=None, help="FILE: the --count run's cProfile stats")
    p.add_argument("--every", action="store_true", help="the top functions of every module")
    a = p.parse_args()
    if a.serve is not None:
        serve(a.serve)
        return
    if a.mode == "plain":
        run(a.count, a.batch, None, a.simple)
        return
    # a first consume, not counted: the modules a run imports lazily (their import's
    # calls, tens of thousands) would land in the base run and skew the difference
    run(200, a.batch, None, a.simple)
    results = []
    for n in (a.base, a.count):
        prof = cProfile.Profile()
        run(n, a.batch, prof, a.simple)
        results.append(_calls(prof, a.every))
        if a.dump:
            prof.dump_stats(a.dump)
    (t0, o0, f0), (t1, o1, f1) = results
    d = a.count - a.base
    print(f"batch {a.batch}: calls/msg all {(t1 - t0) / d:.1f}, aiorocket {(o1 - o0) / d:.1f}")
    delta = {k: v - f0.get(k, 0) for k, v in f1.items()}
    for k, v in sorted(delta.items(), key=lambda kv: -kv[1])[: a.top]:
        print(f"  {v / d:7.2f}  {k}")


if __name__ == "__main__":
    main()
