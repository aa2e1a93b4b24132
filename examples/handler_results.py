"""What a handler returns decides what happens to its message.

* ``None`` / ``True`` / ``SUCCESS``: consumed.
* ``False`` / ``RECONSUME_LATER`` / raising: sent back, redelivered after the delay of
  the next level (10 s, 30 s, 1 min, ... as the broker counts retries).
* ``Reconsume(delay_level=n)``: sent back with that delay level (1 = 1 s on a default
  broker); ``Reconsume(delay_level=-1)`` sends the message straight to the dead-letter
  queue.

A ``batch_handler`` gets up to ``consume_batch_size`` messages of one queue at once,
settled together.

Needs the topic: python -m aiorocket.testing.broker topic orders
"""

import uuid

import anyio

from aiorocket import Message
from aiorocket.consumer import ConsumeFromWhere, Consumer, ConsumerMessage, Reconsume
from aiorocket.producer import Producer


async def main() -> None:
    run = uuid.uuid4().hex[:8]
    async with Producer("example-producer") as producer:
        await producer.send(Message("orders", b"flaky", tags="paid", keys=[run]))
        for i in range(8):
            msg = Message("orders", b"bulk %d" % i, tags="bulk", keys=[run])
            await producer.send(msg, sharding_key=run)  # all in one queue

    attempts: list[int] = []
    done = anyio.Event()

    async def handle(msg: ConsumerMessage) -> Reconsume | None:
        if run not in msg.keys:
            return None
        attempts.append(msg.reconsume_times)
        if msg.reconsume_times == 0:
            return Reconsume(delay_level=1)  # not now: again in about a second
        done.set()
        return None

    consumer = Consumer(
        "example-results", handler=handle, consume_from_where=ConsumeFromWhere.FIRST_OFFSET
    )
    consumer.subscribe("orders", "paid")
    async with consumer:
        await done.wait()
    print("delivered with reconsume_times", attempts)  # [0, 1]

    batches: list[int] = []
    bulk_done = anyio.Event()

    async def handle_batch(msgs: list[ConsumerMessage]) -> None:
        mine = [m for m in msgs if run in m.keys]
        batches.append(len(mine))
        if sum(batches) == 8:
            bulk_done.set()

    bulk = Consumer(
        "example-results-batch",
        batch_handler=handle_batch,
        consume_batch_size=4,
        consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
    )
    bulk.subscribe("orders", "bulk")
    async with bulk:
        await bulk_done.wait()
    print("batch sizes", [n for n in batches if n])


anyio.run(main)
