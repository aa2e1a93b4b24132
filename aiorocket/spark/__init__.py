"""A ``rocketmq`` data source and sink for PySpark (Python Data Source API, pyspark>=4.2).

Install with the ``spark`` extra. Importing this package imports pyspark; nothing else
in aiorocket does. pyarrow is only looked for here (a missing one named at import, as
pyspark is): Spark's planner processes import this package and never need pyarrow, the
executors that read or write import it where they use it.

```python
from aiorocket.spark import register
register(spark)
df = (spark.read.format("rocketmq").option("nameServer", "127.0.0.1:9876")
      .option("subscribe", "orders").load())
```

"""

from __future__ import annotations

from importlib.util import find_spec
from typing import Any

from aiorocket._extras import needs_extra

with needs_extra("spark", "aiorocket.spark (the PySpark data source and sink)"):
    if find_spec("pyarrow") is None:
        raise ModuleNotFoundError("No module named 'pyarrow'", name="pyarrow")
    import pyspark  # noqa: F401

from aiorocket.spark.source import RocketMQDataSource


def register(spark: Any) -> None:
    """Register the ``rocketmq`` format with ``spark`` (a SparkSession).

    Not needed when the package is installed: Spark finds ``pyspark_rocketmq`` itself.
    """
    spark.dataSource.register(RocketMQDataSource)


__all__ = ["RocketMQDataSource", "register"]
