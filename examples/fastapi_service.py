"""An order service on FastAPI: POST /orders produces, a handler processes, GET shows it.

Needs the topic: python -m aiorocket.testing.broker topic orders
Run it (the NameServer from $AIOROCKET_NAMESRV_ADDR):

    uvicorn fastapi_service:app --app-dir examples --port 8000

    curl -X POST localhost:8000/orders -H 'content-type: application/json' \\
         -d '{"item": "book", "quantity": 2}'
    curl localhost:8000/orders/<id>     # "created", then "processed"
    curl localhost:8000/health          # per consumer: queues, in flight, lag
    curl localhost:8000/metrics/        # Prometheus (with the OpenTelemetry exporter)

On SIGTERM uvicorn stops taking requests and the router's lifespan stops the consumer:
it stops pulling, gives back the orders it had not started, lets running handlers
finish within ``shutdown_timeout`` (an order not finished by then is processed again,
by another instance), commits, unregisters, then closes the producer (see "Startup and
shutdown" in docs/services.md). Settings (all optional): ORDERS_TOPIC, ORDERS_GROUP,
ORDER_PROCESSING_SECONDS (per item: a slow handler, for trying the shutdown),
ORDER_SHUTDOWN_TIMEOUT, ORDERS_JOURNAL (a file each processed order's id is appended
to, standing in for a database), ORDERS_PROXY (a Proxy's gRPC endpoint: use gRPC, e.g.
$AIOROCKET_PROXY_GRPC), ORDERS_LAG_INTERVAL (seconds between refreshes of
the lag metric, 15). monitoring/ has a Grafana dashboard and Prometheus alert rules
for these metrics.
"""

import json
import os
import uuid

import anyio
from fastapi import FastAPI, HTTPException
from pydantic import BaseModel

from aiorocket import Message
from aiorocket.consumer import ConsumeFromWhere, ConsumerMessage
from aiorocket.integrations.fastapi import ProducerDep, RocketMQRouter

TOPIC = os.environ.get("ORDERS_TOPIC", "orders")
GROUP = os.environ.get("ORDERS_GROUP", "order-processor")
PROCESSING_SECONDS = float(os.environ.get("ORDER_PROCESSING_SECONDS", "0"))
JOURNAL = os.environ.get("ORDERS_JOURNAL")
#: a 5.x Proxy's gRPC endpoint: consume and produce through it instead of the NameServer
PROXY = os.environ.get("ORDERS_PROXY")

#: order id -> {"item", "quantity", "status"}; a real service keeps this in a database.
orders: dict[str, dict[str, object]] = {}

# Metrics: with the otel extra, the OpenTelemetry SDK and its Prometheus exporter
# installed, the service's metrics are served at /metrics for Prometheus to scrape.
try:
    from opentelemetry import metrics
    from opentelemetry.exporter.prometheus import PrometheusMetricReader
    from opentelemetry.sdk.metrics import MeterProvider
    from prometheus_client import make_asgi_app
except ImportError:
    make_asgi_app = None
else:
    metrics.set_meter_provider(MeterProvider(metric_readers=[PrometheusMetricReader()]))

# The lag gauge (aiorocket.consumer.lag) is refreshed every ORDERS_LAG_INTERVAL seconds.
LAG_INTERVAL = float(os.environ.get("ORDERS_LAG_INTERVAL", "15"))
rocketmq = RocketMQRouter(
    proxy=PROXY, producer_group="orders-api", service_settings={"lag_interval": LAG_INTERVAL}
)
# A new group starts at the topic's first order; over gRPC that is the group's setting
# on the server, not the consumer's.
START = {} if PROXY else {"consume_from_where": ConsumeFromWhere.FIRST_OFFSET}


@rocketmq.subscriber(
    TOPIC,
    group=GROUP,
    **START,
    consume_concurrency=16,
    shutdown_timeout=float(os.environ.get("ORDER_SHUTDOWN_TIMEOUT", "10")),
)
async def process_order(msg: ConsumerMessage) -> None:
    """Returning settles the message; raising would send it back for a retry."""
    order = json.loads(msg.body)
    # The work (payment, stock, ...): ORDER_PROCESSING_SECONDS per item.
    await anyio.sleep(PROCESSING_SECONDS * order["quantity"])
    orders[order["id"]] = {**order, "status": "processed"}
    if JOURNAL:
        async with await anyio.open_file(JOURNAL, "a") as journal:
            await journal.write(order["id"] + "\n")


class NewOrder(BaseModel):
    item: str
    quantity: int = 1


app = FastAPI(title="orders")
app.include_router(rocketmq)  # the lifespan and /health, /health/live, /health/ready
if make_asgi_app is not None:
    app.mount("/metrics", make_asgi_app())


@app.post("/orders", status_code=201)
async def create_order(new: NewOrder, producer: ProducerDep) -> dict[str, object]:
    order_id = uuid.uuid4().hex
    order = {"id": order_id, "item": new.item, "quantity": new.quantity}
    orders.setdefault(order_id, {**order, "status": "created"})
    result = await producer.send(Message(TOPIC, json.dumps(order).encode(), keys=[order_id]))
    return {**orders[order_id], "msg_id": result.msg_id}


@app.get("/orders/{order_id}")
async def get_order(order_id: str) -> dict[str, object]:
    if order_id not in orders:
        raise HTTPException(404, "no such order")
    return orders[order_id]


@app.get("/orders")
async def list_orders() -> dict[str, object]:
    processed = sum(1 for o in orders.values() if o["status"] == "processed")
    return {"orders": len(orders), "processed": processed}
