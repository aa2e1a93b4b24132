"""What a handler can tell the consumer about a message it was given."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from aiorocket._validate import check_retry_delay
from aiorocket.errors import ConfigError

__all__ = [
    "DELAY_LEVELS",
    "RECONSUME_LATER",
    "SUCCESS",
    "ConsumeStatus",
    "HandlerResult",
    "Reconsume",
    "delay_level_for",
    "failure_delay_level",
    "retry_delay_of",
]

#: seconds of each delay level of a default broker (``messageDelayLevel``: level 1 is
#: 1 s, ..., level 18 is 2 h)
DELAY_LEVELS = (1, 5, 10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800,
                3600, 7200)  # fmt: skip


def delay_level_for(seconds: float) -> int:
    """The delay level a retry after ``seconds`` is sent back with over remoting pull:
    the shortest level of at least ``seconds`` (rounded up, so the message never comes
    back before it was asked to), at most the longest (level 18, 2 h)."""
    for level, delay in enumerate(DELAY_LEVELS, start=1):
        if delay >= seconds:
            return level
    return len(DELAY_LEVELS)


class ConsumeStatus(enum.Enum):
    SUCCESS = "CONSUME_SUCCESS"
    RECONSUME_LATER = "RECONSUME_LATER"


@dataclass(frozen=True, slots=True)
class Reconsume:
    """Return this from a handler to have the message redelivered later.

    ``delay_level`` follows the broker's levels (1 = 1 s … 18 = 2 h on a default
    broker); 0 lets the broker choose (3 + times already reconsumed); -1 sends the
    message straight to the dead-letter queue.

    ``delay`` asks for the message back after that many seconds instead: exactly over
    POP and gRPC (its invisible time), rounded up to a delay level over remoting pull
    (``delay_level_for``: 7 s comes back after 10 s); orderly consumption suspends the
    queue that long (as ``suspend``). It still counts as an attempt.
    """

    delay_level: int = 0
    #: orderly consumption: suspend the queue this many seconds before the retry.
    suspend: float | None = None
    #: seconds before the message comes back (None: ``delay_level``'s backoff)
    delay: float | None = None

    def __post_init__(self) -> None:
        if self.delay is not None:
            check_retry_delay(self.delay)
            if self.delay_level != 0:
                raise ConfigError("Reconsume: give delay (seconds) or delay_level, not both")


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


def retry_delay_of(result: HandlerResult) -> float | None:
    """The seconds a failure result asks its message back after (``Reconsume(delay=)``),
    None for the transport's backoff."""
    return result.delay if isinstance(result, Reconsume) else None
