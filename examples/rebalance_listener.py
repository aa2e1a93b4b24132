"""A rebalance listener: told which queues this consumer gains and loses.

``on_queues_revoked`` runs before a dropped queue's offset is committed (and, when
orderly, before its lock is released), ``on_queues_assigned`` after new queues started
pulling: the place to flush or load per-queue state.

Needs the topic: python -m aiorocket.testing.broker topic orders
"""

from collections.abc import Callable

import anyio

from aiorocket.consumer import Consumer
from aiorocket.message import MessageQueue


class Listener:
    def __init__(self, name: str) -> None:
        self.name = name
        self.owned: set[MessageQueue] = set()
        self._changed = anyio.Event()

    async def on_queues_assigned(self, queues: list[MessageQueue]) -> None:
        # (the group's retry topic %RETRY%example-rebalance is rebalanced too)
        self.owned |= {q for q in queues if q.topic == "orders"}
        self._notify(f"+{len(queues)}")

    async def on_queues_revoked(self, queues: list[MessageQueue]) -> None:
        self.owned -= {q for q in queues if q.topic == "orders"}
        self._notify(f"-{len(queues)}")

    def _notify(self, change: str) -> None:
        print(f"{self.name}: {change} queues, owns {len(self.owned)} of orders")
        self._changed.set()
        self._changed = anyio.Event()

    async def wait_until(self, condition: Callable[[], bool]) -> None:
        while not condition():
            await self._changed.wait()


async def main() -> None:
    first, second = Listener("first"), Listener("second")
    one = Consumer("example-rebalance", listener=first)
    one.subscribe("orders")
    async with one:
        total = len(first.owned)  # every queue of the topic
        two = Consumer("example-rebalance", listener=second)
        two.subscribe("orders")
        async with two:
            # Joining makes the brokers notify the group: both rebalance and split.
            await first.wait_until(lambda: len(first.owned) < total)
            await second.wait_until(lambda: len(first.owned) + len(second.owned) == total)
            print("split:", len(first.owned), "+", len(second.owned), "of", total)
        # The second one left: the first takes every queue back.
        await first.wait_until(lambda: len(first.owned) == total)
    print("first owns all", total, "queues again")


anyio.run(main)
