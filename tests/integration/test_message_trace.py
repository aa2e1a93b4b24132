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
from collections.abc import Callable, Collection, Iterator
from typing import Any

import anyio
import pytest

from aiorocket._trace import TRACE_TOPIC
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
def traced(rocketmq: LocalRocketMQ) -> Iterator[LocalRocketMQ]:
    """A cluster with RMQ_SYS_TRACE_TOPIC: the shared one when it has it (the harness
    sets traceTopicEnable since issue 42), else one broker of its own (no Proxy)."""
    if anyio.run(rocketmq.route, TRACE_TOPIC) is not None:
        yield rocketmq
        return
    yield from throwaway_cluster(
        "trace", brokers=1, proxy=False, broker_props={"traceTopicEnable": True}
    )


async def trace_of(
    namesrv: str, msg_id: str, topic: str, wanted: set[str], groups: Collection[str] = ()
) -> list[dict[str, str]]:
    """The trace records of ``msg_id`` once every type in ``wanted`` is there, and a
    SubAfter of each consumer group in ``groups`` (the trace messages are sent in the
    background, about a second after the fact)."""
    records: list[dict[str, str]] = []
    async with Admin(namesrv) as admin:

        async def complete() -> bool:
            nonlocal records
            records = await admin.message_trace(msg_id, topic)
            done = {r["group"] for r in records if r["type"] == "SubAfter"}
            return wanted <= {r["type"] for r in records} and set(groups) <= done

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


def _java() -> list[str]:
    from .test_pop_java_interop import _java_command

    return _java_command(_rocketmq_version())


def _rocketmq_version() -> str:
    from aiorocket.testing.broker import LocalRocketMQ

    shared = LocalRocketMQ.attach()
    assert shared is not None
    return shared.version


async def _run_java(*args: str, trace_topic: str) -> str:
    """benchmarks/java's program with the Java client's trace on (enableMsgTrace)."""
    import os
    import subprocess

    env = dict(os.environ, BENCH_TRACE_TOPIC=trace_topic)
    argv = [*_java(), *args]

    def run() -> str:
        proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=180)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return proc.stdout

    return await anyio.to_thread.run_sync(run)


def _shown(out: str) -> tuple[list[str], list[str]]:
    """mqadmin queryMsgTraceById's Pub line and first Sub line, split."""
    lines = [line.split() for line in out.splitlines()]
    pub = next((x for x in lines if x[:1] == ["Pub"]), [])
    sub = next((x for x in lines if x[:1] == ["Sub"]), [])
    return pub, sub


async def test_traces_next_to_the_java_clients_enable_msg_trace(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    """Java produces, aiorocket consumes; aiorocket produces, Java consumes: mqadmin
    shows both sides of each in one trace topic (the user's: the shared broker has no
    RMQ_SYS_TRACE_TOPIC). Two Java runs and two mqadmin runs: ~30 s."""
    topic, topic2, trace_topic = unique_name("tj"), unique_name("tj2"), unique_name("tjtrace")
    group, java_group = unique_name("g"), unique_name("gj")
    for name in (topic, topic2, trace_topic):
        await rocketmq.create_topic(name, queues=1)
    namesrv = rocketmq.namesrv_addr
    # Java -> aiorocket
    out = await _run_java("one", namesrv, topic, "trace-java-producer", "k1",
                          trace_topic=trace_topic)  # fmt: skip
    java_id = next(line[5:] for line in out.splitlines() if line.startswith("SENT "))
    await consume_one(namesrv, topic, group, trace_topic=trace_topic)
    await trace_of(namesrv, java_id, trace_topic, {"Pub", "SubAfter"})
    shown = await anyio.to_thread.run_sync(
        mqadmin, rocketmq, "queryMsgTraceById", "-i", java_id, "-t", trace_topic
    )
    pub, sub = _shown(shown)
    assert pub[1:2] == ["trace-java-producer"] and sub[1:2] == [group], shown
    # aiorocket -> Java
    async with Producer("trace-py-producer", namesrv, trace=True,
                        trace_topic=trace_topic) as producer:  # fmt: skip
        sent = await producer.send(Message(topic2, b"py", keys=["k2"]))
    # one message in its own topic: the Java consumer ends once it has it
    await _run_java("consume", namesrv, topic2, java_group, "1", "3", "0", trace_topic=trace_topic)
    await trace_of(namesrv, sent.msg_id, trace_topic, {"Pub", "SubAfter"})
    shown = await anyio.to_thread.run_sync(
        mqadmin, rocketmq, "queryMsgTraceById", "-i", sent.msg_id, "-t", trace_topic
    )
    pub, sub = _shown(shown)
    assert pub[1:2] == ["trace-py-producer"] and sub[1:2] == [java_group], shown
    assert sub[-1] == "success", shown


async def test_traces_over_the_proxy(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    """Producer and consumer over gRPC write the same records, to a topic of the user's
    (the Proxy refuses RMQ_SYS_TRACE_TOPIC, a system topic); mqadmin reads them. Another
    group consumes the message with ``async for`` over remoting: its Sub line is there
    too (before: an ``async for`` consumer wrote no consume-side record)."""
    topic, trace_topic, group = unique_name("tg"), unique_name("tgtrace"), unique_name("g")
    loop_group = unique_name("gi")
    await rocketmq.create_topic(topic, queues=1)
    await rocketmq.create_topic(trace_topic, queues=1)
    await rocketmq.create_group(group)
    proxy = rocketmq.proxy_grpc
    async with Producer("trace-grpc-producer", proxy=proxy, trace=True,
                        trace_topic=trace_topic) as producer:  # fmt: skip
        sent = await producer.send(Message(topic, b"via proxy", keys=["k3"]))
    got = anyio.Event()

    async def handle(msg: ConsumerMessage) -> None:
        got.set()

    consumer = Consumer(group, proxy=proxy, handler=handle, trace=True, trace_topic=trace_topic)
    consumer.subscribe(topic)
    async with consumer:
        with anyio.fail_after(30):
            await got.wait()
    looping = Consumer(loop_group, rocketmq.namesrv_addr, trace=True, trace_topic=trace_topic,
                       consume_from_where=ConsumeFromWhere.FIRST_OFFSET, **FAST)  # fmt: skip
    looping.subscribe(topic)
    async with looping:
        with anyio.fail_after(30):
            async for msg in looping:
                async with msg:  # the topic's one message, acked as the block ends
                    pass
                break
    records = await trace_of(rocketmq.namesrv_addr, sent.msg_id, trace_topic,
                             {"Pub", "SubBefore", "SubAfter"},
                             groups={group, loop_group})  # fmt: skip
    assert {r["group"] for r in records if r["type"] != "Pub"} == {group, loop_group}
    befores = {r["group"]: r for r in records if r["type"] == "SubBefore"}
    after = next(r for r in records if r["type"] == "SubAfter" and r["group"] == loop_group)
    assert after["request_id"] == befores[loop_group]["request_id"]
    assert (after["success"], after["context_code"]) == ("true", "0")
    shown = await anyio.to_thread.run_sync(
        mqadmin, rocketmq, "queryMsgTraceById", "-i", sent.msg_id, "-t", trace_topic
    )
    pub, _ = _shown(shown)
    assert pub[1:2] == ["trace-grpc-producer"], shown
    subs = {x[1]: x[-1] for x in (line.split() for line in shown.splitlines()) if x[:1] == ["Sub"]}
    assert subs == {group: "success", loop_group: "success"}, shown


async def test_a_missing_trace_topic_fails_no_send_and_no_handler_call(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    """A trace topic that does not exist: every trace send fails, is counted, and the
    sends, the handler calls and the closes go on as without trace."""
    topic, group = unique_name("tmiss"), unique_name("g")
    missing = unique_name("nosuchtrace")
    await rocketmq.create_topic(topic, queues=1)
    with anyio.fail_after(20):
        async with Producer("trace-missing", rocketmq.namesrv_addr, trace=True,
                            trace_topic=missing) as producer:  # fmt: skip
            for i in range(3):
                await producer.send(Message(topic, b"m%d" % i))
        await consume_one(rocketmq.namesrv_addr, topic, group, trace_topic=missing)
    assert producer.tracer is not None
    assert producer.tracer.failed == 3 and producer.tracer.sent == 0


async def test_a_transaction_and_a_timed_out_handler_call_are_traced(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    """The half message's Pub (type Trans_Msg_Half) and its EndTransaction (COMMIT),
    and a handler call the consume timeout cuts: its SubAfter says TIME_OUT (code 1)."""
    from aiorocket.producer import TransactionState

    topic, trace_topic, group = unique_name("ttx"), unique_name("ttxtrace"), unique_name("g")
    await rocketmq.create_topic(topic, queues=1)
    await rocketmq.create_topic(trace_topic, queues=1)
    namesrv = rocketmq.namesrv_addr

    async def commit(msg: Message, result: object) -> TransactionState:
        return TransactionState.COMMIT

    async with Producer("trace-tx", namesrv, trace=True, trace_topic=trace_topic) as producer:
        done = await producer.send_in_transaction(Message(topic, b"tx", keys=["k4"]), commit)
    slow = anyio.Event()

    async def too_slow(msg: ConsumerMessage) -> None:
        if not slow.is_set():
            slow.set()
            await anyio.sleep_forever()  # cut by the consume timeout, then retried

    consumer = Consumer(group, namesrv, handler=too_slow, trace=True, trace_topic=trace_topic,
                        consume_timeout=0.5, consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
                        **FAST)  # fmt: skip
    consumer.subscribe(topic)
    async with consumer:
        with anyio.fail_after(30):
            await slow.wait()
        records = await trace_of(namesrv, done.msg_id, trace_topic,
                                 {"Pub", "EndTransaction", "SubAfter"})  # fmt: skip
    pub = next(r for r in records if r["type"] == "Pub")
    end = next(r for r in records if r["type"] == "EndTransaction")
    assert pub["msg_type"] == "1" and end["transaction_state"] == "COMMIT_MESSAGE"
    after = next(r for r in records if r["type"] == "SubAfter")
    assert (after["success"], after["context_code"]) == ("false", "1")
