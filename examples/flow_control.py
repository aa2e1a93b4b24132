"""Rate limits, pause and resume: a consumer paused while its downstream is down, then
receiving at most 20 messages a second once it is back.

``pause()`` stops *receiving* (running handlers finish, nothing is lost or reordered)
and ``resume()`` goes on where it stopped; ``max_rate`` makes each receive loop wait for
a token bucket before it asks the broker, so the backlog waits on the broker, not in
the consumer's cache (docs/consumer/flow-control.md).

Needs the topic: python -m aiorocket.testing.broker topic flow-orders
"""

import time
import uuid

import anyio

from aiorocket import Message
from aiorocket.consumer import ConsumeFromWhere, Consumer, ConsumerMessage
from aiorocket.producer import Producer

COUNT = 80


async def main() -> None:
    run = uuid.uuid4().hex[:8]
    async with Producer("example-producer") as producer:
        for i in range(COUNT):
            await producer.send(Message("flow-orders", str(i).encode(), keys=[run]))

    handled: set[bytes] = set()
    all_handled = anyio.Event()

    async def handle(msg: ConsumerMessage) -> None:
        if run not in msg.keys:  # an earlier run's
            return
        handled.add(msg.body)
        if len(handled) == COUNT:
            all_handled.set()

    consumer = Consumer(
        "example-flow",
        handler=handle,
        max_rate=20.0,  # messages a second, all topics together
        pull_batch_size=1,  # a batch is not split: small batches for a low rate
        consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
    )
    consumer.subscribe("flow-orders")
    consumer.pause("flow-orders")  # the downstream is down: receive nothing yet
    async with consumer:
        await anyio.sleep(1.0)
        assert not handled, "received while paused"
        assert consumer.paused() == {"flow-orders"}
        consumer.resume()  # the downstream is back
        started = time.monotonic()
        with anyio.fail_after(60):
            await all_handled.wait()
        took = time.monotonic() - started
    # A second's worth (20) plus one batch per queue (16 queues of 1) may come at once,
    # the other 44 at 20 a second: at least 2.2 s.
    assert took >= 1.5, took
    print(f"handled {len(handled)} messages in {took:.1f}s after resume (max_rate=20)")


if __name__ == "__main__":
    anyio.run(main)
