"""Consume with ``async for``: each message is acked when you ask for the next one.

Needs the topic: python -m aiorocket.testing.broker topic orders
"""

import uuid

import anyio

from aiorocket import Message
from aiorocket.consumer import ConsumeFromWhere, Consumer
from aiorocket.producer import Producer


async def main() -> None:
    run = uuid.uuid4().hex[:8]
    async with Producer("example-producer") as producer:
        for i in range(5):
            await producer.send(Message("orders", b"order %d" % i, tags="paid", keys=[run]))

    consumer = Consumer("example-async-for", consume_from_where=ConsumeFromWhere.FIRST_OFFSET)
    consumer.subscribe("orders", "paid || refunded")
    seen = 0
    async with consumer:
        async for msg in consumer:
            if run not in msg.keys:
                continue  # an older run's message: acked by asking for the next one
            seen += 1
            print(msg.queue_offset, msg.body)
            if seen == 5:
                await msg.ack()  # leaving the loop: settle the current message first
                break

        # Processing in your own tasks: `async with msg` acks on success, nacks on error.
        async with Producer("example-producer") as producer:
            await producer.send(Message("orders", b"last", tags="paid", keys=[run, "last"]))
        async for msg in consumer:
            async with msg:
                if "last" in msg.keys and run in msg.keys:
                    print("done with", msg.body)
                    break


anyio.run(main)
