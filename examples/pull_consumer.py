"""PullConsumer: you ask for messages (``getmany``/``getone``/``async for``).

Queues are still pulled ahead of you in the background (with the push consumer's flow
control), and ``pause``/``resume``/``seek`` act on one queue. With
``auto_commit=False`` nothing is committed until you call ``commit()``: after a crash,
everything returned since the last commit is delivered again.

Needs the topic: python -m aiorocket.testing.broker topic orders
"""

import uuid

import anyio

from aiorocket import Message
from aiorocket.consumer import ConsumeFromWhere, PullConsumer
from aiorocket.producer import Producer


async def main() -> None:
    run = uuid.uuid4().hex[:8]
    async with Producer("example-producer") as producer:
        for i in range(20):
            await producer.send(Message("orders", b"row %d" % i, tags="etl", keys=[run]))

    consumer = PullConsumer(
        "example-pull", auto_commit=False, consume_from_where=ConsumeFromWhere.FIRST_OFFSET
    )
    consumer.subscribe("orders", "etl")
    rows: list[bytes] = []
    async with consumer:
        while len(rows) < 20:
            batch = await consumer.getmany(timeout=5.0, max_records=8)
            for queue, messages in batch.items():
                mine = [m.body for m in messages if run in m.keys]
                rows.extend(mine)
                print(f"{queue}: {len(messages)} messages, next offset {consumer.position(queue)}")
            await consumer.commit()  # processed: store the positions
    print(len(rows), "rows")


anyio.run(main)
