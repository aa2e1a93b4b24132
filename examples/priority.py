"""Priority messages (RocketMQ 5.4+): urgent messages overtake a backlog.

On a topic of message type PRIORITY, ``Message(..., priority=p)`` is stored in queue
``min(p, queues - 1)`` and POP consumers (``consume_mode="pop"``, or any gRPC consumer)
are served from the highest queue first. Pull consumers see no priority.

Needs the topic: python -m aiorocket.testing.broker topic jobs --queues 4 --type PRIORITY
"""

import uuid

import anyio

from aiorocket import Message
from aiorocket.consumer import ConsumeFromWhere, Consumer, ConsumerMessage
from aiorocket.producer import Producer


async def main() -> None:
    run = uuid.uuid4().hex[:8]
    async with Producer("example-producer") as producer:
        for n in range(20):  # a backlog of routine jobs
            await producer.send(Message("jobs", b"routine %d" % n, keys=[run], priority=0))
        await producer.send(Message("jobs", b"urgent", keys=[run], priority=3))

    order: list[bytes] = []
    done = anyio.Event()

    async def handle(msg: ConsumerMessage) -> None:
        if run in msg.keys:
            order.append(msg.body)
            if len(order) == 21:
                done.set()

    consumer = Consumer(
        "example-priority",
        handler=handle,
        consume_mode="pop",
        pull_batch_size=1,  # one message per pop: the next pop sees the newest urgent one
        consume_concurrency=1,
        consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
    )
    consumer.subscribe("jobs")
    async with consumer:
        with anyio.fail_after(60):
            await done.wait()
    position = order.index(b"urgent")
    print(f"the urgent job, sent after 20 routine ones, was handled {position + 1}. of 21")
    # Not necessarily first: each broker's pops and the consumer's cache may already hold
    # a few routine jobs when the urgent one is stored. It overtakes the backlog.
    assert position < 10, order


anyio.run(main)
