"""OpenTelemetry through RocketMQService against the real broker, read with the SDK's
in-memory metric reader and span exporter: the counters and histograms match the
messages handled and failed, and each consumer span is a child of its producer span."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from aiorocket import Message
from aiorocket.admin import Admin
from aiorocket.consumer import ConsumeFromWhere, Consumer, ConsumerMessage
from aiorocket.integrations.health import consumer_health
from aiorocket.integrations.service import RocketMQService
from aiorocket.integrations.telemetry import DELAY_BUCKETS, DURATION_BUCKETS, Telemetry
from aiorocket.testing.broker import LocalRocketMQ

from .helpers import eventually

pytestmark = [pytest.mark.anyio, pytest.mark.integration]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _points(reader: InMemoryMetricReader) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    data = reader.get_metrics_data()
    for rm in data.resource_metrics if data else []:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                out.setdefault(metric.name, []).extend(metric.data.data_points)
    return out


def _ignore(msg: ConsumerMessage) -> None:
    return None


def _in_memory_telemetry() -> tuple[Telemetry, InMemoryMetricReader, InMemorySpanExporter]:
    """A Telemetry whose metrics and spans stay in memory, and where to read them."""
    reader = InMemoryMetricReader()
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    return Telemetry(MeterProvider(metric_readers=[reader]), tracer_provider), reader, exporter


def _total(points: list[Any], **attrs: str) -> int:
    """Sum of counter values (or histogram counts) of the points with ``attrs``."""
    total = 0
    for p in points:
        if all(p.attributes.get(k) == v for k, v in attrs.items()):
            total += p.value if hasattr(p, "value") else p.count
    return total


async def test_metrics_and_trace_context(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    topic, group = unique_name("orders"), unique_name("g")
    await rocketmq.create_topic(topic, queues=2)
    telemetry, reader, exporter = _in_memory_telemetry()
    service = RocketMQService(
        rocketmq.namesrv_addr, producer_group=unique_name("p"), telemetry=telemetry,
        lag_interval=0.2,
    )  # fmt: skip
    handled: list[bytes] = []
    all_handled = anyio.Event()

    # No retries: a failed message goes to the DLQ at once, so the counts are final.
    @service.subscriber(topic, group=group, consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
                        max_reconsume_times=0)  # fmt: skip
    async def handle(msg: ConsumerMessage) -> None:
        handled.append(msg.body)
        if len(handled) == 6:
            all_handled.set()
        if msg.body.startswith(b"bad"):
            raise ValueError("cannot process")

    async with service:
        sent = {}
        for body in [b"ok-1", b"ok-2", b"bad-1", b"ok-3", b"bad-2", b"ok-4"]:
            result = await service.producer.send(Message(topic, body))
            sent[result.msg_id] = body
        with anyio.fail_after(30):
            await all_handled.wait()
        await eventually(lambda: len(exporter.get_finished_spans()) == 12)
        points = _points(reader)
        gauges = {name: _total(points[name]) for name in
                  ("aiorocket.consumer.cached", "aiorocket.consumer.in_flight")}  # fmt: skip
        assert gauges["aiorocket.consumer.in_flight"] == 0

        def lag_points() -> list[Any]:
            points = _points(reader).get("aiorocket.consumer.lag", [])
            return [p for p in points if p.attributes["messaging.destination.name"] == topic]

        # One point per queue (2 on each broker), every one caught up.
        await eventually(lambda: len(lag_points()) == 4 and _total(lag_points()) == 0)
        mine_group = {"messaging.consumer.group.name": group}
        # the topic's 4 queues, all this member's (its retry queue is not counted)
        assert _total(_points(reader)["aiorocket.consumer.assigned_queues"], **mine_group) == 4

    mine = {"messaging.destination.name": topic}
    assert _total(points["messaging.client.sent.messages"], **mine) == 6
    send = {"messaging.operation.name": "send"}
    assert _total(points["messaging.client.operation.duration"], **mine, **send) == 6
    # Pull latency: one point per queue that pulls found messages in, a duration per pull
    # (at least one pull per queue brought messages; at most one per message).
    pulls = [p for p in points["messaging.client.operation.duration"]
             if p.attributes.get("messaging.operation.name") == "pull"
             and p.attributes["messaging.destination.name"] == topic]  # fmt: skip
    assert pulls and all(p.attributes["messaging.consumer.group.name"] == group for p in pulls)
    assert len(pulls) <= 4 and len(pulls) <= sum(p.count for p in pulls) <= 6
    assert all(0 <= p.sum < 30 for p in pulls)
    consumed = points["messaging.client.consumed.messages"]
    assert _total(consumed, **mine, **{"messaging.consumer.group.name": group}) == 6
    assert _total(consumed, **mine, **{"error.type": "ValueError"}) == 2
    assert _total(points["messaging.process.duration"], **mine) == 6
    assert _total(points["aiorocket.consumer.dead_lettered"], **mine) == 2
    assert _total(points.get("aiorocket.consumer.retried", []), **mine) == 0
    assert _total(points["aiorocket.message.delay"], **mine) == 6

    spans = exporter.get_finished_spans()
    producers = {s.attributes["messaging.message.id"]: s for s in spans
                 if s.kind is SpanKind.PRODUCER}  # fmt: skip
    consumers = [s for s in spans if s.kind is SpanKind.CONSUMER]
    assert set(producers) == set(sent) and len(consumers) == 6
    for span in consumers:
        producer = producers[span.attributes["messaging.message.id"]]
        assert span.parent is not None
        assert span.parent.span_id == producer.context.span_id
        assert span.context.trace_id == producer.context.trace_id
        assert span.name == f"process {topic}" and producer.name == f"send {topic}"
    failed = [s for s in consumers if not s.status.is_ok]
    assert len(failed) == 2


async def test_a_call_cut_by_the_close_is_no_failure_a_timed_out_one_is(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    """A handler cancelled by the close (past shutdown_timeout) leaves its message to be
    delivered again: not failed, not retried, not dead-lettered (the DLQ alert would fire
    on every deploy). One the consume timeout cancels is a failure, on its last attempt
    a dead letter."""
    topic = unique_name("cut")
    await rocketmq.create_topic(topic, queues=1)
    telemetry, reader, exporter = _in_memory_telemetry()
    service = RocketMQService(rocketmq.namesrv_addr, producer_group=unique_name("p"),
                              telemetry=telemetry)  # fmt: skip
    started = {b"timeout": anyio.Event(), b"cut": anyio.Event()}
    timed_out = anyio.Event()

    # The last attempt for both: a failure would be counted as dead-lettered.
    settings: dict[str, Any] = dict(consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
                                    max_reconsume_times=0, shutdown_timeout=0.2)  # fmt: skip

    @service.subscriber(topic, group=unique_name("slow"), expression="timeout",
                        consume_timeout=0.3, **settings)  # fmt: skip
    async def overrun(msg: ConsumerMessage) -> None:
        started[b"timeout"].set()
        try:
            await anyio.sleep_forever()
        finally:
            timed_out.set()

    @service.subscriber(topic, group=unique_name("cut"), expression="cut", **settings)
    async def cut(msg: ConsumerMessage) -> None:
        started[b"cut"].set()
        await anyio.sleep_forever()

    async with service:
        await service.producer.send(Message(topic, b"timeout", tags="timeout"))
        await service.producer.send(Message(topic, b"cut", tags="cut"))
        with anyio.fail_after(30):
            await started[b"cut"].wait()
            await timed_out.wait()
    points = _points(reader)
    mine = {"messaging.destination.name": topic}
    consumed = points["messaging.client.consumed.messages"]
    # the timed-out call only: the cut one is counted nowhere
    assert _total(consumed, **mine) == 1
    assert _total(consumed, **mine, **{"error.type": "CancelledError"}) == 1
    assert _total(points["aiorocket.consumer.dead_lettered"], **mine) == 1
    assert _total(points["aiorocket.consumer.retried"], **mine) == 0
    spans = [s for s in exporter.get_finished_spans() if s.kind is SpanKind.CONSUMER]
    released = [s for s in spans if s.attributes.get("aiorocket.released")]
    assert len(spans) == 2 and len(released) == 1 and released[0].status.is_ok


async def test_assigned_queues_has_a_series_for_pop_and_grpc_consumers(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    """The no-assigned-queues alert reads aiorocket.consumer.assigned_queues, which had
    no series for POP and gRPC consumers: it could never fire for them. Now each reports
    the queues it receives from (0 for a topic that does not exist)."""
    topic, missing = unique_name("pq"), unique_name("missing")
    await rocketmq.create_topic(topic, queues=2)
    groups = {kind: unique_name(kind) for kind in ("pop", "grpc", "grpc-idle")}
    async with Admin(rocketmq.namesrv_addr) as admin:
        for group in groups.values():
            await admin.create_group(group)  # the Proxy serves only groups that exist
    telemetry, reader, _ = _in_memory_telemetry()
    service = RocketMQService(rocketmq.namesrv_addr, telemetry=telemetry)
    pop = Consumer(groups["pop"], rocketmq.namesrv_addr, handler=_ignore, consume_mode="pop")
    pop.subscribe(topic)
    grpc = Consumer(groups["grpc"], proxy=rocketmq.proxy_grpc, handler=_ignore)
    grpc.subscribe(topic)
    idle = Consumer(groups["grpc-idle"], proxy=rocketmq.proxy_grpc, handler=_ignore)
    idle.subscribe(missing)
    for consumer in (pop, grpc, idle):
        service.add_consumer(consumer)

    def assigned() -> dict[str, int]:
        points = _points(reader).get("aiorocket.consumer.assigned_queues", [])
        return {kind: _total(points, **{"messaging.consumer.group.name": group})
                for kind, group in groups.items()
                if any(p.attributes["messaging.consumer.group.name"] == group
                       for p in points)}  # fmt: skip

    brokers = len(rocketmq.broker_addrs)
    async with service:
        # POP over remoting: every readable queue; gRPC: the Proxy's assignments (one
        # per broker); the topic that does not exist: a series at 0
        await eventually(lambda: assigned() == {"pop": 2 * brokers, "grpc": brokers,
                                                "grpc-idle": 0}, timeout=30)  # fmt: skip
        # /health reports the same figure (it said 0 for POP and gRPC consumers)
        for kind, consumer in (("pop", pop), ("grpc", grpc), ("grpc-idle", idle)):
            report = await consumer_health(consumer, stuck_after=120)
            assert report["assigned_queues"] == assigned()[kind], kind


async def test_duration_histograms_have_buckets_in_seconds(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    """A 3 ms and a 300 ms handler call land in different buckets (the SDK's default
    boundaries, meant for milliseconds, would put both in the first one)."""
    topic, group = unique_name("buckets"), unique_name("g")
    await rocketmq.create_topic(topic, queues=1)
    reader = InMemoryMetricReader()
    telemetry = Telemetry(MeterProvider(metric_readers=[reader]))
    service = RocketMQService(rocketmq.namesrv_addr, producer_group=unique_name("p"),
                              telemetry=telemetry)  # fmt: skip
    handled: list[bytes] = []
    both = anyio.Event()

    @service.subscriber(topic, group=group, consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
                        consume_concurrency=1)  # fmt: skip
    async def handle(msg: ConsumerMessage) -> None:
        await anyio.sleep(0.003 if msg.body == b"fast" else 0.3)  # the work being measured
        handled.append(msg.body)
        if len(handled) == 2:
            both.set()

    async with service:
        await service.producer.send(Message(topic, b"fast"))
        await service.producer.send(Message(topic, b"slow"))
        with anyio.fail_after(30):
            await both.wait()
        points = _points(reader)

    (process,) = [p for p in points["messaging.process.duration"]
                  if p.attributes["messaging.destination.name"] == topic]  # fmt: skip
    assert tuple(process.explicit_bounds) == DURATION_BUCKETS
    filled = [i for i, n in enumerate(process.bucket_counts) if n]
    assert len(filled) == 2 and process.count == 2  # two calls, two buckets
    bounds = (0.0, *DURATION_BUCKETS, float("inf"))  # bucket i holds (bounds[i], bounds[i+1]]
    fast, slow = filled
    assert bounds[fast + 1] <= 0.1 and bounds[slow] >= 0.25
    sends = [p for p in points["messaging.client.operation.duration"]
             if p.attributes["messaging.destination.name"] == topic]  # fmt: skip
    assert sends and all(tuple(p.explicit_bounds) == DURATION_BUCKETS for p in sends)
    (delay,) = [p for p in points["aiorocket.message.delay"]
                if p.attributes["messaging.destination.name"] == topic]  # fmt: skip
    assert tuple(delay.explicit_bounds) == DELAY_BUCKETS


def test_without_opentelemetry_nothing_is_instrumented() -> None:
    service = RocketMQService("127.0.0.1:9876", producer_group="p", telemetry=False)

    async def handle(msg: ConsumerMessage) -> None: ...

    service.subscriber("t", group="g")(handle)
    assert service.telemetry is None
    assert service.consumers[0]._handler_fn is handle  # not wrapped
