"""What a handler can tell the consumer about a message it was given."""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = [
    "RECONSUME_LATER",
    "SUCCESS",
    "ConsumeStatus",
    "HandlerResult",
    "Reconsume",
    "failure_delay_level",
]


class ConsumeStatus(enum.Enum):
    SUCCESS = "CONSUME_SUCCESS"
    RECONSUME_LATER = "RECONSUME_LATER"


@dataclass(frozen=True, slots=True)
class Reconsume:
    """Return this from a handler to have the message redelivered later.

    ``delay_level`` follows the broker's levels (1 = 1 s … 18 = 2 h on a default
    broker); 0 lets the broker choose (3 + times already reconsumed); -1 sends the
    message straight to the dead-letter queue.
    """

    delay_level: int = 0
    #: orderly consumption: suspend the queue this many seconds before the retry.
    suspend: float | None = None


SUCCESS = ConsumeStatus.SUCCESS
RECONSUME_LATER = ConsumeStatus.RECONSUME_LATER

#: Everything a handler may return. ``None`` and ``True`` mean success; ``False`` means
#: RECONSUME_LATER; raising an exception is a failure too.
HandlerResult = ConsumeStatus | Reconsume | bool | None


def failure_delay_level(result: HandlerResult, default: int = 0) -> int | None:
    """None when the result means success, else the delay level to send back with."""
    if result is None or result is True or result is ConsumeStatus.SUCCESS:
        return None
    if isinstance(result, Reconsume):
        return result.delay_level
    if result is False or result is ConsumeStatus.RECONSUME_LATER:
        return default
    raise TypeError(f"handler returned {result!r}; expected None, bool, ConsumeStatus or Reconsume")
