"""The interpreter Spark's Python workers run in the tests (``PYSPARK_PYTHON``).

Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` and py4j's zip first on the
``PYTHONPATH`` of every Python process it starts. A zip holds no compiled modules and
zipimport writes none, so each such process compiled the pyspark it imports again:
a stream reader's runner (``python_streaming_source_runner``, one for every start of a
streaming query) spent 1.1-1.2 s of CPU, 0.5-0.6 s with pyspark compiled; a worker
daemon 0.7 s, 0.2 s. tests/spark starts 63 of them (benchmarks/README.md, "The test
command's length"). With pip's pyspark, ``SPARK_HOME`` is the installed package itself
and its zip holds the same files: :func:`worker_python` writes a launcher that drops
the two zips from ``PYTHONPATH`` and runs this interpreter, which imports that package,
the same pyspark, from site-packages and its ``.pyc``. Against any other Spark
(``SPARK_HOME`` set elsewhere) the workers run this interpreter unchanged.
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

# Builtins only (no fork): ``exec`` keeps the worker's pid (tests/spark/eos_driver.py
# kills a worker by the pid it wrote).
_LAUNCHER = """#!/bin/sh
# PYSPARK_PYTHON of aiorocket's Spark tests: tests/spark/worker_python.py
set -f
path=""
IFS=:
for entry in ${{PYTHONPATH:-}}; do
    case "$entry" in
        {zip}|{py4j}) ;;
        *) path="$path${{path:+:}}$entry" ;;
    esac
done
unset IFS
PYTHONPATH=$path
export PYTHONPATH
exec {python} "$@"
"""


def spark_home_is_pip_pyspark() -> bool:
    """Whether Spark runs from the installed pyspark package (``SPARK_HOME`` unset, or
    set to that package): then its zip and site-packages hold the same pyspark."""
    import pyspark

    package = Path(pyspark.__file__).resolve().parent
    home = os.environ.get("SPARK_HOME")
    return home is None or Path(home).resolve() == package


def worker_python(directory: Path) -> str:
    """The ``PYSPARK_PYTHON`` for a Spark session of this interpreter: a launcher written
    to ``directory`` (see the module's docstring), or ``sys.executable``."""
    if not spark_home_is_pip_pyspark() or sys.platform == "win32":
        return sys.executable
    import py4j.version

    # The entries Spark writes (``$SPARK_HOME/python/lib/...``, $SPARK_HOME as pyspark's
    # launcher found it, perhaps through a symlink: matched by their ends); py4j's zip
    # only of the py4j installed here (pyspark pins it: the same files).
    launcher = _LAUNCHER.format(
        zip="*/pyspark/python/lib/pyspark.zip",
        py4j=f"*/pyspark/python/lib/py4j-{py4j.version.__version__}-src.zip",
        python=shlex.quote(sys.executable),
    )
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "spark-worker-python"
    path.write_text(launcher)
    path.chmod(0o755)
    return str(path)
