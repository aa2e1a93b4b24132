"""Ordered sends: the messages of one key go to one queue, in the order sent.

``sharding_key`` picks the queue by the key's hash (the same hash as the Java client's
``SelectMessageQueueByHash``, so mixed Java and Python producers agree); ``selector``
picks it with your own function. Such sends never move to another queue: consume them
with an ``orderly=True`` consumer to handle each queue in order.

Needs the topic: python -m aiorocket.testing.broker topic orders
"""

from collections.abc import Sequence

import anyio

from aiorocket import Message, MessageQueue
from aiorocket.producer import Producer


def by_region(queues: Sequence[MessageQueue], msg: Message, region: object) -> MessageQueue:
    """Your own placement: here, one queue per region."""
    return queues[["eu", "us", "apac"].index(str(region)) % len(queues)]


async def main() -> None:
    async with Producer("example-producer") as producer:
        queues = set()
        for step in (b"created", b"paid", b"shipped"):
            msg = Message("orders", step, tags="lifecycle", keys=["order-7"])
            result = await producer.send(msg, sharding_key="order-7")
            queues.add(result.queue)
        print("order-7 went to", queues)  # one queue
        assert len(queues) == 1

        result = await producer.send(
            Message("orders", b"eu order", tags="regional"), selector=by_region, selector_arg="eu"
        )
        print("the eu order went to", result.queue)


anyio.run(main)
