"""Request-reply: a producer asks, a consumer of the topic answers, the asker gets it.

``producer.request(msg, timeout=...)`` sends ``msg`` and returns the reply; the
consumer's handler answers with ``replier.reply(msg, body)``. The broker pushes the reply
straight to the asking producer (remoting only; Java clients can be on either side).

Needs the topic: python -m aiorocket.testing.broker topic prices
"""

import anyio

from aiorocket import BrokerResponseError, Message
from aiorocket.consumer import ConsumeFromWhere, Consumer, ConsumerMessage
from aiorocket.producer import Producer

PRICES = {b"apple": b"1.20", b"pear": b"0.95"}


async def main() -> None:
    async with Producer("example-pricing") as replier:

        async def handle(msg: ConsumerMessage) -> None:
            if "CORRELATION_ID" not in msg.properties:  # not a request: nothing to answer
                return
            try:
                await replier.reply(msg, PRICES.get(msg.body, b"unknown"))
            except BrokerResponseError as exc:  # the asker is gone (an old request)
                print("not answered:", exc)

        consumer = Consumer(
            "example-pricing-service",
            handler=handle,
            consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
        )
        consumer.subscribe("prices")
        async with consumer, Producer("example-shop") as shop:
            for item in (b"apple", b"pear"):
                # the first request waits for the new consumer to join: a generous timeout
                reply = await shop.request(Message("prices", item), timeout=30)
                print(item.decode(), "costs", reply.body.decode())


anyio.run(main)
