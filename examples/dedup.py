"""Idempotent consumption: an order sent twice is charged once.

``dedup=Dedup(store, key=...)`` claims each message's key before the handler runs; a
key handled already is settled without calling it. Here the key is the order id, so
two sends of one order (a producer that retried after a timeout, say) count once.
``MemoryDedupStore`` deduplicates within this process; ``RedisDedupStore`` across the
group's members (docs/consumer/dedup.md).

Needs the topic: python -m aiorocket.testing.broker topic orders
"""

import uuid

import anyio

from aiorocket import Message
from aiorocket.consumer import ConsumeFromWhere, Consumer, ConsumerMessage, Dedup, MemoryDedupStore
from aiorocket.producer import Producer


def order_id(msg: ConsumerMessage) -> str:
    return msg.properties.get("order_id", msg.msg_id)  # other messages: their id


async def main() -> None:
    run = uuid.uuid4().hex[:8]
    async with Producer("example-producer") as producer:
        for order in ["A", "A", "B"]:  # order A sent twice: two messages, two ids
            msg = Message("orders", b"charge", keys=[run], properties={"order_id": run + order})
            await producer.send(msg, sharding_key=run)  # one queue: in this order

    charged: list[str] = []
    done = anyio.Event()

    async def charge(msg: ConsumerMessage) -> None:
        if run not in msg.keys:
            return
        charged.append(msg.properties["order_id"][len(run) :])
        if charged[-1] == "B":
            done.set()  # one worker, one queue: A's copy was settled before B

    consumer = Consumer(
        "example-dedup",
        handler=charge,
        dedup=Dedup(MemoryDedupStore(), key=order_id),
        consume_concurrency=1,  # only so that B's call says A's copy is settled
        consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
    )
    consumer.subscribe("orders")
    async with consumer:
        with anyio.fail_after(60):
            await done.wait()
    assert charged == ["A", "B"], charged
    print("charged", charged)  # ['A', 'B']: the second A was settled, not charged


if __name__ == "__main__":
    anyio.run(main)
