"""Lite topics (RocketMQ 5.5+): many small topics inside one parent topic.

A topic of message type LITE holds any number of lite topics (one per chat room, per
user, per session ...) that cost the broker next to nothing. A message names its lite
topic; a lite consumer, bound to the parent topic, subscribes to the lite topics it
wants, and changes them while it runs. Each lite topic is delivered in order.

Needs the topic: python -m aiorocket.testing.broker topic chat --type LITE
"""

import uuid

import anyio

from aiorocket import Message
from aiorocket.admin import Admin
from aiorocket.consumer import Consumer, ConsumerMessage
from aiorocket.producer import Producer


async def main() -> None:
    run = uuid.uuid4().hex[:8]
    group = f"example-lite-{run}"
    async with Admin() as admin:  # a lite group is bound to its parent topic
        await admin.create_group(group, lite_bind_topic="chat")

    rooms: dict[str, list[str]] = {}
    got_three = anyio.Event()

    async def handle(msg: ConsumerMessage) -> None:
        assert msg.lite_topic is not None
        rooms.setdefault(msg.lite_topic, []).append(msg.body.decode())
        if sum(map(len, rooms.values())) == 3:
            got_three.set()

    consumer = Consumer(group, handler=handle, bind_topic="chat")
    await consumer.subscribe_lite(f"room-1-{run}")  # before the start ...
    async with consumer, Producer("example-producer") as producer:
        await consumer.subscribe_lite(f"room-2-{run}")  # ... or while running
        for room, text in [("1", "hello"), ("2", "hi there"), ("3", "nobody listens"),
                           ("1", "how are you?")]:  # fmt: skip
            await producer.send(Message("chat", text.encode(), lite_topic=f"room-{room}-{run}"))
        with anyio.fail_after(30):
            await got_three.wait()
        await consumer.unsubscribe_lite(f"room-1-{run}")
        print("subscribed now:", sorted(consumer.lite_topics))
    for room, texts in sorted(rooms.items()):
        print(f"{room}: {texts}")
    assert rooms == {f"room-1-{run}": ["hello", "how are you?"], f"room-2-{run}": ["hi there"]}


anyio.run(main)
