"""Delayed messages: delivered to consumers later, by level or at a given time.

``delay_level`` uses the broker's levels (1 s, 5 s, 10 s, 30 s, 1 min, ... 2 h on a
default broker); ``deliver_time_ms`` (RocketMQ 5.x timer messages) is an absolute
epoch-millisecond time.

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
    sent_at = time.time()
    async with Producer("example-producer") as producer:
        await producer.send(Message("orders", b"level 1", tags="reminder", keys=[run],
                                    delay_level=1))  # fmt: skip
        due = int((sent_at + 2) * 1000)
        await producer.send(Message("orders", b"at +2 s", tags="reminder", keys=[run],
                                    deliver_time_ms=due))  # fmt: skip

    arrived: dict[bytes, float] = {}
    both = anyio.Event()

    async def handle(msg: ConsumerMessage) -> None:
        if run in msg.keys:
            arrived[msg.body] = time.time() - sent_at
            if len(arrived) == 2:
                both.set()

    consumer = Consumer(
        "example-delays", handler=handle, consume_from_where=ConsumeFromWhere.FIRST_OFFSET
    )
    consumer.subscribe("orders", "reminder")
    async with consumer:
        await both.wait()
    for body, after in sorted(arrived.items(), key=lambda item: item[1]):
        print(f"{body.decode()}: delivered {after:.1f} s after sending")
    assert arrived[b"level 1"] >= 0.9 and arrived[b"at +2 s"] >= 1.9


anyio.run(main)
