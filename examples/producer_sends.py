"""Sending: await a result, fire and collect with backpressure, or one-way.

``send`` returns once a broker stored the message; it retries another broker on
failure (``retries=2``) within ``send_timeout`` (3 s). At most ``max_in_flight``
requests wait for brokers at once; ``start_send`` waits for one of those slots before
it spawns the send, so a loop feeding a task group is held back instead of piling up
tasks. ``send_oneway`` writes the message and does not wait for any answer.

Needs the topic: python -m aiorocket.testing.broker topic orders
"""

import anyio

from aiorocket import Message
from aiorocket.producer import Producer, SendResult


async def main() -> None:
    async with Producer("example-producer", max_in_flight=64) as producer:
        result = await producer.send(Message("orders", b"one", tags="paid", keys=["order-1"]))
        print("stored:", result.status.name, result.msg_id, result.queue, result.queue_offset)

        stored: list[SendResult] = []
        async with anyio.create_task_group() as tg:
            for i in range(100):
                msg = Message("orders", b"bulk %d" % i, tags="bulk")
                await producer.start_send(tg, msg, on_result=stored.append)
        print("start_send:", len(stored), "stored")

        await producer.send_oneway(Message("orders", b"metrics sample", tags="metrics"))


anyio.run(main)
