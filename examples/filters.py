"""Filtering on the broker: by tag, or with SQL92 over message properties.

A tag expression (``"paid || refunded"``) matches the message's one tag; ``sql=...``
matches its properties (``Message(properties={...})``) and needs a broker with
``enablePropertyFilter=true`` (the local one has it). The broker only sends what
matches, and the consumer checks tags again on its side.

Needs the topic: python -m aiorocket.testing.broker topic orders
"""

import uuid

import anyio

from aiorocket import Message
from aiorocket.consumer import ConsumeFromWhere, Consumer, ConsumerMessage
from aiorocket.producer import Producer


async def main() -> None:
    run = uuid.uuid4().hex[:8]
    async with Producer("example-producer") as producer:
        for amount, region in [(20, "eu"), (250, "eu"), (900, "us"), (40, "us")]:
            msg = Message(
                "orders", b"order of %d" % amount, tags="paid", keys=[run],
                properties={"amount": str(amount), "region": region, "run": run},
            )  # fmt: skip
            await producer.send(msg)

    big: list[bytes] = []
    done = anyio.Event()

    async def handle(msg: ConsumerMessage) -> None:
        big.append(msg.body)
        if len(big) == 2:
            done.set()

    consumer = Consumer(
        "example-filters", handler=handle, consume_from_where=ConsumeFromWhere.FIRST_OFFSET
    )
    # Only this run's paid orders over 100 (property values compare as numbers).
    consumer.subscribe(
        "orders",
        sql=f"run = '{run}' AND amount > 100 AND TAGS = 'paid'",
    )
    async with consumer:
        await done.wait()
    print(sorted(big))  # [b'order of 250', b'order of 900']


anyio.run(main)
