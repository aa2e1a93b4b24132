"""aiorocket.faststream with FastStream's integrations: the AsyncAPI 3.0 document of the
example (``faststream docs gen``, a real process), the OpenTelemetry and Prometheus
middlewares on the real broker, and FastStream's FastAPI integration (a real app with
its lifespan, over HTTP)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from fastapi import Depends, FastAPI
from fastapi.testclient import TestClient
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry
from pydantic import BaseModel

from aiorocket.faststream import RocketBroker
from aiorocket.faststream.fastapi import RocketRouter
from aiorocket.faststream.opentelemetry import RocketTelemetryMiddleware
from aiorocket.faststream.prometheus import RocketPrometheusMiddleware
from aiorocket.testing.broker import LocalRocketMQ
from tests import snippets
from tests.integration.faststream_helpers import FAST, FIRST, started


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # FastStream runs on asyncio


def test_faststream_docs_gen_lists_channels_payloads_and_groups(tmp_path: Path) -> None:
    out = tmp_path / "asyncapi.json"
    env = {**os.environ, "AIOROCKET_NAMESRV_ADDR": "10.1.2.3:9876"}
    subprocess.run(
        [sys.executable, "-m", "faststream", "docs", "gen", "faststream_service:app",
         "--app-dir", str(snippets.REPO / "examples"), "--out", str(out)],
        env=env, cwd=tmp_path, check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    doc = json.loads(out.read_text())
    assert doc["asyncapi"] == "3.0.0"
    assert doc["servers"]["development"] == {"host": "10.1.2.3:9876", "pathname": "",
                                             "protocol": "rocketmq",
                                             "protocolVersion": "remoting"}  # fmt: skip
    orders = doc["channels"]["orders:billing:Bill"]
    assert orders["address"] == "orders"
    assert "consumer group `billing`, tags `paid`" in orders["description"]
    assert doc["channels"]["invoices:Publisher"]["address"] == "invoices"
    assert doc["operations"]["orders:billing:BillSubscribe"]["action"] == "receive"
    assert doc["operations"]["invoices:Publisher"]["action"] == "send"
    schemas = doc["components"]["schemas"]
    assert set(schemas["Order"]["required"]) == {"id", "customer", "amount"}
    assert set(schemas["Invoice"]["required"]) == {"order_id", "customer", "total"}
    messages = doc["components"]["messages"]
    assert messages["orders:billing:Bill:SubscribeMessage"]["payload"] == {
        "$ref": "#/components/schemas/Order"}  # fmt: skip


@pytest.mark.integration
@pytest.mark.anyio
async def test_opentelemetry_and_prometheus_middlewares_label_rocketmq(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    topic, group = unique_name("fs"), unique_name("g")
    await rocketmq.create_topic(topic, queues=1)
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    registry = CollectorRegistry()
    broker = RocketBroker(rocketmq.namesrv_addr, consumer_config=FAST, middlewares=[
        RocketTelemetryMiddleware(tracer_provider=provider),
        RocketPrometheusMiddleware(registry=registry),
    ])  # fmt: skip
    done = asyncio.Event()

    @broker.subscriber(topic, group=group, consume_from_where=FIRST)
    async def handle(body: dict[str, Any]) -> None:
        done.set()

    async with started(broker):
        await broker.publish({"n": 1}, topic, tags="paid", keys=["k-1"])
        await asyncio.wait_for(done.wait(), 60)
    by_kind = {s.kind.name: s for s in spans.get_finished_spans() if s.name.startswith(topic)}
    sent, received = by_kind["PRODUCER"].attributes, by_kind["CONSUMER"].attributes
    assert sent is not None and received is not None
    assert sent["messaging.system"] == "rocketmq"
    assert sent["messaging.destination.name"] == topic
    assert sent["messaging.rocketmq.message.tag"] == "paid"
    assert tuple(sent["messaging.rocketmq.message.keys"]) == ("k-1",)
    assert sent["messaging.rocketmq.message.type"] == "normal"
    assert received["messaging.system"] == "rocketmq"
    assert received["messaging.rocketmq.client_group"] == group
    assert received["messaging.rocketmq.consumption_model"] == "clustering"
    assert received["messaging.rocketmq.message.tag"] == "paid"
    # the consumer span continues the producer's trace (W3C context in the properties)
    assert by_kind["CONSUMER"].context.trace_id == by_kind["PRODUCER"].context.trace_id

    received_total = registry.get_sample_value(
        "faststream_received_messages_total",
        {"app_name": "faststream", "broker": "rocketmq", "handler": topic},
    )
    assert received_total == 1
    published = registry.get_sample_value(
        "faststream_published_messages_total",
        {"app_name": "faststream", "broker": "rocketmq", "destination": topic,
         "status": "success"},
    )  # fmt: skip
    assert published == 1


class Order(BaseModel):
    id: int


@pytest.mark.integration
def test_fastapi_integration_runs_the_broker_in_the_app_lifespan(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    topic, group = unique_name("fs"), unique_name("g")
    anyio.run(rocketmq.create_topic, topic, 1)
    router = RocketRouter(rocketmq.namesrv_addr, consumer_config=FAST)
    handled: list[tuple[int, str]] = []
    got = threading.Event()

    def tenant() -> str:
        return "acme"

    @router.subscriber(topic, group=group, consume_from_where=FIRST)
    async def handle(order: Order, who: str = Depends(tenant)) -> None:
        handled.append((order.id, who))
        got.set()

    @router.post("/orders")
    async def create(order: Order) -> dict[str, str]:
        result = await router.broker.publish(order, topic, tags="new")
        return {"msg_id": result.msg_id}

    app = FastAPI()
    app.include_router(router)
    with TestClient(app) as client:  # runs the lifespan: the broker starts and stops
        created = client.post("/orders", json={"id": 5})
        assert created.status_code == 200 and created.json()["msg_id"]
        assert got.wait(60)
        schema = client.get("/asyncapi.json").json()
    assert handled == [(5, "acme")]
    assert f"{topic}:{group}:Handle" in schema["channels"]
