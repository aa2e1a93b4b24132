"""Spark's auto-registration hook: a top-level ``pyspark_*`` module with ``DefaultSource``."""

from aiorocket.spark.source import RocketMQDataSource as DefaultSource

__all__ = ["DefaultSource"]
