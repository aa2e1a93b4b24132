"""The message trace's format (the 4.x text records, by the Java decoder's positions) and
its ``Tracer``: bounded, batched, in the background, never failing or holding up the
message path. The real tools read the records in tests/integration/test_message_trace.py."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from aiorocket import _trace
from aiorocket._trace import Tracer, decode, pub, sub_after, sub_before

pytestmark = pytest.mark.anyio


def test_pub_record_has_the_java_field_order() -> None:
    record = pub(
        group="g", topic="t", msg_id="ID1", tags="tag", keys=["k1", "k2"],
        store_host="127.0.0.1:10911", body_length=5, cost_ms=3, msg_type=0,
        offset_msg_id="OFF", success=True, timestamp=1700000000000,
    )  # fmt: skip
    assert record.text == (
        "Pub\x011700000000000\x01DefaultRegion\x01g\x01t\x01ID1\x01tag\x01k1 k2\x01"
        "127.0.0.1:10911\x015\x013\x010\x01OFF\x01true\x02"
    )
    assert record.keys == ("ID1", "k1", "k2")  # found by the message id and its keys


def test_sub_records_and_decode() -> None:
    before = sub_before(group="g", request_id="R", msg_id="ID1", retry_times=2, keys=[],
                        timestamp=5)  # fmt: skip
    after = sub_after(group="g", request_id="R", msg_id="ID1", cost_ms=7, success=False,
                      keys=["k"], context_code=2, timestamp=9)  # fmt: skip
    assert before.text == "SubBefore\x015\x01DefaultRegion\x01g\x01R\x01ID1\x012\x01\x02"
    assert after.text == "SubAfter\x01R\x01ID1\x017\x01false\x01k\x012\x019\x01g\x02"
    got = decode(before.text + after.text)
    assert got[0]["msg_id"] == "ID1" and got[0]["retry_times"] == "2"
    assert got[1]["context_code"] == "2" and got[1]["group"] == "g"


def test_separators_inside_a_value_do_not_shift_fields() -> None:
    record = pub(
        group="g", topic="t", msg_id="ID", tags="a\x01b", keys=["x\x02y"], store_host="h",
        body_length=1, cost_ms=0, msg_type=0, offset_msg_id="", success=True, timestamp=1,
    )  # fmt: skip
    (got,) = decode(record.text)
    assert got["tags"] == "a b" and got["keys"] == "x y" and got["success"] == "true"


class Sink:
    def __init__(self, fail: bool = False, hang: bool = False) -> None:
        self.sent: list[tuple[str, bytes, list[str]]] = []
        self.fail, self.hang = fail, hang
        self.calls = 0
        self._called = anyio.Event()

    async def send_trace(self, topic: str, body: bytes, keys: Sequence[str]) -> None:
        self.calls += 1
        self._called.set()
        if self.hang:
            await anyio.sleep_forever()
        if self.fail:
            raise OSError("broker gone")
        self.sent.append((topic, body, list(keys)))

    async def wait_calls(self, n: int) -> None:
        with anyio.fail_after(5):
            while self.calls < n:
                await self._called.wait()
                self._called = anyio.Event()


def _rec(i: int) -> _trace.TraceRecord:
    return sub_after(group="g", request_id="R", msg_id=f"ID{i}", cost_ms=0, success=True,
                     keys=[], context_code=0, timestamp=i)  # fmt: skip


async def test_records_are_batched_into_trace_messages_keyed_by_message_ids() -> None:
    sink = Sink()
    tracer = Tracer("g", "T", batch=20, interval=60)
    async with tracer.running(sink):
        tracer.extend(_rec(i) for i in range(45))
        await sink.wait_calls(2)  # two full batches leave at once, not after 60 s
    # the last 5 are sent at close
    assert [len(decode(body.decode())) for _, body, _ in sink.sent] == [20, 20, 5]
    assert sink.sent[0][0] == "T" and sink.sent[0][2] == [f"ID{i}" for i in range(20)]
    assert tracer.sent == 45 and tracer.dropped == 0


async def test_a_full_buffer_drops_and_counts_and_never_waits() -> None:
    sink = Sink(hang=True)  # a trace send that never ends
    tracer = Tracer("g", "T", buffer=10, batch=5, interval=0.01, send_timeout=0.2)
    async with tracer.running(sink):
        for i in range(100):  # no await: append neither waits nor raises
            tracer.append(_rec(i))
    assert tracer.dropped >= 90
    assert tracer.dropped + tracer.failed + tracer.sent == 100


async def test_a_failed_trace_send_is_counted_not_raised() -> None:
    tracer, sink = Tracer("g", "T", interval=0.01), Sink(fail=True)
    async with tracer.running(sink):
        tracer.append(_rec(1))
        await sink.wait_calls(1)
        await anyio.lowlevel.checkpoint()  # the failure is counted after the call returns
    assert tracer.failed == 1 and tracer.sent == 0


async def test_records_outside_the_running_tracer_are_dropped() -> None:
    tracer = Tracer("g", "T")
    tracer.append(_rec(1))  # not started (or closed): dropped, counted
    assert tracer.dropped == 1


async def test_the_sending_task_ends_with_its_owner() -> None:
    sink = Sink(hang=True)
    tracer = Tracer("g", "T", interval=0.01, send_timeout=0.2)
    with anyio.fail_after(2):  # the flush at close is bounded by send_timeout
        async with tracer.running(sink):
            tracer.append(_rec(1))
            await anyio.sleep(0.05)
    assert tracer.failed + tracer.dropped == 1


def test_dropped_records_are_a_metric() -> None:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from aiorocket.integrations.telemetry import Telemetry
    from aiorocket.producer import Producer

    reader = InMemoryMetricReader()
    telemetry = Telemetry(meter_provider=MeterProvider(metric_readers=[reader]))
    producer = Producer("traced", "127.0.0.1:9876", trace=True)
    telemetry.instrument_producer(producer)
    assert producer.tracer is not None
    producer.tracer.append(_rec(1))  # not running: dropped
    data = reader.get_metrics_data()
    assert data is not None
    points = {
        p.attributes["aiorocket.trace.outcome"]: p.value
        for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics
        if m.name == "aiorocket.trace.records" for p in m.data.data_points
    }  # fmt: skip
    assert points == {"sent": 0, "dropped": 1, "failed": 0}


async def test_a_cancelled_owner_does_not_wait_for_the_flush() -> None:
    """The owner's scope cancelled (its task cancelled, the close under it): the sending
    task ends with it, and the close does not wait out ``send_timeout`` for it."""
    tracer = Tracer("g", "T", interval=60, send_timeout=5)
    with anyio.fail_after(2):  # not the 5 s send_timeout
        with anyio.CancelScope() as scope:
            async with tracer.running(Sink()):
                tracer.append(_rec(1))
                scope.cancel()
                await anyio.sleep_forever()
    assert tracer.sent + tracer.dropped + tracer.failed == 1


async def test_failed_trace_sends_warn_once_per_interval() -> None:
    """A trace topic that does not exist fails every batch: one warning, not one per
    batch (before: 30 warnings for 30 failed batches)."""
    from aiorocket.testing.logs import capture_logs

    tracer, sink = Tracer("g", "T", batch=1, interval=0.01), Sink(fail=True)
    with capture_logs() as logs:
        async with tracer.running(sink):
            tracer.extend(_rec(i) for i in range(30))
            await sink.wait_calls(30)
    assert tracer.failed == 30
    warnings = [e for e in logs if e["event"] == "trace_send_failed"
                and e["log_level"] == "warning"]  # fmt: skip
    assert len(warnings) == 1, warnings


def test_a_system_trace_topic_over_grpc_is_a_config_error() -> None:
    """The Proxy refuses system topics: over gRPC the default trace topic would fail
    every trace send (before: accepted, each batch failed and was counted)."""
    from aiorocket.consumer import Consumer
    from aiorocket.errors import ConfigError
    from aiorocket.producer import Producer

    with pytest.raises(ConfigError, match="system topic"):
        Producer("p", proxy="127.0.0.1:8081", trace=True)
    with pytest.raises(ConfigError, match="system topic"):
        Consumer("g", proxy="127.0.0.1:8081", handler=lambda m: None, trace=True)
    Producer("p", proxy="127.0.0.1:8081", trace=True, trace_topic="app-trace")
    Producer("p", "127.0.0.1:9876", trace=True)  # remoting: the broker's trace topic
    Producer("p", proxy="127.0.0.1:8081")  # no trace: the topic does not matter


async def test_a_missing_trace_topic_is_not_asked_for_at_every_batch() -> None:
    """Over remoting a trace topic the NameServer does not know fails every batch: the
    sender asks again only after a while (before: one route query per batch)."""
    from aiorocket.client.instance import ClientInstance
    from aiorocket.client.trace import RemotingTraceSender
    from aiorocket.errors import TopicNotExistError
    from tests.unit.consumer_fakes import FakeCluster, running

    async with running(FakeCluster({})) as cluster, ClientInstance(
        cluster.namesrv.address
    ) as client:  # fmt: skip
        sender = RemotingTraceSender(client, "g")
        for _ in range(10):
            with pytest.raises(TopicNotExistError):
                await sender.send_trace("no-such-trace-topic", b"x", ["k"])
    assert cluster.route_queries == 1


def _pb_message(i: int, group: str | None = None) -> Any:
    from datetime import datetime, timezone

    from aiorocket.grpc import _pb as pb

    return pb.Message(
        topic=pb.Resource(name="t"),
        system_properties=pb.SystemProperties(
            message_id=f"id{i}", receipt_handle=f"rh{i}", delivery_attempt=1,
            message_group=group, born_timestamp=datetime.now(timezone.utc),
        ),
        body=f"m{i}".encode(),
    )  # fmt: skip


def _consumer_records(proxy: Any, trace_topic: str) -> list[dict[str, str]]:
    """The consume-side records the consumer stored in ``trace_topic``, in order."""
    return [r for m in proxy.sent if m.topic.name == trace_topic
            for r in decode(m.body.decode()) if r["type"] in ("SubBefore", "SubAfter")]  # fmt: skip


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # the fake Proxy: asyncio
async def test_an_async_for_consumer_writes_sub_before_and_sub_after() -> None:
    """``async for msg in consumer`` with trace=True: a SubBefore when a message is
    handed to the loop, a SubAfter when it is settled (the next one asked for: success;
    ``nack``: failed), with the time between; a message the loop left (``break``) is
    released, not settled: no SubAfter. Before: no consume-side record at all."""
    from aiorocket.consumer import Consumer
    from aiorocket.testing.fake_grpc import FakeProxy

    async with FakeProxy() as proxy:
        consumer = Consumer("g", proxy=proxy.endpoint, long_poll_timeout=1, trace=True,
                            trace_topic="app-trace")  # fmt: skip
        consumer.subscribe("t")
        async with consumer:
            proxy.messages = [_pb_message(1), _pb_message(2), _pb_message(3)]
            with anyio.fail_after(10):
                async for msg in consumer:
                    if msg.body == b"m1":
                        await anyio.sleep(0.05)  # a body that takes its time: the cost
                    elif msg.body == b"m2":
                        await msg.nack()
                    else:
                        break
        # the trace is flushed at the close
        records = _consumer_records(proxy, "app-trace")
    by = {(r["type"], r["msg_id"]): r for r in records}
    assert sorted(by) == [("SubAfter", "id1"), ("SubAfter", "id2"), ("SubBefore", "id1"),
                          ("SubBefore", "id2"), ("SubBefore", "id3")]  # fmt: skip
    ok, failed = by["SubAfter", "id1"], by["SubAfter", "id2"]
    assert (ok["success"], ok["context_code"]) == ("true", "0")
    assert (failed["success"], failed["context_code"]) == ("false", "4")  # FAILED
    assert int(ok["cost_ms"]) >= 50
    for msg_id in ("id1", "id2"):
        before, after = by["SubBefore", msg_id], by["SubAfter", msg_id]
        assert before["request_id"] == after["request_id"]
        assert before["group"] == after["group"] == "g" and before["retry_times"] == "0"
    assert consumer.tracer is not None and consumer.tracer.dropped == 0


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # the fake Proxy: asyncio
async def test_an_ordered_async_for_traces_each_attempt() -> None:
    """A FIFO group under ``async for``: a failure retried in place is a SubAfter
    (failed), then a SubBefore of the next attempt (retry times 1) and its SubAfter;
    ``async with msg`` settles by its block."""
    from aiorocket.consumer import Consumer
    from aiorocket.testing.fake_grpc import FakeProxy

    async with FakeProxy() as proxy:
        proxy.fifo = True
        consumer = Consumer("g", proxy=proxy.endpoint, long_poll_timeout=1, trace=True,
                            trace_topic="app-trace")  # fmt: skip
        consumer.subscribe("t")
        async with consumer:
            proxy.messages = [_pb_message(1, "order-1")]
            with anyio.fail_after(10):
                async for msg in consumer:
                    try:
                        async with msg:
                            if msg.reconsume_times == 0:
                                raise RuntimeError("first attempt fails")
                    except RuntimeError:
                        continue
                    break
            with anyio.fail_after(5):
                await proxy.wait_acks(1)
        records = _consumer_records(proxy, "app-trace")
    got = [(r["type"], r.get("retry_times") or r["success"]) for r in records]
    assert got == [("SubBefore", "0"), ("SubAfter", "false"),
                   ("SubBefore", "1"), ("SubAfter", "true")]  # fmt: skip
