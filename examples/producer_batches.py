"""Batches: several messages in one request, explicitly or automatically.

``send_batch`` sends messages of one topic in one request (they land consecutively in
one queue; each gets its own id and offset). ``auto_batch=True`` groups *concurrent*
plain sends of a topic into batch requests by itself, with no linger timer: a message
that finds the topic's requests busy leaves with the next one. The throughput gain
is large when many tasks send at once (see the benchmarks).

Needs the topic: python -m aiorocket.testing.broker topic orders
"""

import anyio

from aiorocket import Message
from aiorocket.producer import Producer


async def main() -> None:
    async with Producer("example-producer") as producer:
        batch = [Message("orders", b"line %d" % i, tags="import") for i in range(10)]
        results = await producer.send_batch(batch)
        queue = results[0].queue
        print(f"batch: {len(results)} messages in {queue}, offsets",
              [r.queue_offset for r in results])  # fmt: skip

    async with Producer("example-producer", auto_batch=True) as producer:

        async def client_task(n: int) -> None:
            for i in range(20):
                await producer.send(Message("orders", b"task %d msg %d" % (n, i), tags="auto"))

        async with anyio.create_task_group() as tg:
            for n in range(50):  # 50 tasks sending at once
                tg.start_soon(client_task, n)
        batcher = producer.batcher
        assert batcher is not None
        print(f"auto_batch: 1000 sends left in {batcher.batches} batch requests "
              f"(and {1000 - batcher.batched_messages} single ones)")  # fmt: skip


anyio.run(main)
