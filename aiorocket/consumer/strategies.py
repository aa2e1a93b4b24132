"""Which delivery strategy a consumer runs: one choice, for both transports."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from aiorocket.consumer.dispatch import WorkerPool
from aiorocket.consumer.iterate import Iterated
from aiorocket.consumer.iterate_ordered import OrderedIterated
from aiorocket.consumer.orderly import Orderly

if TYPE_CHECKING:
    from aiorocket.consumer.delivery import Delivery, DeliveryFactory, DeliveryParts
    from aiorocket.consumer.handler import Handler

__all__ = ["choose_delivery"]


def choose_delivery(
    handler: Handler | None, on_iterated: Callable[[Iterated], None]
) -> DeliveryFactory:
    """The factory of the strategy for ``handler``: ``async for`` without one (handed
    to ``on_iterated``, where the consumer's ``messages()`` finds it; one message per
    message group at a time when the parts say ``ordered``), one call at a time per
    queue when they say ``ordered``, else the worker pool."""

    def make(parts: DeliveryParts) -> Delivery:
        if handler is None:
            kind = OrderedIterated if parts.ordered else Iterated
            iterated = kind(parts.state, parts.settler)
            on_iterated(iterated)
            return iterated
        if parts.ordered:
            return Orderly(parts.state, handler, parts.settler, parts.locks, parts.commits)
        return WorkerPool(parts.state, handler, parts.settler)

    return make
