"""The gRPC e2e case alone, the parked receives alternating (issue 43, goal 5b).

    PYTHONPATH=. .venv/bin/python benchmarks/grpc_receivers.py --rate 5000 --receivers 2,3 --pairs 3

Runs compare.py's gRPC e2e case for aiorocket (``_runs.latency``: the common paced
producer -> a fresh consumer) once per receive count per pair, the consumer's parked
receives set by ``BENCH_GRPC_RECEIVERS`` (``grpc_source.RECEIVERS``), and prints per
run the e2e p99, the stored -> user split (``_receive_split``, with ``dispatch``'s
make-up), the receives and the cluster processes' CPU per message around the run
(the Proxy's cost of more receives). ``--steps`` counts the loop callbacks too.
"""

from __future__ import annotations

import argparse
import json
import os

import _common as c
import _runs
import _setup

SHOWN = ("wait_p50_ms", "wait_p99_ms", "server_p99_ms", "dispatch_p50_ms", "dispatch_p99_ms",
         "tail_dispatch_ms", "tail_dispatch_cpu_ms", "tail_dispatch_gc_ms", "dispatch_steps_p50",
         "receives", "mean_batch", "full_pct")  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rate", type=int, default=5000)
    p.add_argument("--seconds", type=float, default=10.0, help="measured paced seconds")
    p.add_argument("--warmup", type=float, default=5.0, help="paced seconds before them")
    p.add_argument("--receivers", default="2,3", help="comma list, run in turn each pair")
    p.add_argument("--pairs", type=int, default=3)
    p.add_argument("--steps", action="store_true", help="count the loop callbacks (slower)")
    a = p.parse_args()
    cl = c.cluster()
    broker = str(cl.state.get("proxy_broker", next(iter(cl.broker_addrs))))
    env = _runs.Env(cl, broker, None, 1024)
    if a.steps:
        os.environ["BENCH_DISPATCH_STEPS"] = "1"
    for pair in range(a.pairs):
        for n in a.receivers.split(","):
            os.environ["BENCH_GRPC_RECEIVERS"] = n  # the consumer child inherits it
            before = _setup.cluster_cpu(cl)
            r = _runs.latency(env, "aiorocket-grpc", a.rate, a.seconds, a.warmup)
            after = _setup.cluster_cpu(cl)
            split = r.get("receive_split", {})
            row = {"pair": pair + 1, "receivers": int(n), "load": os.getloadavg()[0]}
            row.update({k: r.get(k) for k in ("lat_p50_ms", "lat_p99_ms", "count", "cpu")})
            row.update({k: round(split[k], 2) for k in SHOWN if k in split})
            messages = r.get("messages") or 1
            row["cluster_us_per_msg"] = sum(after[k] - before[k] for k in before) / messages * 1e6
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
