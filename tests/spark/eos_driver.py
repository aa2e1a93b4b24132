"""A Spark driver process for crash tests of the exactly-once sink, and its controller.

``python -m tests.spark.eos_driver NAMESRV SOURCE TARGET WORKDIR PER_BATCH [PROXY]`` runs
one streaming query (``local[2]``) from topic SOURCE into topic TARGET with
``deliveryGuarantee=exactly-once``, Trigger.AvailableNow and ``maxOffsetsPerTrigger``
PER_BATCH, checkpointing in ``WORKDIR/ckpt``; with PROXY the sink writes through that
Proxy (gRPC). Its sink is the connector's, with marker files written to
``WORKDIR/markers`` at these points of each micro-batch ``b``:

* ``send:b``: a task has stored all its rows as half messages, not yet reported success;
* ``tasks-done:b``: every task succeeded, the driver's commit has not started;
* ``recorded:b``: the driver wrote the commit record, no half message is ended yet;
* ``ended:b``: the driver's commit is through with every row of the batch (over
  remoting its ends were confirmed, through a Proxy its COMMIT answers taken) and has
  not marked the record done (``<b>.done``): the replay finds a record not done and
  waits for rows that are all there already (through a Proxy: for the broker to ask
  about rows it noted as answered, or ``UNCERTAIN_WAIT``);
* ``answered:b`` (PROXY only): the driver noted its first COMMIT answers to check-backs
  of the batch, and has not sent them.

When ``WORKDIR/markers/target`` names the point reached, the driver pauses there so that
the controller (:class:`Run`) can SIGKILL its whole process group at that point, or (at
a ``send`` point) only the Python worker running that task; it then writes the point
to ``WORKDIR/markers/released``, which ends the other tasks' pauses at that point and
lets Spark's retry of the killed task run through it. Nothing else ends a pause early:
a Python process of a killed driver (Spark's Python workers are a process group of
their own, which its daemon stops once the JVM is gone) must not go on with the batch
when the next driver's ``target`` replaces the file it was paused by.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio

from tests.spark.jvm import DRIVER_JAVA_OPTIONS
from tests.spark.worker_python import worker_python

#: at most this long a driver waits at the target point: it is killed, or released by the
#: controller (``released``), long before
PAUSE = 30.0


def _marker_dir() -> Path:
    return Path(os.environ["EOS_MARKERS"])


def mark(point: str) -> None:
    """Record reaching ``point`` (the file holds this process's pid); pause there if it is
    the controller's target."""
    markers = _marker_dir()
    (markers / point).write_text(str(os.getpid()))
    if not _names(markers / "target", point):
        return
    deadline = time.monotonic() + PAUSE
    # Held until killed or released. A whole 30 s pause here (the other task of a batch
    # whose worker was killed, then Spark's retry of that task, each paused in full) was
    # ~35 s of each worker-kill run of tests/spark/test_exactly_once.py.
    while not _names(markers / "released", point) and time.monotonic() < deadline:
        time.sleep(0.05)


def _names(path: Path, point: str) -> bool:
    """Whether the controller's file ``path`` is there and names ``point``."""
    try:
        return path.read_text() == point
    except FileNotFoundError:
        return False


def _hook_answers() -> None:
    """Mark ``answered:<batch>`` once the driver noted its first COMMIT answers of a batch
    (over gRPC), before it sends them."""
    from aiorocket.spark import _txn

    note = _txn.TxnLog.note_answered
    if getattr(note, "hooked", False):
        return

    def noted(log: Any, ids: dict[int, list[str]]) -> None:
        note(log, ids)
        for batch in ids:
            if not (_marker_dir() / f"answered:{batch}").exists():
                mark(f"answered:{batch}")

    noted.hooked = True  # type: ignore[attr-defined]
    _txn.TxnLog.note_answered = noted  # type: ignore[method-assign]


def child(namesrv: str, source: str, target: str, workdir: str, per_batch: int,
          proxy: str | None = None) -> None:  # fmt: skip
    os.environ["PYSPARK_PYTHON"] = worker_python(Path(workdir))
    os.environ["EOS_MARKERS"] = os.path.join(workdir, "markers")
    from pyspark import TaskContext
    from pyspark.sql import SparkSession

    from aiorocket.spark.sink import RocketMQStreamWriter
    from aiorocket.spark.source import RocketMQDataSource

    class HookedWriter(RocketMQStreamWriter):
        def write(self, iterator: Iterator[Any]) -> Any:
            out = super().write(iterator)
            ctx = TaskContext.get()
            mark(f"send:{ctx.getLocalProperty('streaming.sql.batchId') if ctx else '?'}")
            return out

        def commit(self, messages: list[Any], batchId: int) -> None:
            # Imported here, not captured from child(): Spark's planner processes unpickle
            # these classes and would import the producer with _txn, as the connector's
            # own planning does not (tests/spark/test_planning.py).
            from aiorocket.spark import _txn

            mark(f"tasks-done:{batchId}")
            _hook_answers()  # Spark runs a writer's commit in a Python process of its own
            write = _txn.TxnLog.write

            def hooked(log: Any, batch: int, txns: Any, query: str | None = None) -> bool:
                done = write(log, batch, txns, query)
                if done:
                    mark(f"recorded:{batch}")
                return done

            def done(log: Any, batch: int) -> None:
                mark(f"ended:{batch}")
                mark_done(log, batch)

            mark_done = _txn.TxnLog.mark_done
            _txn.TxnLog.write = hooked  # type: ignore[method-assign]
            _txn.TxnLog.mark_done = done  # type: ignore[method-assign]
            try:
                super().commit(messages, batchId)
            finally:
                _txn.TxnLog.write = write  # type: ignore[method-assign]
                _txn.TxnLog.mark_done = mark_done  # type: ignore[method-assign]

    class HookedSource(RocketMQDataSource):
        @classmethod
        def name(cls) -> str:
            return "rocketmq_hooked"

        def streamWriter(self, schema: Any, overwrite: bool) -> Any:
            from aiorocket.spark._options import parse_write

            return HookedWriter(parse_write(self.options), schema)

    spark = (
        # local[2, 3]: a failed task is tried up to 3 times (a killed Python worker)
        SparkSession.builder.master("local[2,3]").appName("eos-crash")
        .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.extraJavaOptions", DRIVER_JAVA_OPTIONS).getOrCreate()
    )  # fmt: skip
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(RocketMQDataSource)
    spark.dataSource.register(HookedSource)
    df = (
        spark.readStream.format("rocketmq").option("nameServer", namesrv)
        .option("subscribe", source).option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(per_batch)).load().select("body", "properties")
    )  # fmt: skip
    via = ("proxy", proxy) if proxy else ("nameServer", namesrv)
    query = (
        df.writeStream.format("rocketmq_hooked").option(*via)
        .option("topic", target).option("deliveryGuarantee", "exactly-once")
        .option("transactionTimeoutSeconds", "6")
        .option("transactionCheckIntervalSeconds", check_interval(namesrv))
        .option("checkpointLocation", os.path.join(workdir, "ckpt"))
        .trigger(availableNow=True).start()
    )  # fmt: skip
    query.awaitTermination()
    if query.exception() is not None:
        raise SystemExit(f"query failed: {query.exception()}")
    spark.stop()


class Run:
    """Launches driver processes on one checkpoint and kills them at chosen points."""

    def __init__(self, namesrv: str, source: str, target: str, workdir: Path,
                 per_batch: int, proxy: str | None = None) -> None:  # fmt: skip
        self.argv = [sys.executable, "-m", "tests.spark.eos_driver", namesrv, source, target,
                     str(workdir), str(per_batch), *([proxy] if proxy else [])]  # fmt: skip
        self.markers = workdir / "markers"
        self.workdir = workdir
        self.launches = 0

    def _start(self, target: str | None) -> subprocess.Popen[bytes]:
        self.markers.mkdir(parents=True, exist_ok=True)
        for f in self.markers.iterdir():
            f.unlink()
        if target is not None:
            (self.markers / "target").write_text(target)
        self.launches += 1
        out = open(self.workdir / f"driver-{self.launches}.log", "wb")  # noqa: SIM115
        # Its own process group: the JVM and Spark's Python workers die with it.
        return subprocess.Popen(self.argv, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True, cwd=_ROOT)  # fmt: skip

    def kill_at(self, point: str, timeout: float = 300) -> bool:
        """Run a driver until it reaches ``point``, then SIGKILL it (True), or False if
        it ended before getting there."""
        proc = self._start(point)
        deadline = time.monotonic() + timeout
        try:
            while not (self.markers / point).exists():
                if proc.poll() is not None or time.monotonic() > deadline:
                    return False
                time.sleep(0.05)
            return True
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

    def finish(self, kill_worker_at: str | None = None, timeout: float = 600) -> bool:
        """Run a driver until its AvailableNow query ends; it must end cleanly. With
        ``kill_worker_at`` (a ``send`` point), SIGKILL the Python worker of the task that
        reaches it (executor loss: Spark retries the task); True if one was killed."""
        proc = self._start(kill_worker_at)
        killed = False
        try:
            if kill_worker_at is not None:
                marker = self.markers / kill_worker_at
                while not marker.exists() and proc.poll() is None:
                    time.sleep(0.05)
                if proc.poll() is None:
                    time.sleep(0.05)  # the pid is written right after the file is created
                    os.kill(int(marker.read_text()), signal.SIGKILL)
                    killed = True
                    # Released: the batch's other tasks go on, and the killed task's retry
                    # passes this point instead of pausing there in turn.
                    (self.markers / "released").write_text(kill_worker_at)
            code = proc.wait(timeout)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        log = (self.workdir / f"driver-{self.launches}.log").read_text(errors="replace")
        assert code == 0, f"driver exited with {code}:\n{log[-4000:]}"
        return killed


_ROOT = str(Path(__file__).resolve().parents[2])


def check_interval(namesrv: str) -> str:
    """The brokers' ``transactionCheckInterval`` in whole seconds (the longest; at least
    3), for the sink's option ``transactionCheckIntervalSeconds``: the test cluster's is
    shorter than the default, and an option naming a shorter one than the brokers' would
    make a replay stop waiting for rows the broker has yet to ask about."""
    from aiorocket.admin import Admin

    async def run() -> int:
        async with Admin(namesrv) as admin:
            ms = [int((await admin.broker_config(name))["transactionCheckInterval"])
                  for name in await admin.masters()]  # fmt: skip
        return max(3, -(-max(ms) // 1000))

    return str(anyio.run(run))


def stored(namesrv: str, topic: str) -> list[bytes]:
    """The body of every message stored in ``topic`` (:func:`stored_messages`)."""
    return [m.body for m in stored_messages(namesrv, topic)]


def stored_messages(namesrv: str, topic: str) -> list[Any]:
    """Every message stored in ``topic`` (each queue from its min to max offset), read
    with the connector's own pulls."""
    from aiorocket.client.instance import ClientInstance
    from aiorocket.spark import _broker
    from aiorocket.spark._options import Filter, Subscription

    async def run() -> list[Any]:
        out: list[Any] = []
        async with ClientInstance(namesrv) as client:
            queues = await _broker.resolve_queues(client, Subscription(topics=(topic,)))
            lows = await _broker.min_offsets(client, queues)
            highs = await _broker.max_offsets(client, queues)
            for mq in queues:
                seg = await _broker.pull_segment(
                    client, "eos-check", mq, lows[mq], highs[mq], Filter(),
                    fail_on_data_loss=True, batch=32,
                )  # fmt: skip
                out.extend(seg.messages)
        return out

    return anyio.run(run)


if __name__ == "__main__":
    child(*sys.argv[1:5], int(sys.argv[5]), *sys.argv[6:7])
