"""The message type consumers hand to user code: a stored message that can be settled."""

from __future__ import annotations

from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Protocol

from aiorocket.message import MessageExt

if TYPE_CHECKING:
    from aiorocket.consumer.process_queue import ProcessQueue

__all__ = [
    "ConsumerMessage",
    "Settler",
]


class Settler(Protocol):
    async def settle(self, msg: ConsumerMessage, delay_level: int | None) -> None: ...


@dataclass(slots=True, eq=False, repr=False)
class ConsumerMessage(MessageExt):
    """A received message.

    A message is *settled* exactly once: ``await msg.ack()`` marks it consumed (its
    offset may then be committed); ``await msg.nack(delay_level)`` sends it back for a
    later retry (or, after ``max_reconsume_times``, to the dead-letter queue).
    ``async with msg:`` acks on a clean exit and nacks when the block raises.
    Until it is settled, no offset at or past it is committed, so a crash or
    cancellation redelivers it.
    """

    _pq: ProcessQueue | None = None
    _generation: int = 0
    _settler: Settler | None = None
    _settled: bool = False
    _held: bool = False

    @property
    def settled(self) -> bool:
        return self._settled

    def current(self) -> bool:
        """Still to be handed out or handled: not settled, its queue still ours, and not
        reset (seek, OFFSET_ILLEGAL, an operator's reset) since it was pulled. The one
        check every delivery path makes before giving a message to the application."""
        pq = self._pq
        return (
            pq is not None
            and not self._settled
            and not pq.dropped
            and self._generation == pq.tracker.generation
        )

    async def ack(self) -> None:
        if self._settler is not None:
            await self._settler.settle(self, None)

    async def nack(self, delay_level: int = 0) -> None:
        if self._settler is not None:
            await self._settler.settle(self, delay_level)

    def hold(self) -> ConsumerMessage:
        """Take manual control: ``async for`` will not auto-ack this message."""
        self._held = True
        return self

    async def __aenter__(self) -> ConsumerMessage:
        self._held = True
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._settled:
            return
        if exc_type is None:
            await self.ack()
        elif isinstance(exc, Exception):
            await self.nack()
        # Cancellation and other BaseExceptions leave the message unsettled, so it is
        # redelivered rather than reported as a handler failure.

    def __repr__(self) -> str:
        state = "settled" if self._settled else "pending"
        return (
            f"ConsumerMessage(topic={self.topic!r}, queue={self.broker_name}:{self.queue_id}, "
            f"offset={self.queue_offset}, tags={self.tags!r}, body={len(self.body)}B, {state})"
        )
