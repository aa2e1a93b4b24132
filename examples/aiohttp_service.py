"""An order service on aiohttp: POST /orders produces, a handler processes, GET shows it.

Needs the topic: python -m aiorocket.testing.broker topic orders
Run it (the NameServer from $AIOROCKET_NAMESRV_ADDR):

    python examples/aiohttp_service.py --port 8080

    curl -X POST localhost:8080/orders -H 'content-type: application/json' \\
         -d '{"item": "book", "quantity": 2}'
    curl localhost:8080/orders/<id>     # "created", then "processed"
    curl localhost:8080/health          # per consumer: queues, in flight, lag

On SIGTERM ``web.run_app`` stops taking requests and runs the app's cleanup: the
consumer stops pulling, gives back the orders it had not started, lets running handlers
finish within ``shutdown_timeout`` (an order not finished by then is processed again,
by another instance), commits, unregisters, then the producer closes (see "Startup and
shutdown" in docs/services.md). Settings as in fastapi_service.py: ORDERS_TOPIC,
ORDERS_GROUP, ORDER_PROCESSING_SECONDS (per item), ORDER_SHUTDOWN_TIMEOUT,
ORDERS_JOURNAL.
"""

import argparse
import json
import os
import uuid

import anyio
from aiohttp import web

from aiorocket import Message
from aiorocket.consumer import ConsumeFromWhere, ConsumerMessage
from aiorocket.integrations.aiohttp import RocketMQService, producer, setup

TOPIC = os.environ.get("ORDERS_TOPIC", "orders")
GROUP = os.environ.get("ORDERS_GROUP", "order-processor")
PROCESSING_SECONDS = float(os.environ.get("ORDER_PROCESSING_SECONDS", "0"))
JOURNAL = os.environ.get("ORDERS_JOURNAL")

#: order id -> {"item", "quantity", "status"}; a real service keeps this in a database.
orders: dict[str, dict[str, object]] = {}

rocketmq = RocketMQService(producer_group="orders-api")


@rocketmq.subscriber(
    TOPIC,
    group=GROUP,
    consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
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


async def create_order(request: web.Request) -> web.Response:
    body = await request.json()
    order_id = uuid.uuid4().hex
    order = {"id": order_id, "item": str(body["item"]), "quantity": int(body.get("quantity", 1))}
    orders.setdefault(order_id, {**order, "status": "created"})
    result = await producer(request).send(
        Message(TOPIC, json.dumps(order).encode(), keys=[order_id])
    )
    return web.json_response({**orders[order_id], "msg_id": result.msg_id}, status=201)


async def get_order(request: web.Request) -> web.Response:
    order = orders.get(request.match_info["order_id"])
    if order is None:
        raise web.HTTPNotFound(text="no such order")
    return web.json_response(order)


async def list_orders(request: web.Request) -> web.Response:
    processed = sum(1 for o in orders.values() if o["status"] == "processed")
    return web.json_response({"orders": len(orders), "processed": processed})


def make_app() -> web.Application:
    app = web.Application()
    setup(app, rocketmq)  # cleanup_ctx, app[ROCKETMQ], /health, /health/live, /health/ready
    app.router.add_post("/orders", create_order)
    app.router.add_get("/orders", list_orders)
    app.router.add_get("/orders/{order_id}", get_order)
    return app


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    args = parser.parse_args()
    web.run_app(make_app(), host=args.host, port=args.port)
