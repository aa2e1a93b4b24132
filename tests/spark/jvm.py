"""The JVM options of the Spark tests' drivers (``spark.driver.extraJavaOptions``).

``-XX:TieredStopAtLevel=1``: the JIT's first tier (C1) only. A test's Spark runs briefly
on little data, and C2's compilations of Spark's hot paths were CPU it never earned
back: the session's JVM took 54.6 and 62.9 s of CPU over tests/spark/test_stream.py's
5 tests, 44.2 and 37.5 s with C1 only (alternating pairs, benchmarks/README.md, "The test
command's length"), on a 2-core machine where that CPU is the other tests' wall time.
Spark's behaviour does not depend on the JIT.
"""

from __future__ import annotations

DRIVER_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1"
