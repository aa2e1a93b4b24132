"""Orderly consumption: each queue's messages are handled one at a time, in order.

The producer sends the messages of one key (here: an order) to one queue with
``sharding_key``; the consumer with ``orderly=True`` locks each of its queues on the
broker and runs one handler at a time per queue. A failed message suspends its queue
and is retried in place (``suspend_current_queue_time``, or ``Reconsume(suspend=...)``).

Needs the topic: python -m aiorocket.testing.broker topic orders
"""

import uuid
from collections import defaultdict

import anyio

from aiorocket import Message
from aiorocket.consumer import ConsumeFromWhere, Consumer, ConsumerMessage
from aiorocket.producer import Producer

STEPS = [b"created", b"paid", b"shipped", b"delivered"]


async def main() -> None:
    run = uuid.uuid4().hex[:8]
    orders = [f"order-{n}" for n in range(3)]
    async with Producer("example-producer") as producer:
        for step in STEPS:
            for order in orders:
                msg = Message("orders", step, tags="lifecycle", keys=[run, order])
                await producer.send(msg, sharding_key=order)  # one order, one queue

    history: dict[str, list[bytes]] = defaultdict(list)
    complete = anyio.Event()

    async def handle(msg: ConsumerMessage) -> None:
        if run not in msg.keys:
            return
        order = msg.keys[1]
        history[order].append(msg.body)
        if sum(len(h) for h in history.values()) == len(orders) * len(STEPS):
            complete.set()

    consumer = Consumer(
        "example-orderly",
        handler=handle,
        orderly=True,
        consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
    )
    consumer.subscribe("orders", "lifecycle")
    async with consumer:
        await complete.wait()
    for order in orders:
        assert history[order] == STEPS, history[order]
        print(order, [step.decode() for step in history[order]])


anyio.run(main)
