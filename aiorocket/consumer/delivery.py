"""How pulled messages reach the application: one strategy per consumer, chosen at start.

* [`WorkerPool`][aiorocket.consumer.dispatch.WorkerPool]: handler calls by a fixed set of
  worker tasks (``handler=`` / ``batch_handler=``);
* [`Orderly`][aiorocket.consumer.orderly.Orderly]: one handler call at a time per locked
  queue, in offset order (``orderly=True``);
* [`Iterated`][aiorocket.consumer.iterate.Iterated]: ``async for msg in consumer``;
* [`Buffered`][aiorocket.consumer.buffered.Buffered]: per-queue buffers that
  [`PullConsumer`][aiorocket.consumer.PullConsumer] takes from.

The engine talks to each only through ``Delivery``, so no part of it asks which
mode it is in.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import anyio.abc

    from aiorocket.consumer.committer import AutoCommit
    from aiorocket.consumer.locks import QueueLocks
    from aiorocket.consumer.message import ConsumerMessage
    from aiorocket.consumer.process_queue import ProcessQueue
    from aiorocket.consumer.settle import RemotingSettler
    from aiorocket.consumer.state import ConsumerState

__all__ = ["Delivery", "DeliveryFactory", "DeliveryParts"]


class Delivery(Protocol):
    """What the engine needs of a delivery strategy."""

    def deliver(self, pq: ProcessQueue, messages: list[ConsumerMessage]) -> None:
        """Hand pulled messages on (synchronous: called on the pull path)."""

    async def start(self, tg: anyio.abc.TaskGroup) -> None:
        """Start the strategy's tasks (workers) in the engine's task group."""

    def start_queue(self, pq: ProcessQueue) -> None:
        """A queue was assigned and its pulls started."""

    async def quiesce(self, pqs: list[ProcessQueue]) -> None:
        """Revoked queues (already dropped): wait, bounded, for what must end before
        their offsets are committed."""

    async def release(self, pqs: list[ProcessQueue]) -> None:
        """Revoked queues, offsets committed: give up what the strategy holds of them."""

    def stop(self) -> None:
        """The consumer closes: take no new messages."""

    async def drain(self, *, graceful: bool) -> None:
        """At close (shielded): let in-flight work finish within ``shutdown_timeout``
        when ``graceful``, then stop every task of the strategy."""


@dataclass(frozen=True, slots=True)
class DeliveryParts:
    """The engine's parts a strategy may be built with."""

    state: ConsumerState
    settler: RemotingSettler
    commits: AutoCommit
    locks: QueueLocks | None


DeliveryFactory = Callable[[DeliveryParts], Delivery]
