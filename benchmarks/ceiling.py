"""The client's own ceiling (issue 17): consume from a replay server, no broker involved.

    python benchmarks/ceiling.py [--count 400000] [--size 1024] [--runs 3]
                                 [--modes handler,iter,pull,pop] [--batches 32,256]
                                 [--profile DIR] [--json FILE]

For each mode, pull batch size and run: a fresh ``_replay.py`` process (pinned to CPU 0
where ``os.sched_setaffinity`` exists) serves ``--count`` messages over 8 queues, and a
fresh consumer process (pinned to CPU 1) drains them with a fresh group:

* ``handler``: push consumer, no-op async handler;
* ``iter``: ``async for msg in consumer``;
* ``pull``: ``PullConsumer.getmany()`` in a loop;
* ``pop``: push consumer over POP (``consume_mode="pop"``), no-op async handler (the
  pull batch size is its pop batch size); not in the default ``--modes``.

The replay server runs on the code of this checkout whatever ``PYTHONPATH`` the client
gets (to compare two versions of the client against one server:
``PYTHONPATH=<other checkout> python benchmarks/ceiling.py``).

Reported: msg/s from the first to the last message delivered, and the consumer
process's CPU µs per message (user + system, start-up excluded). Table on stdout (rich),
JSON in ``benchmarks/results/ceiling-<time>.json``. ``--profile DIR`` profiles the first
run of each case with pyinstrument (CPU time) and saves an HTML flame view and a text
call tree there.

The child alone: ``python benchmarks/ceiling.py child NAMESRV TOPIC N MODE BATCH``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import _common as c
import anyio
from consume import consume, summarize

from aiorocket.consumer import PullConsumer
from aiorocket.consumer.config import ConsumeFromWhere

MODES = ("handler", "iter", "pull", "pop")
SERVER_CPU, CLIENT_CPU = 0, 1
QUEUES = 8


def pin(cpu: int) -> None:
    """Run on one CPU where the platform allows it (and the CPU exists)."""
    if hasattr(os, "sched_setaffinity") and cpu in os.sched_getaffinity(0):
        os.sched_setaffinity(0, {cpu})


async def pull_consume(
    namesrv: str, topic: str, group: str, expected: int, settings: dict[str, Any]
) -> dict[str, Any]:
    """Drain ``expected`` messages with ``PullConsumer.getmany()``; consume()'s fields."""
    count = 0
    first = last = 0.0
    consumer = PullConsumer(
        group, namesrv, consume_from_where=ConsumeFromWhere.FIRST_OFFSET, **settings
    )
    consumer.subscribe(topic)
    cpu0, t0 = time.process_time(), time.perf_counter()
    shown = time.monotonic()
    async with consumer:
        c.emit("READY")
        while count < expected:
            batch = await consumer.getmany(timeout=20.0)
            if not batch:
                break  # stalled
            for msgs in batch.values():
                count += len(msgs)
            if not first:
                first = time.perf_counter()
            if time.monotonic() - shown >= 0.5:
                shown = time.monotonic()
                c.emit(f"PROGRESS {count}")
        last = time.perf_counter()
        cpu, end = time.process_time() - cpu0, time.perf_counter()
    return {
        "count": min(count, expected),
        "elapsed": end - t0,
        "first_to_last": last - first if first else 0.0,
        "startup": first - t0 if first else -1.0,
        "cpu": cpu,
    }


def child_main(argv: list[str]) -> None:
    p = argparse.ArgumentParser(prog="ceiling.py child")
    p.add_argument("namesrv")
    p.add_argument("topic")
    p.add_argument("expected", type=int)
    p.add_argument("mode", choices=MODES)
    p.add_argument("batch", type=int)
    p.add_argument("--profile", default=None, help="FILE prefix: FILE.html and FILE.txt")
    a = p.parse_args(argv)
    pin(CLIENT_CPU)
    group = f"ceiling_{a.mode}_{uuid.uuid4().hex[:8]}"
    settings = {"pull_batch_size": a.batch}

    def run() -> dict[str, Any]:
        if a.mode == "pull":
            return anyio.run(pull_consume, a.namesrv, a.topic, group, a.expected, settings)
        return anyio.run(
            lambda: consume(a.namesrv, a.topic, group, a.expected, a.mode, settings=settings)
        )

    if a.profile:
        from pyinstrument import Profiler
        from pyinstrument.stack_sampler import get_stack_sampler

        get_stack_sampler().timer_func = time.process_time  # CPU time, not wall time
        profiler = Profiler(interval=0.0005)
        profiler.start()
        result = run()
        profiler.stop()
        Path(a.profile + ".html").write_text(profiler.output_html())
        Path(a.profile + ".txt").write_text(profiler.output_text(unicode=True, show_all=False))
    else:
        result = run()
    c.emit_result(result)


class Server:
    """A ``_replay.py`` process; stops when its stdin closes."""

    def __init__(self, topic: str, per_queue: int, size: int) -> None:
        import subprocess

        argv = [sys.executable, os.path.join(c.HERE, "_replay.py"), topic, str(per_queue),
                "--queues", str(QUEUES), "--size", str(size), "--cpu", str(SERVER_CPU)]  # fmt: skip
        # the server of this checkout, whichever client PYTHONPATH names
        env = {**os.environ, "PYTHONPATH": os.path.dirname(c.HERE)}
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, env=env)  # fmt: skip
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.startswith("PORT "):
            self.proc.kill()
            raise RuntimeError(f"replay server did not start: {line!r}")
        self.addr = f"127.0.0.1:{int(line.split()[1])}"
        self.cpu0 = self._cpu()

    def _cpu(self) -> float:
        """The server's CPU seconds so far (/proc; NaN elsewhere)."""
        try:
            with open(f"/proc/{self.proc.pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except OSError:
            return float("nan")

    def stop(self) -> tuple[float, int]:
        """CPU seconds used since start-up and the pulls it answered."""
        cpu = self._cpu() - self.cpu0
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.close()
        rest = self.proc.stdout.read()
        self.proc.wait(10)
        pulls = next((int(x.split()[1]) for x in rest.splitlines() if x.startswith("PULLS")), -1)
        return cpu, pulls


def run_case(
    mode: str, batch: int, count: int, size: int, profile: str | None, flame: str | None = None
) -> dict[str, Any]:
    topic = f"ceiling_{uuid.uuid4().hex[:8]}"
    per_queue = -(-count // QUEUES)
    server = Server(topic, per_queue, size)
    try:
        argv = [sys.executable, __file__, "child", server.addr, topic, str(count), mode,
                str(batch)]  # fmt: skip
        if profile:
            argv += ["--profile", profile]
        if flame:
            # py-spy samples the child from outside (no in-process profiler overhead on the
            # hot path) and writes an SVG flame graph; the child's output passes through.
            spy = shutil.which("py-spy", path=os.path.dirname(sys.executable)) or "py-spy"
            argv = [spy, "record", "--rate", "250", "--format", "flamegraph",
                    "--output", flame, "--", *argv]  # fmt: skip
        child = c.Child(f"{mode} batch {batch}", argv).start()
        r = summarize(child.wait(timeout=600), child)
    finally:
        server_cpu, pulls = server.stop()
    return {**r, "server_cpu": server_cpu, "pulls": pulls, "complete": r["count"] >= count}


def spread(xs: list[float]) -> str:
    return f"{min(xs):,.0f}-{max(xs):,.0f}" if len(xs) > 1 else ""


def print_table(results: dict[str, list[dict[str, Any]]]) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title="client ceiling: replay server (1 core) -> consumer (1 core)")
    for col in ("mode", "pull batch", "runs", "msg/s (median)", "range", "µs CPU/msg",
                "range", "server CPU %", "note"):  # fmt: skip
        t.add_column(col, justify="left" if col in ("mode", "note") else "right")
    for key, runs in results.items():
        mode, batch = key.split("/")
        rates = [r["msgs_per_s"] for r in runs]
        cpus = [r["us_cpu_per_msg"] for r in runs]
        srv = [r["server_cpu"] / r["elapsed"] * 100 for r in runs]
        bad = [r for r in runs if not r["complete"]]
        note = f"INVALID: {len(bad)} run(s) incomplete" if bad else ""
        t.add_row(mode, batch, str(len(runs)), f"{statistics.median(rates):,.0f}",
                  spread(rates), f"{statistics.median(cpus):.2f}",
                  f"{min(cpus):.2f}-{max(cpus):.2f}" if len(cpus) > 1 else "",
                  f"{statistics.median(srv):.0f}", note)  # fmt: skip
    # piped output (tee, CI logs) gets a wide table, not 80 columns of ellipses
    Console(width=shutil.get_terminal_size((150, 24)).columns).print(t)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "child":
        child_main(sys.argv[2:])
        return
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--count", type=int, default=400_000)
    p.add_argument("--size", type=int, default=1024)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--modes", default="handler,iter,pull")
    p.add_argument("--batches", default="32,256")
    p.add_argument("--profile", default=None, help="DIR for pyinstrument HTML/text profiles")
    p.add_argument("--json", default=None, help="default: results/ceiling-<time>.json")
    a = p.parse_args()
    modes = [m for m in a.modes.split(",") if m]
    unknown = set(modes) - set(MODES)
    if unknown:
        p.error(f"unknown mode(s): {', '.join(sorted(unknown))}")
    batches = [int(b) for b in a.batches.split(",") if b]
    if a.profile:
        os.makedirs(a.profile, exist_ok=True)
    if a.profile:
        # Profiled runs come first and are extra: a profiler costs the client several times
        # its own CPU, so a profiled run's figures must not enter the medians.
        # the bench group installs py-spy into the venv, beside this interpreter
        spy = shutil.which("py-spy", path=os.path.dirname(sys.executable)) or shutil.which("py-spy")
        if spy is None:
            c.log("py-spy not on PATH: no SVG flame graphs (pyinstrument profiles only)")
        for mode in modes:
            for batch in batches:
                base = os.path.join(a.profile, f"ceiling-{mode}-{batch}")
                run_case(mode, batch, a.count, a.size, base)
                if spy is not None:
                    run_case(mode, batch, a.count, a.size, None, flame=base + ".svg")
                c.log(f"{mode} batch {batch}: profiles in {base}.*")
    results: dict[str, list[dict[str, Any]]] = {}
    for i in range(a.runs):
        for mode in modes:
            for batch in batches:
                r = run_case(mode, batch, a.count, a.size, None)
                results.setdefault(f"{mode}/{batch}", []).append(r)
                c.log(
                    f"{mode} batch {batch} run {i + 1}: {r['count']:,} msgs, "
                    f"{r['msgs_per_s']:,.0f} msg/s, {r['us_cpu_per_msg']:.2f} µs CPU/msg"
                )
    print_table(results)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = a.json or os.path.join(c.HERE, "results", f"ceiling-{stamp}.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    meta = {"count": a.count, "size": a.size, "runs": a.runs, "cpus": os.cpu_count(),
            "loadavg": os.getloadavg(), "calibrate_ms": c.calibrate()}  # fmt: skip
    with open(path, "w") as f:
        json.dump({"meta": meta, "results": results}, f, indent=1)
    print(f"saved {path}")


if __name__ == "__main__":
    main()
