"""One local Spark (``local[2]``) for the whole test session, and topics filled once.

Spark's Python workers run ``PYSPARK_PYTHON``, not necessarily this interpreter: it is
set to this one (through the launcher of ``tests/spark/worker_python.py``, which has
them import pyspark compiled) so that they import this checkout's aiorocket and pyarrow.
The ``rocketmq`` format is registered by hand: Spark's own lookup (top-level
``pyspark_*`` modules) cannot see through an editable install's import hook.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import anyio
import pytest
from pyspark.sql import SparkSession

from aiorocket.client.instance import ClientInstance
from aiorocket.client.results import SendResult
from aiorocket.message import Message
from aiorocket.spark import register
from aiorocket.testing.broker import LocalRocketMQ
from tests.integration.helpers import send_many, wait_dispatched
from tests.spark.jvm import DRIVER_JAVA_OPTIONS
from tests.spark.worker_python import worker_python


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    os.environ["PYSPARK_PYTHON"] = worker_python(tmp_path_factory.mktemp("spark-python"))
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    session = (
        SparkSession.builder.master("local[2]")
        .appName("aiorocket-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.extraJavaOptions", DRIVER_JAVA_OPTIONS)
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    try:
        yield session
    finally:
        session.stop()


@dataclass
class Filled:
    """A topic on both brokers and what was sent to it."""

    namesrv: str
    topic: str
    sent: list[SendResult]
    messages: list[Message]
    #: store time (ms) strictly between the first and the second half of the messages.
    split_ms: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def reader(self, spark: SparkSession, **options: str) -> Any:
        r = spark.read.format("rocketmq").option("nameServer", self.namesrv)
        if not ({"subscribe", "assign", "subscribePattern"} & set(options)):
            r = r.option("subscribe", self.topic)
        for k, v in options.items():
            r = r.option(k, v)
        return r


def message(topic: str, i: int) -> Message:
    return Message(
        topic,
        f"body-{i}".encode(),
        tags="even" if i % 2 == 0 else "odd",
        keys=[f"key-{i}", f"alt-{i}"],
        properties={"n": str(i), "color": "red" if i % 3 == 0 else "blue"},
    )


async def fill(namesrv: str, topic: str, messages: list[Message]) -> list[SendResult]:
    async with ClientInstance(namesrv) as client:
        results = await send_many(client, topic, messages)
        await wait_dispatched(client, topic, results)
    return results


def create_and_fill(
    rocketmq: LocalRocketMQ, topic: str, count: int, *, queues: int = 2, split: bool = False
) -> Filled:
    """``count`` messages over ``queues`` queues on each broker; with ``split``, the two
    halves are stored at different milliseconds and ``split_ms`` lies between them."""
    msgs = [message(topic, i) for i in range(count)]
    anyio.run(partial(rocketmq.create_topic, topic, queues=queues))
    half = count // 2 if split else count
    filled = Filled(rocketmq.namesrv_addr, topic, anyio.run(fill, rocketmq.namesrv_addr, topic,
                    msgs[:half]), msgs)  # fmt: skip
    if split:
        # The store times of the first half are in the past now; the second half gets
        # later ones once the clock has passed ``split_ms``.
        filled.split_ms = int(time.time() * 1000) + 1
        while time.time() * 1000 <= filled.split_ms:
            time.sleep(0.001)
        filled.sent += anyio.run(fill, rocketmq.namesrv_addr, topic, msgs[half:])
    return filled


@pytest.fixture
def make_topic(rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]) -> Callable[..., Filled]:
    def make(count: int, **kw: Any) -> Filled:
        return create_and_fill(rocketmq, unique_name("spark"), count, **kw)

    return make
