"""A handler asks for its message back after a given time: ``Reconsume(delay=...)``.

Over remoting pull the broker has delay levels, not seconds: the message comes back
after the shortest level of at least the delay (1 s here: level 1). Over POP and gRPC
the invisible time is set to the delay itself; orderly consumers suspend the queue
that long (docs/consumer.md, "Retry after a given time").

Needs the topic: python -m aiorocket.testing.broker topic orders
"""

import time
import uuid

import anyio

from aiorocket import Message, Reconsume
from aiorocket.consumer import ConsumeFromWhere, Consumer, ConsumerMessage
from aiorocket.producer import Producer


async def main() -> None:
    run = uuid.uuid4().hex[:8]
    async with Producer("example-producer") as producer:
        await producer.send(Message("orders", b"reserve stock", keys=[run]))

    seen: list[float] = []
    done = anyio.Event()

    async def handle(msg: ConsumerMessage) -> Reconsume | None:
        if run not in msg.keys:
            return None
        seen.append(time.monotonic())
        if len(seen) == 1:
            return Reconsume(delay=1.0)  # not ready yet: again in a second
        done.set()
        return None

    consumer = Consumer(
        "example-retry-delay", handler=handle, consume_from_where=ConsumeFromWhere.FIRST_OFFSET
    )
    consumer.subscribe("orders")
    async with consumer:
        with anyio.fail_after(60):
            await done.wait()
    waited = seen[1] - seen[0]
    assert waited >= 1.0, waited  # never earlier than asked
    print(f"handled again {waited:.1f}s after asking for a 1 s delay")


if __name__ == "__main__":
    anyio.run(main)
