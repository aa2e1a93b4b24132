"""The Spark tests' ``PYSPARK_PYTHON`` (tests/spark/worker_python.py): a process started
with Spark's ``PYTHONPATH`` imports pyspark from site-packages, not from Spark's zip."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pyspark = pytest.importorskip("pyspark")
py4j_version = pytest.importorskip("py4j.version")

from tests.spark.worker_python import worker_python  # noqa: E402

_PACKAGE = Path(pyspark.__file__).resolve().parent
_LIB = _PACKAGE / "python" / "lib"
_PY4J_ZIP = _LIB / f"py4j-{py4j_version.__version__}-src.zip"
_REPORT = (
    "import json, os, sys, pyspark, py4j;"
    "print(json.dumps([os.getpid(), os.environ.get('PYTHONPATH'), pyspark.__file__,"
    " py4j.__file__, sys.path]))"
)


def _spark_env(extra: str) -> dict[str, str]:
    """The environment Spark gives a Python worker: its zips first (with pip's pyspark,
    ``SPARK_HOME`` is the package), then the other entries."""
    env = {k: v for k, v in os.environ.items() if k != "SPARK_HOME"}
    env["PYTHONPATH"] = os.pathsep.join([str(_LIB / "pyspark.zip"), str(_PY4J_ZIP), extra])
    return env


def _run(python: str, env: dict[str, str]) -> tuple[int, list[object]]:
    proc = subprocess.Popen([python, "-c", _REPORT], env=env, stdout=subprocess.PIPE, text=True)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0
    return proc.pid, json.loads(out)


@pytest.mark.skipif(not (_LIB / "pyspark.zip").exists(), reason="pyspark without its zip")
def test_the_workers_import_pyspark_from_site_packages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SPARK_HOME", raising=False)
    extra = str(tmp_path / "elsewhere")
    env = _spark_env(extra)
    # As Spark starts them with this interpreter: pyspark and py4j from the zips.
    _, (_, _, spark_file, py4j_file, _) = _run(sys.executable, env)
    assert ".zip" in str(spark_file) and ".zip" in str(py4j_file)
    launcher = worker_python(tmp_path / "bin")
    assert launcher != sys.executable
    pid, (child_pid, pythonpath, spark_file, py4j_file, path) = _run(launcher, env)
    assert child_pid == pid  # exec'd: a worker killed by its pid is the interpreter
    assert pythonpath == extra and isinstance(path, list) and extra in path
    assert Path(str(spark_file)).resolve().parent == _PACKAGE  # from site-packages
    assert ".zip" not in str(py4j_file)


def test_another_spark_home_keeps_its_zip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Against a Spark other than the installed package the workers run this interpreter
    as they did (its zip holds that Spark's pyspark)."""
    monkeypatch.setenv("SPARK_HOME", str(tmp_path / "spark-4.x-bin"))
    assert worker_python(tmp_path / "bin") == sys.executable
