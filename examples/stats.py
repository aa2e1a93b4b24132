"""Consumer statistics: per queue, what is cached, running, committed, and the rates.

``consumer.stats()`` returns a :class:`~aiorocket.consumer.QueueStats` per owned queue;
its rates are over the time since the previous call, so call it at a steady interval
(for a dashboard or a metrics exporter).

Needs the topic: python -m aiorocket.testing.broker topic orders
"""

import uuid

import anyio

from aiorocket import Message
from aiorocket.consumer import ConsumeFromWhere, Consumer, ConsumerMessage
from aiorocket.producer import Producer


async def main() -> None:
    run = uuid.uuid4().hex[:8]
    producer = Producer("example-producer", auto_batch=True)
    async with producer, anyio.create_task_group() as tg:
        for i in range(200):
            msg = Message("orders", b"event %d" % i, tags="metrics", keys=[run])
            tg.start_soon(producer.send, msg)

    count = 0
    done = anyio.Event()

    async def handle(msg: ConsumerMessage) -> None:
        nonlocal count
        if run in msg.keys:
            count += 1
            if count == 200:
                done.set()

    consumer = Consumer(
        "example-stats", handler=handle, consume_from_where=ConsumeFromWhere.FIRST_OFFSET
    )
    consumer.subscribe("orders", "metrics")
    async with consumer:
        consumer.stats()  # the starting point of the rates
        await done.wait()
        print(f"{'queue':<28} {'cached':>6} {'running':>7} {'committed':>9} {'consumed':>8}")
        for s in consumer.stats():
            if s.queue.topic == "orders":
                print(
                    f"{s.queue!s:<28} {s.cached:>6} {s.running:>7} {s.committed_offset:>9} "
                    f"{s.consumed:>8}  ({s.consume_rate:,.0f} msg/s)"
                )


anyio.run(main)
