"""What bounds compare.py's auto-batched produce case (issue 43, goal 3, round 8).

Runs compare.py's producer children (``aio_children.py produce ... 64 auto`` and, when
built, Java's ``bench.Bench produce ... 64 auto``) alternating, each on a fresh 8-queue
topic on the Proxy's broker as compare.py does, and prints per run, from READY to RESULT:
msg/s; the client's and each cluster process's CPU a message and in cores; the machine's
idle cores (``/proc/stat``: whether the two cores were saturated). For aiorocket also its
requests' timeline (the child wraps ``AutoBatcher._run``): the share of the run's time
with 0, 1, 2, ... requests under way, a request's mean time from its take to its answer
(``rtt``), the mean time from the latest answer before a request to its take
(``turnaround``: the client's work on the answers and the refill), the share of requests
that left within 0.1 ms of another, and ``2 x batch / (rtt + turnaround)``: the rate two
requests would give (benchmarks/README.md, "Goal 3, round 8"); and, from each request's
``WireTiming`` (its frame's write to the socket, its answer's read off it), the share of
the run with 0, 1, 2 ... requests at the broker, a request's broker time alone there and
with another, the share of requests written in one write with the one before (the two
requests in lockstep) and the time from an answer's read to the next write (round 13).

    .venv/bin/python benchmarks/produce_pipeline.py --count 60000 --rounds 3

Needs the running local cluster (``python -m aiorocket.testing.broker start --brokers 2``).
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import sys
import time
from itertools import pairwise
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
HZ = os.sysconf("SC_CLK_TCK")


def _proc_cpu(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / HZ


def _machine() -> tuple[float, float]:
    """All CPU seconds and idle (+ iowait) seconds so far."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return sum(v) / HZ, (v[3] + v[4]) / HZ


def _shares(intervals: list[tuple[float, float]]) -> dict[int, float]:
    """The share of the time from the first start to the last end with 0, 1, 2 ...
    of ``intervals`` (start, end) open."""
    events = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals])
    share: dict[int, float] = {}
    count, last = 0, events[0][0]
    for t, step in events:
        share[count] = share.get(count, 0.0) + t - last
        count, last = count + step, t
    total = sum(share.values()) or 1.0
    return {k: round(v / total, 3) for k, v in sorted(share.items())}


def timeline(spans: list[tuple[float, float, int]]) -> dict[str, Any]:
    """``spans``: (take, answer, messages) of each request of the measured run."""
    spans = sorted(spans)
    starts = [s for s, _, _ in spans]
    ends = sorted(e for _, e, _ in spans)
    rtt = sum(e - s for s, e, _ in spans) / len(spans)
    turns = []
    for s in starts:
        i = bisect.bisect_left(ends, s)
        if i:
            turns.append(s - ends[i - 1])
    turnaround = sum(turns) / max(len(turns), 1)
    together = sum(1 for a, b in pairwise(starts) if b - a < 1e-4)
    batch = sum(n for _, _, n in spans) / len(spans)
    return {
        "requests": len(spans),
        "batch": batch,
        "under_way_share": _shares([(s, e) for s, e, _ in spans]),
        "rtt_ms": rtt * 1e3,
        "turnaround_ms": turnaround * 1e3,
        "left_together": together / len(spans),
        "model_msg_s": 2 * batch / (rtt + turnaround),
    }


def at_broker(wire: list[tuple[float, float]]) -> dict[str, Any]:
    """``wire``: (written, read) of each request of the measured run, on the loop's clock:
    from its frame's write to the socket to its answer's read off it (``WireTiming``),
    the broker's time as the client sees it. The share of the run with 0, 1, 2 ...
    requests at the broker; the mean broker time of a request alone there and of one
    with another; the share of requests written to the socket in one write with the one
    before (the same ``Sent``: lockstep, benchmarks/README.md "Goal 3, round 13"); the
    mean time from an answer's read to the next write (the client's turnaround)."""
    wire = sorted(w for w in wire if w[1] >= w[0])  # answered (NaN compares false)
    if not wire:
        return {}
    alone, shared = [], []
    for i, (w, r) in enumerate(wire):
        near = wire[max(0, i - 8) : i] + wire[i + 1 : i + 9]
        (shared if any(w2 < r and r2 > w for w2, r2 in near) else alone).append(r - w)
    reads = sorted(r for _, r in wire)
    gaps = []
    for w, _ in wire:
        i = bisect.bisect_left(reads, w)
        if i:
            gaps.append(w - reads[i - 1])
    ms = lambda xs: 1e3 * sum(xs) / len(xs) if xs else float("nan")  # noqa: E731
    return {
        "at_broker_share": _shares(wire),
        "broker_ms": ms([r - w for w, r in wire]),
        "broker_alone_ms": ms(alone),
        "alone_share": len(alone) / len(wire),
        "broker_with_another_ms": ms(shared),
        "written_together": sum(1 for a, b in pairwise(wire) if a[0] == b[0]) / len(wire),
        "read_to_write_ms": ms(gaps),
    }


def child(argv: list[str]) -> None:
    """``aio_children.py produce ...`` with each request's take and answer recorded."""
    sys.path.insert(0, HERE)
    import _common
    import aio_children

    from aiorocket.producer import accumulate
    from aiorocket.producer import sender as sender_module

    spans: list[tuple[float, float, int]] = []
    timings: list[Any] = []  # each request's ``WireTiming`` (every send is a request)
    wire_timing = sender_module.WireTiming

    def recorded() -> Any:
        timing = wire_timing()
        timings.append(timing)
        return timing

    sender_module.WireTiming = recorded  # type: ignore[misc, assignment]
    run = accumulate.AutoBatcher._run

    async def timed(self: accumulate.AutoBatcher, topic: str, batch: list[Any], *rest: Any) -> None:
        t0 = time.perf_counter()
        try:
            await run(self, topic, batch, *rest)
        finally:
            spans.append((t0, time.perf_counter(), len(batch)))

    accumulate.AutoBatcher._run = timed  # type: ignore[method-assign]
    emit = _common.emit_result
    ready = _common.emit

    def mark(line: str) -> None:
        if line == "READY":
            spans.clear()  # the warm-up's requests are not the run's
            timings.clear()
        ready(line)

    def result(data: dict[str, Any]) -> None:
        wire = [(t.sent.at, t.read_at) for t in timings if t.sent is not None]
        emit({**data, "timeline": {**timeline(spans), **at_broker(wire)}})

    _common.emit, _common.emit_result = mark, result
    aio_children.main(argv)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--count", type=int, default=60_000, help="messages per run")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--in-flight", type=int, default=64)
    p.add_argument("--sides", default="aiorocket,java-batch")
    a = p.parse_args()
    sys.path.insert(0, HERE)
    import _common as c
    import _setup

    cl = c.cluster()
    broker = str(cl.state.get("proxy_broker", next(iter(cl.broker_addrs))))
    sides = a.sides.split(",")
    java = _setup.build_java(cl.version) if "java-batch" in sides else None
    procs = {p.name: p.pid for p in cl.processes}
    for _ in range(a.rounds):
        for side in sides:
            topic = _setup.new_topic(cl, "bench_pipeline", broker)
            args = [cl.namesrv_addr, topic, str(a.count), "1024", str(a.in_flight), "auto"]
            if side == "java-batch":
                if java is None:
                    continue
                argv = [*java, "produce", *args]
            else:
                argv = [sys.executable, os.path.abspath(__file__), "--child", "produce", *args]
            ch = c.Child(side, argv).start()
            ch.wait_ready()
            assert ch.proc is not None
            t0, m0 = time.monotonic(), _machine()
            cpu0 = {k: _proc_cpu(v) for k, v in procs.items()} | {"client": _proc_cpu(ch.proc.pid)}
            while ch.result is None and ch.proc.poll() is None:
                time.sleep(0.02)
            t1, m1 = time.monotonic(), _machine()
            cpu1 = {k: _proc_cpu(v) for k, v in procs.items()} | {"client": _proc_cpu(ch.proc.pid)}
            r = ch.wait(timeout=600)
            wall, n = t1 - t0, r["count"]
            out: dict[str, Any] = {"side": side, "msg_s": round(n / r["elapsed"])}
            for k in cpu0:
                out[f"{k} us/msg"] = round((cpu1[k] - cpu0[k]) / n * 1e6, 1)
                out[f"{k} cores"] = round((cpu1[k] - cpu0[k]) / wall, 2)
            out["idle cores"] = round((m1[1] - m0[1]) / wall, 2)
            out["load"] = round(os.getloadavg()[0], 1)
            if "timeline" in r:
                out["timeline"] = {
                    k: round(v, 3) if isinstance(v, float) else v for k, v in r["timeline"].items()
                }
            print(json.dumps(out), flush=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        child(sys.argv[2:])
    else:
        main()
