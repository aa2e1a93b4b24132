"""Push consumer: a handler called for each message, up to 20 at a time.

Needs the topic: python -m aiorocket.testing.broker topic orders
"""

import uuid

import anyio

from aiorocket import Message
from aiorocket.consumer import ConsumeFromWhere, Consumer, ConsumerMessage
from aiorocket.producer import Producer


async def main() -> None:
    run = uuid.uuid4().hex[:8]  # this run's messages carry it as their key
    async with Producer("example-producer") as producer:
        for i in range(10):
            await producer.send(Message("orders", b"order %d" % i, tags="paid", keys=[run]))

    received: list[bytes] = []
    all_received = anyio.Event()

    async def handle(msg: ConsumerMessage) -> None:
        # Returning normally acks the message; raising sends it back for a retry.
        if run in msg.keys:
            received.append(msg.body)
            if len(received) == 10:
                all_received.set()

    consumer = Consumer(
        "example-push",
        handler=handle,
        consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
        consume_concurrency=20,  # handlers running at once (the default)
    )
    consumer.subscribe("orders", "paid")
    async with consumer:
        await all_received.wait()  # a service would run until cancelled
    print(sorted(received))


anyio.run(main)
