"""A message that keeps failing is retried, then moved to the dead-letter queue.

Each failure sends the message back to the broker, which redelivers it through the
group's retry topic ``%RETRY%<group>`` after the delay level's time. After
``max_reconsume_times`` retries (16 by default) it goes to ``%DLQ%<group>`` instead,
where a consumer subscribed to that topic can read it.

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
        await producer.send(Message("orders", b"poison", tags="paid", keys=[run]))

    attempts: list[tuple[int, str]] = []
    gave_up = anyio.Event()

    async def handle(msg: ConsumerMessage) -> None:
        if run not in msg.keys:
            return
        attempts.append((msg.reconsume_times, msg.topic))  # the original topic, restored
        if msg.reconsume_times == 1:
            gave_up.set()
        raise ValueError("cannot process this message")  # a failure: sent back

    consumer = Consumer(
        "example-retries",
        handler=handle,
        max_reconsume_times=1,  # one retry, then the dead-letter queue
        retry_delay_level=1,  # retry after 1 s (default: the broker's 10 s, 30 s, ...)
        consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
    )
    consumer.subscribe("orders", "paid")
    async with consumer:
        await gave_up.wait()
    # The last failure moved the message to %DLQ%example-retries.
    print("attempts (reconsume_times, topic):", attempts)


anyio.run(main)
