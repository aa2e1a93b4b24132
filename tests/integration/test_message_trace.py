"""Message trace (``trace=True``) as the operators' tools read it: ``mqadmin
queryMsgTraceById`` (rocketmq-tools, the broker's own jars) and ``aiorocket message
trace`` find the records aiorocket writes, in the default ``RMQ_SYS_TRACE_TOPIC`` (a
broker of its own with ``traceTopicEnable=true``: the shared one has no such topic, and
a system topic cannot be created by request), next to the Java client's
(``enableMsgTrace``) and through the Proxy (a topic of the user's: the Proxy refuses
system topics). Issue 42.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import anyio
import pytest

from aiorocket.admin import Admin
from aiorocket.consumer import ConsumeFromWhere, Consumer, ConsumerMessage
from aiorocket.message import Message
from aiorocket.producer import Producer
from aiorocket.testing.broker import LocalRocketMQ

from .cli_helpers import invoke
from .helpers import eventually, throwaway_cluster
from .test_operator_requests import FAST, mqadmin

pytestmark = [pytest.mark.anyio, pytest.mark.integration]


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def traced() -> Iterator[LocalRocketMQ]:
    """One broker that creates RMQ_SYS_TRACE_TOPIC (no Proxy: a lighter JVM)."""
    yield from throwaway_cluster(
        "trace", brokers=1, proxy=False, broker_props={"traceTopicEnable": True}
    )


async def trace_of(namesrv: str, msg_id: str, topic: str, wanted: set[str]) -> list[dict[str, str]]:
    """The trace records of ``msg_id`` once every type in ``wanted`` is there (the trace
    messages are sent in the background, about a second after the fact)."""
    records: list[dict[str, str]] = []
    async with Admin(namesrv) as admin:

        async def complete() -> bool:
            nonlocal records
            records = await admin.message_trace(msg_id, topic)
            return wanted <= {r["type"] for r in records}

        await eventually(complete, timeout=30, every=0.5)
    return records


async def consume_one(namesrv: str, topic: str, group: str, **settings: Any) -> None:
    settings.setdefault("consume_from_where", ConsumeFromWhere.FIRST_OFFSET)
    got = anyio.Event()

    async def handle(msg: ConsumerMessage) -> None:
        got.set()

    consumer = Consumer(group, namesrv, handler=handle, trace=True, **FAST, **settings)
    consumer.subscribe(topic)
    async with consumer:
        with anyio.fail_after(30):
            await got.wait()


async def test_mqadmin_shows_the_trace_of_a_message_aiorocket_produced_and_consumed(
    traced: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    topic, group = unique_name("trace"), unique_name("g")
    await traced.create_topic(topic, queues=2)
    async with Producer("trace-producer", traced.namesrv_addr, trace=True) as producer:
        sent = await producer.send(Message(topic, b"paid", tags="t", keys=["order-7"]))
    await consume_one(traced.namesrv_addr, topic, group)
    records = await trace_of(
        traced.namesrv_addr, sent.msg_id, "RMQ_SYS_TRACE_TOPIC", {"Pub", "SubBefore", "SubAfter"}
    )
    pub = next(r for r in records if r["type"] == "Pub")
    assert pub["group"] == "trace-producer" and pub["topic"] == topic
    assert pub["offset_msg_id"] == sent.offset_msg_id and pub["success"] == "true"
    assert pub["keys"] == "order-7" and pub["tags"] == "t"
    after = next(r for r in records if r["type"] == "SubAfter")
    assert after["group"] == group and after["success"] == "true" and after["context_code"] == "0"
    before = next(r for r in records if r["type"] == "SubBefore")
    assert before["request_id"] == after["request_id"] and before["retry_times"] == "0"
    # The Java tool decodes them by position: the producer and the consumer group, both
    # successes.
    shown = await anyio.to_thread.run_sync(mqadmin, traced, "queryMsgTraceById", "-i", sent.msg_id)
    lines = [line.split() for line in shown.splitlines()]
    assert next(x[:2] for x in lines if x[:1] == ["Pub"]) == ["Pub", "trace-producer"], shown
    sub = next(x for x in lines if x[:1] == ["Sub"])
    assert sub[1] == group and sub[-1] == "success", shown
    # and the command line
    result = await anyio.to_thread.run_sync(
        lambda: invoke(traced.namesrv_addr, "message", "trace", sent.msg_id, "--json")
    )
    assert {r["type"] for r in json.loads(result.output)} >= {"Pub", "SubBefore", "SubAfter"}
