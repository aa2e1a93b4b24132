"""An order service on FastStream: orders in, a typed model, invoices out to a second topic.

Needs the topics: python -m aiorocket.testing.broker topic orders (and invoices)
Run it (the NameServer from $AIOROCKET_NAMESRV_ADDR; the `faststream` extra):

    faststream run faststream_service:app --app-dir examples

    faststream docs gen faststream_service:app --app-dir examples   # asyncapi.json

Every order tagged ``paid`` is billed: its invoice goes to the invoices topic, tagged
``issued``, keyed by the order id. A handler that raises sends its order back for a
retry (the group's retry policy), then to the group's dead-letter queue. On SIGTERM the
consumer stops taking orders, lets the running handlers finish (``graceful_timeout``),
commits and closes; an order not started is billed by the next instance.
Settings (all optional): ORDERS_TOPIC, INVOICES_TOPIC, ORDERS_GROUP,
ORDER_PROCESSING_SECONDS (a slow handler, for trying the shutdown), ORDERS_JOURNAL (a
file each started and billed order is written to, standing in for a database),
GRACEFUL_TIMEOUT (seconds, 15).
"""

import asyncio
import os

from faststream import FastStream, Logger
from pydantic import BaseModel, Field

from aiorocket.consumer import ConsumeFromWhere
from aiorocket.faststream import RocketBroker, RocketResponse

ORDERS = os.environ.get("ORDERS_TOPIC", "orders")
INVOICES = os.environ.get("INVOICES_TOPIC", "invoices")
GROUP = os.environ.get("ORDERS_GROUP", "billing")
PROCESSING_SECONDS = float(os.environ.get("ORDER_PROCESSING_SECONDS", "0"))
JOURNAL = os.environ.get("ORDERS_JOURNAL")


class Order(BaseModel):
    id: int
    customer: str
    amount: float = Field(gt=0)


class Invoice(BaseModel):
    order_id: int
    customer: str
    total: float


broker = RocketBroker(graceful_timeout=float(os.environ.get("GRACEFUL_TIMEOUT", "15")))
app = FastStream(broker)
invoices = broker.publisher(INVOICES, tags="issued", schema=Invoice,
                            description="Invoices of paid orders")  # fmt: skip


def journal(line: str) -> None:
    if JOURNAL:
        with open(JOURNAL, "a") as f:
            f.write(line + "\n")


# A new group starts at the oldest stored order (then where it left off): none is missed.
@broker.subscriber(ORDERS, group=GROUP, tags="paid", concurrency=8,
                   consume_from_where=ConsumeFromWhere.FIRST_OFFSET)  # fmt: skip
@invoices
async def bill(order: Order, logger: Logger) -> RocketResponse:
    """Bill a paid order."""
    journal(f"started {order.id}")
    await asyncio.sleep(PROCESSING_SECONDS)  # the work a real service does
    invoice = Invoice(order_id=order.id, customer=order.customer,
                      total=round(order.amount * 1.2, 2))  # fmt: skip
    logger.info("billed order %s", order.id)
    journal(f"billed {order.id}")
    return RocketResponse(invoice, keys=[str(order.id)])
