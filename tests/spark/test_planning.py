"""What the data source's planning imports, in a process of its own as Spark plans.

Spark makes the driver's planning calls (``schema()``; ``reader()`` and its
``partitions()``; ``streamReader()``, its offsets and partitions; ``writer()``,
``streamWriter()``; a stream writer's ``commit``) in short-lived Python processes that
unpickle the data source, so each imports ``aiorocket.spark`` afresh: a start of a
streaming query runs several of them one after another (Spark's lookup of ``pyspark_*``
sources, ``create_data_source``, the stream reader's runner, the writer, the commit).
pyarrow (with numpy) and the producer, imported there for type hints and for the
executors' work, were 0.35-0.5 s of the 0.9-1.0 s of CPU such a process spent on the
connector. Here the same calls run in a fresh interpreter against the real cluster,
and the modules that process loaded are checked.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pyspark
import pytest
from pyspark.sql import SparkSession

from tests.spark.conftest import Filled
from tests.spark.jvm import DRIVER_JAVA_OPTIONS

pytestmark = pytest.mark.integration

_ROOT = str(Path(__file__).resolve().parents[2])

PLAN = """
import json, sys
from pyspark.sql.datasource import CaseInsensitiveDict
from pyspark.sql.types import BinaryType, StructField, StructType

from aiorocket.spark.source import RocketMQDataSource
from aiorocket.spark.sink import SinkCommit

namesrv, topic, ckpt = sys.argv[1:4]


def source(**options):
    return RocketMQDataSource(options=CaseInsensitiveDict(options))


read = source(nameServer=namesrv, subscribe=topic)
schema = read.schema()
batch = read.reader(schema).partitions()
stream = source(nameServer=namesrv, subscribe=topic, startingOffsets="earliest")
reader = stream.streamReader(schema)
start = reader.initialOffset()
end = reader.latestOffset(start, reader.getDefaultReadLimit())
micro = reader.partitions(start, end)
rows = StructType([StructField("body", BinaryType())])
sink = source(nameServer=namesrv, topic=topic)
sink.writer(rows, False)
sink.streamWriter(rows, False).commit([SinkCommit(0, 1)], 0)
eos = source(nameServer=namesrv, topic=topic, deliveryGuarantee="exactly-once",
             checkpointLocation=ckpt)
eos.streamWriter(rows, False)
heavy = ("pyarrow", "numpy", "aiorocket.producer.producer", "aiorocket.spark._txn")
print(json.dumps({"batch": len(batch), "micro": len(micro),
                  "loaded": [m for m in heavy if m in sys.modules]}))
"""


def test_planning_imports_neither_pyarrow_nor_the_producer(
    make_topic: Callable[..., Filled], tmp_path: Path
) -> None:
    filled = make_topic(8)  # 2 queues on each broker
    proc = subprocess.run(
        [sys.executable, "-c", PLAN, filled.namesrv, filled.topic, str(tmp_path / "ckpt")],
        capture_output=True, text=True, cwd=_ROOT, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.splitlines()[-1])
    assert (result["batch"], result["micro"]) == (4, 4)  # the calls did plan every queue
    assert result["loaded"] == []


def test_python_workers_import_pyspark_from_site_packages(spark: SparkSession) -> None:
    """Spark's Python processes (here an executor's worker) run the session's launcher
    (tests/spark/worker_python.py): pyspark from site-packages and its compiled files,
    not from Spark's zip (compiled again by every process Spark started)."""

    def where(_: object) -> str:
        import pyspark

        return pyspark.__file__ or ""

    (path,) = spark.sparkContext.parallelize([0], 1).map(where).collect()
    assert ".zip" not in path
    assert Path(path).resolve().parent == Path(pyspark.__file__).resolve().parent


def test_the_driver_jvm_runs_with_the_tests_java_options(spark: SparkSession) -> None:
    """The session's JVM got ``DRIVER_JAVA_OPTIONS`` (tests/spark/jvm.py: C1 only)."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    args = list(jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments())
    assert set(DRIVER_JAVA_OPTIONS.split()) <= set(args)
