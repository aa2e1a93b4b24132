"""How received messages reach the application: one strategy per consumer, chosen at start.

* [`WorkerPool`][aiorocket.consumer.dispatch.WorkerPool]: handler calls by a fixed set of
  worker tasks (``handler=`` / ``batch_handler=``);
* [`Orderly`][aiorocket.consumer.orderly.Orderly]: one handler call at a time per locked
  queue, in offset order (``orderly=True``);
* [`Iterated`][aiorocket.consumer.iterate.Iterated]: ``async for msg in consumer``;
* [`Buffered`][aiorocket.consumer.buffered.Buffered]: per-queue buffers that
  [`PullConsumer`][aiorocket.consumer.PullConsumer] takes from.

The engine talks to each only through ``Delivery``, so no part of it asks which
mode it is in; and the strategies know a message's queue and settler only through the
core's ``QueueView`` and ``Settler``,
so the same strategies serve the remoting engine and the gRPC pop source.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import anyio.abc

    from aiorocket.consumer.committer import AutoCommit
    from aiorocket.consumer.locks import QueueLocks
    from aiorocket.consumer.process_queue import ProcessQueue
    from aiorocket.consumer.state import ConsumerState
    from aiorocket.received import ConsumerMessage, QueueView, Settler

__all__ = ["Delivery", "DeliveryFactory", "DeliveryParts"]


class Delivery(Protocol):
    """What the engine needs of a delivery strategy."""

    def deliver(self, pq: QueueView, messages: list[ConsumerMessage]) -> None:
        """Hand received messages on (synchronous: called on the pull path)."""

    async def start(self, tg: anyio.abc.TaskGroup) -> None:
        """Start the strategy's tasks (workers) in the engine's task group."""

    def start_queue(self, pq: QueueView) -> None:
        """A queue was assigned and its pulls started (gRPC FIFO: a message group
        appeared)."""

    async def quiesce(self, pqs: list[ProcessQueue]) -> None:
        """Revoked queues (already dropped): wait, bounded, for what must end before
        their offsets are committed."""

    async def release(self, pqs: list[ProcessQueue]) -> None:
        """Revoked queues, offsets committed: give up what the strategy holds of them."""

    def stop(self) -> list[ConsumerMessage]:
        """The consumer closes: take no new messages, and hand back those queued but
        never given to a handler or loop (the caller releases them: uncommitted on
        remoting, made visible again over gRPC), so a closing consumer only finishes
        what is running (a rolling restart duplicates no more than that)."""

    async def drain(self, *, graceful: bool) -> list[ConsumerMessage]:
        """At close (shielded): let in-flight work finish within ``shutdown_timeout``
        when ``graceful``, then stop every task of the strategy. Returns the messages
        whose handler call it cut (cancelled, unsettled): the engine hands them back
        (remoting: see ``RemotingSettler.hand_back``; gRPC: made visible again)."""


@dataclass(frozen=True, slots=True)
class DeliveryParts:
    """The engine's parts a strategy may be built with."""

    state: ConsumerState
    settler: Settler
    #: one handler call at a time per queue, in order: remoting ``orderly=True``, or a
    #: FIFO group over gRPC (the Proxy's setting)
    ordered: bool
    #: remoting: commits a revoked orderly queue before its lock is released
    commits: AutoCommit | None
    #: remoting orderly: the broker's queue locks (None: no locks, e.g. gRPC FIFO)
    locks: QueueLocks | None


DeliveryFactory = Callable[[DeliveryParts], Delivery]
