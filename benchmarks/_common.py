"""Helpers shared by the benchmark scripts: the local cluster, pre-filling, child processes.

Child processes talk to their parent through stdout lines: ``READY`` once subscribed or
connected, ``PROGRESS <n>`` now and then, and one final ``RESULT <json>``. The parent
reaps them with ``os.wait4`` to get their peak RSS and total CPU time.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio

from aiorocket.message import Message
from aiorocket.producer import Producer
from aiorocket.testing.broker import LocalRocketMQ

HERE = os.path.dirname(os.path.abspath(__file__))
STAMP = 8  # bytes of big-endian epoch microseconds at the start of a timed body


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def progress_bar(label: str, total: int) -> Iterator[Callable[[int], None]]:
    """A rich progress bar on stderr (only on a terminal); yields ``update(done)``."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn())  # fmt: skip
    with Progress(*columns, console=console, disable=not console.is_terminal) as bar:
        task = bar.add_task(label, total=total)
        yield lambda done: bar.update(task, completed=done)


def now_us() -> int:
    return time.time_ns() // 1000


def stamped(payload: bytes) -> bytes:
    return now_us().to_bytes(STAMP, "big") + payload[STAMP:]


def sent_us(body: bytes) -> int:
    """The send time a :func:`stamped` body carries."""
    return int.from_bytes(body[:STAMP], "big")


def percentile(sorted_values: Sequence[float], p: float) -> float:
    if not sorted_values:
        return float("nan")
    index = min(len(sorted_values) - 1, max(0, round(p / 100 * len(sorted_values)) - 1))
    return float(sorted_values[index])


def rss_mb(pid: int | str = "self") -> float:
    """Current resident set size (VmRSS) of ``pid`` in MiB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def calibrate() -> float:
    """CPU milliseconds of a fixed pure-Python workload: how slow this machine is right now
    (noisy neighbours on 2 shared cores inflate every CPU figure by about this factor)."""
    cpu = time.process_time()
    for _ in range(5):
        d = {str(i): i for i in range(20_000)}
        json.loads(json.dumps(d))
        sum(i * i for i in range(50_000))
    return (time.process_time() - cpu) * 1000


#: what a 5.x broker logs for an END_TRANSACTION whose op offset found its in-memory
#: queue full: the end waited 100 ms (benchmarks/README.md, the Spark sink, round 3)
FORCED_END = "Force add remove op data"


def forced_ends(cluster: LocalRocketMQ) -> int:
    """How many ends the cluster's brokers have written alone after that wait. An
    exactly-once figure taken while this grows measures the brokers' stalled op queue
    (~120 ends/s a broker), not the client: compare it before and after a run."""
    total = 0
    for path in cluster.base_dir.glob("broker-*/logs/rocketmqlogs/transaction*.log"):
        with open(path, encoding="utf-8", errors="replace") as f:
            total += sum(FORCED_END in line for line in f)
    return total


def warn_forced(mode: str, forced: int) -> None:
    if forced:
        log(f"WARNING {mode}: the brokers wrote {forced:,} ends alone after a 100 ms wait "
            f"(their transaction op queue is stalled: benchmarks/README.md, the Spark sink, "
            f"round 3); restart the cluster's brokers before taking this figure")


def cluster() -> LocalRocketMQ:
    """The running local cluster, started (2 brokers) when none runs."""
    found = LocalRocketMQ.attach()
    if found is not None:
        return found
    log("no local RocketMQ running: starting one (2 brokers)")
    inst = LocalRocketMQ()
    inst.start(brokers=2)
    return inst


async def prefill(
    namesrv: str,
    topic: str,
    count: int,
    size: int,
    *,
    in_flight: int = 256,
    batch: int = 16,
    progress: Callable[[int], None] | None = None,
) -> float:
    """Send ``count`` messages of ``size`` bytes fast (batches of ``batch``); returns seconds.

    Each body starts with its send time (epoch microseconds), as for latency runs.
    """
    payload = os.urandom(size)
    sent = 0
    started = time.perf_counter()
    workers = max(1, min(64, in_flight // batch))
    async with Producer("bench_prefill", namesrv, max_in_flight=in_flight) as producer:

        async def worker(n: int) -> None:
            nonlocal sent
            while n > 0:
                k = min(batch, n)
                msgs = [Message(topic, stamped(payload)) for _ in range(k)]
                if k == 1:
                    await producer.send(msgs[0])
                else:
                    await producer.send_batch(msgs)
                n -= k
                sent += k

        async def report() -> None:
            while progress is not None:
                await anyio.sleep(0.25)
                progress(sent)

        async with anyio.create_task_group() as tg:
            tg.start_soon(report)
            async with anyio.create_task_group() as inner:
                share, extra = divmod(count, workers)
                for i in range(workers):
                    inner.start_soon(worker, share + (1 if i < extra else 0))
            tg.cancel_scope.cancel()
    if progress is not None:
        progress(sent)
    return time.perf_counter() - started


@dataclass
class Child:
    """A benchmark child process speaking the READY/PROGRESS/RESULT line protocol."""

    name: str
    argv: list[str]
    env: dict[str, str] | None = None
    progress_every: float = 5.0
    result: dict[str, Any] | None = None
    lines: list[str] = field(default_factory=list)
    ready: threading.Event = field(default_factory=threading.Event)
    proc: subprocess.Popen[str] | None = None
    maxrss_mb: float = float("nan")
    cpu_total: float = float("nan")
    returncode: int | None = None
    _reader: threading.Thread | None = None

    def start(self) -> Child:
        env = dict(os.environ, **(self.env or {}))
        self.proc = subprocess.Popen(
            self.argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        return self

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        shown = time.monotonic()
        for raw in self.proc.stdout:
            line = raw.rstrip("\n")
            if line == "READY":
                self.ready.set()
            elif line.startswith("RESULT "):
                self.result = json.loads(line[7:])
            elif line.startswith("PROGRESS "):
                if time.monotonic() - shown >= self.progress_every:
                    shown = time.monotonic()
                    log(f"  {self.name}: {int(line.split()[1]):,}")
            else:
                self.lines.append(line)
                del self.lines[:-50]

    def wait_ready(self, timeout: float = 120.0) -> None:
        if not self.ready.wait(timeout):
            self.kill()
            raise RuntimeError(f"{self.name} not ready in {timeout}s:\n" + self.tail())

    def wait(self, timeout: float | None = None) -> dict[str, Any]:
        """Reap the child (os.wait4: peak RSS, CPU) and return its RESULT."""
        assert self.proc is not None
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            pid, status, usage = os.wait4(self.proc.pid, os.WNOHANG)
            if pid:
                break
            if deadline is not None and time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"{self.name} did not finish in {timeout}s:\n" + self.tail())
            time.sleep(0.05)
        self.proc.returncode = self.returncode = os.waitstatus_to_exitcode(status)
        self.maxrss_mb = usage.ru_maxrss / 1024
        self.cpu_total = usage.ru_utime + usage.ru_stime
        if self._reader is not None:
            self._reader.join(5)
        if self.result is None:
            raise RuntimeError(
                f"{self.name} exited ({self.returncode}) without RESULT:\n" + self.tail()
            )
        return self.result

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()

    def tail(self) -> str:
        return "\n".join(self.lines[-20:])


def emit_result(data: dict[str, Any]) -> None:
    print("RESULT " + json.dumps(data), flush=True)


def emit(line: str) -> None:
    if line == "READY":
        settle_heap()
    print(line, flush=True)


def settle_heap() -> None:
    """Start measuring with the start-up heap collected and frozen (``gc.freeze()``).

    A process's first full collection scans every object its imports created: 10-20 ms
    with the interpreter stopped, once, a few seconds into a run. A long-running service
    has that behind it; a latency-sensitive one freezes its start-up heap as here (the
    Python docs' recipe, see docs/consumer.md). Every Python child, the official
    client's included, does this when it reports READY.
    """
    import gc

    gc.collect()
    gc.freeze()
    # opt-in (a tuning measured apart, never in the default figures): "a,b,c" sets the
    # collector's thresholds, "off" disables automatic collection
    tune = os.environ.get("BENCH_GC", "")
    if tune == "off":
        gc.disable()
    elif tune:
        gc.set_threshold(*(int(x) for x in tune.split(",")))
