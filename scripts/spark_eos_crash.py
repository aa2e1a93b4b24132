"""Repeated crash runs of the Spark sink's exactly-once mode (issue 31).

    python scripts/spark_eos_crash.py [--rounds 5] [--kills 3] [--count 400]
                                      [--per-batch 40] [--seed N] [--proxy] [--cover]

Each round: a fresh source topic with ``--count`` messages and a fresh output topic;
a streaming query (``tests/spark/eos_driver.py``: ``local[2,3]``, AvailableNow,
``maxOffsetsPerTrigger=--per-batch``, ``transactionTimeoutSeconds=6``) is SIGKILLed
``--kills`` times at random points of the batch cycle (while tasks send, between task
success and commit, after the commit record is written, once the commit is through with
every row but has not marked the record done) of random micro-batches, each
time restarted from its checkpoint, then run to its end, losing on the way the Python
worker of one task while it sends (Spark retries the task). The round passes when the
output topic holds every input row exactly once: every stored message is read back
from each queue's first to last offset and compared, as a multiset of bodies, with
what was sent. Prints one line per round and a summary; exit status 1 on any failure.
With ``--proxy`` the sink writes through the local Proxy (gRPC) into a ``TRANSACTION``
topic, and the driver may also be killed once it has noted its first COMMIT answers to
a batch's check-backs but sent none (``answered``). Each batch then waits for the
broker's check pass (every 30 s on the test cluster): use fewer, larger batches.
With ``--cover`` the kill points are taken in turn instead of at random (every point is
hit once ``rounds * kills`` reaches their number: 4, 5 with ``--proxy``). The short
version is ``tests/spark/test_exactly_once.py``: one driver kill per transport
(``recorded``; ``answered`` through the Proxy) and one worker kill; the points it leaves
out (``send`` and ``recorded`` through the Proxy among them) are this script's, e.g.
``--rounds 1 --kills 4 --count 80 --per-batch 16 --cover`` and the same with ``--proxy``
and ``--kills 5 --count 96``.
"""

from __future__ import annotations

import argparse
import itertools
import random
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from aiorocket.testing.broker import LocalRocketMQ  # noqa: E402
from tests.spark import eos_driver  # noqa: E402
from tests.spark.conftest import create_and_fill  # noqa: E402

POINTS = ("send", "tasks-done", "recorded", "ended")
PROXY_POINTS = (*POINTS, "answered")


def one_round(cluster: LocalRocketMQ, rng: random.Random, args: argparse.Namespace,
              workdir: Path, turns: Iterator[str]) -> tuple[bool, str]:  # fmt: skip
    tag = uuid.uuid4().hex[:8]
    filled = create_and_fill(cluster, f"eos_crash_src_{tag}", args.count)
    target = f"eos_crash_out_{tag}"
    kind = "TRANSACTION" if args.proxy else None
    anyio.run(lambda: cluster.create_topic(target, queues=2, message_type=kind))
    proxy = cluster.proxy_grpc if args.proxy else None
    run = eos_driver.Run(cluster.namesrv_addr, filled.topic, target, workdir, args.per_batch,
                         proxy=proxy)  # fmt: skip
    points = PROXY_POINTS if args.proxy else POINTS
    batches = -(-args.count // args.per_batch)
    # Kill points in batch order: each restart resumes where the last one died.
    chosen = sorted(rng.sample(range(1, batches), min(args.kills, batches - 1)))
    done = []
    for batch in chosen:
        point = f"{next(turns) if args.cover else rng.choice(points)}:{batch}"
        reached = run.kill_at(point, timeout=900)  # a loaded machine: batches wait for check passes
        done.append(point if reached else f"({point} not reached)")
    last = chosen[-1] if chosen else 0
    worker = f"send:{rng.randrange(last + 1, batches)}" if last + 1 < batches else None
    if worker is not None and run.finish(kill_worker_at=worker):
        done.append(f"worker at {worker}")
    elif worker is None:
        run.finish()
    stored = Counter(eos_driver.stored(cluster.namesrv_addr, target))
    sent = Counter(m.body for m in filled.messages)
    missing = sum((sent - stored).values())
    extra = sum((stored - sent).values())
    ok = missing == 0 and extra == 0
    return ok, f"kills {', '.join(done)}: {sum(stored.values())} stored, " \
               f"{missing} missing, {extra} extra"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--kills", type=int, default=3)
    p.add_argument("--count", type=int, default=400)
    p.add_argument("--per-batch", type=int, default=40)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--proxy", action="store_true", help="the sink writes through the Proxy")
    p.add_argument("--cover", action="store_true", help="kill points in turn, not at random")
    args = p.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(2**32)
    rng = random.Random(seed)
    cluster = LocalRocketMQ.attach()
    if cluster is None:
        print("no local RocketMQ runs (python -m aiorocket.testing.broker start)")
        return 2
    via = " through the Proxy" if args.proxy else ""
    print(f"seed {seed}: {args.rounds} rounds of {args.count} rows{via}, "
          f"{args.kills} kills each")  # fmt: skip
    failures = 0
    started = time.monotonic()
    turns = itertools.cycle(PROXY_POINTS if args.proxy else POINTS)
    for i in range(args.rounds):
        with tempfile.TemporaryDirectory(prefix="eos-crash-") as tmp:
            t0 = time.monotonic()
            ok, what = one_round(cluster, rng, args, Path(tmp), turns)
            failures += not ok
            print(f"round {i + 1}: {'ok  ' if ok else 'FAIL'} {what} "
                  f"({time.monotonic() - t0:.0f} s)", flush=True)  # fmt: skip
    print(f"{args.rounds - failures}/{args.rounds} rounds exactly once "
          f"in {time.monotonic() - started:.0f} s")  # fmt: skip
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
