"""POP consumption over remoting: the brokers hand out messages, not queues.

``consume_mode="pop"`` (RocketMQ 5.x brokers): every member of the group pops from every
queue of its topics; a popped message stays invisible to the others until it is acked
(the consumer renews it while the handler runs), so any number of members share a
topic's messages, and one joining or leaving pauses nobody (there is no rebalance).
The handler and ``async for`` are the same as in pull mode.

Needs the topic: python -m aiorocket.testing.broker topic orders
"""

import uuid
from collections import Counter

import anyio

from aiorocket import Message
from aiorocket.consumer import ConsumeFromWhere, Consumer, ConsumerMessage
from aiorocket.producer import Producer

COUNT = 40


async def main() -> None:
    run = uuid.uuid4().hex[:8]
    handled_by: Counter[str] = Counter()
    done = anyio.Event()

    def member(name: str) -> Consumer:
        async def handle(msg: ConsumerMessage) -> None:
            if run not in msg.keys:
                return  # an older run's message
            handled_by[name] += 1
            await anyio.sleep(0.01)  # the work
            if sum(handled_by.values()) == COUNT:
                done.set()

        consumer = Consumer(
            "example-pop",
            handler=handle,
            consume_mode="pop",
            invisible_duration=30,  # a crashed member's messages come back after 30 s
            consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
        )
        consumer.subscribe("orders", "pop")
        return consumer

    async with member("a"), member("b"):
        async with Producer("example-producer") as producer:
            for n in range(COUNT):
                await producer.send(Message("orders", b"%d" % n, tags="pop", keys=[run]))
        with anyio.fail_after(60):
            await done.wait()
    print("handled", sum(handled_by.values()), "messages:", dict(sorted(handled_by.items())))


anyio.run(main)
