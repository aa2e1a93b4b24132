"""Recall a timer message before its delivery time (RocketMQ 5.3.2+).

The send of a timer message (``deliver_time_ms``) returns a ``recall_handle``;
``producer.recall(topic, handle)`` before that time withdraws the message: it is never
delivered. The broker must allow it (``recallMessageEnable=true``, off by default; the
local broker of aiorocket.testing turns it on).

Needs the topic: python -m aiorocket.testing.broker topic orders
"""

import time
import uuid

import anyio

from aiorocket import Message
from aiorocket.consumer import ConsumeFromWhere, Consumer, ConsumerMessage
from aiorocket.producer import Producer


async def main() -> None:
    run = uuid.uuid4().hex[:8]
    arrived: list[bytes] = []
    reminder = anyio.Event()

    async def handle(msg: ConsumerMessage) -> None:
        if run in msg.keys:
            arrived.append(msg.body)
            if msg.body == b"reminder":
                reminder.set()

    consumer = Consumer(
        "example-recall", handler=handle, consume_from_where=ConsumeFromWhere.FIRST_OFFSET
    )
    consumer.subscribe("orders", "timer")
    async with consumer, Producer("example-producer") as producer:
        due = int(time.time() * 1000) + 2000  # both due in 2 s
        cancelled = await producer.send(
            Message("orders", b"cancelled order", tags="timer", keys=[run], deliver_time_ms=due)
        )
        await producer.send(
            Message("orders", b"reminder", tags="timer", keys=[run], deliver_time_ms=due)
        )
        assert cancelled.recall_handle is not None
        msg_id = await producer.recall("orders", cancelled.recall_handle)
        print("recalled", msg_id)
        with anyio.fail_after(30):
            await reminder.wait()
    assert arrived == [b"reminder"], arrived
    print("delivered:", [body.decode() for body in arrived])


anyio.run(main)
