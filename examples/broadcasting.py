"""Broadcasting: every consumer of the group gets every message.

Offsets are kept per consumer in a local file (``offset_store_dir``, by default
``~/.aiorocket/offsets``), found again after a restart by a stable ``instance_name``.
A failed message is retried locally ``broadcast_max_retries`` times, then dropped.

Needs the topic: python -m aiorocket.testing.broker topic orders
"""

import tempfile
import uuid
from collections import defaultdict

import anyio

from aiorocket import Message
from aiorocket.consumer import ConsumeFromWhere, Consumer, ConsumerMessage, MessageModel
from aiorocket.producer import Producer


async def main() -> None:
    run = uuid.uuid4().hex[:8]
    received: dict[str, list[bytes]] = defaultdict(list)
    everyone_has_all = anyio.Event()

    def cache_node(name: str, offsets_dir: str) -> Consumer:
        async def handle(msg: ConsumerMessage) -> None:
            if run in msg.keys:
                received[name].append(msg.body)
                if all(len(received[n]) == 3 for n in ("node-1", "node-2")):
                    everyone_has_all.set()

        consumer = Consumer(
            "example-cache-invalidation",
            handler=handle,
            message_model=MessageModel.BROADCASTING,
            instance_name=name,
            offset_store_dir=offsets_dir,
            consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
        )
        consumer.subscribe("orders", "invalidate")
        return consumer

    with tempfile.TemporaryDirectory() as offsets_dir:
        async with cache_node("node-1", offsets_dir), cache_node("node-2", offsets_dir):
            async with Producer("example-producer") as producer:
                for key in (b"customer-1", b"customer-2", b"customer-3"):
                    await producer.send(Message("orders", key, tags="invalidate", keys=[run]))
            await everyone_has_all.wait()
    for name, bodies in sorted(received.items()):
        print(name, sorted(bodies))


anyio.run(main)
