"""How a failed handler call is logged, the same over remoting and gRPC.

* ``handler_failed`` (WARNING), each failed attempt: the message's topic and id, the
  attempt number (1 for the first delivery) and the error. The exception's traceback
  is attached only when the logger is enabled for DEBUG: a handler failing on every
  one of its 16 attempts should not print 16 tracebacks at WARNING.
* ``message_dead_lettered`` (WARNING), when the failed attempt was the last one and
  the message goes to the group's dead-letter queue: group (bound to the consumer's
  logger), topic, message id, attempts and the last error.
"""

from __future__ import annotations

import logging
from typing import Any

from aiorocket._log import Logger
from aiorocket.message import MessageExt

__all__ = ["handler_failed", "message_dead_lettered", "msg_id_of"]


def msg_id_of(msg: MessageExt) -> str:
    """The message's id for a log: a log call must not raise, and the offset id of a
    message without a store host (built in a test, never pulled) cannot be formed."""
    try:
        return msg.msg_id
    except ValueError:
        return ""


def handler_failed(log: Logger, error: BaseException, *, attempt: int, **context: Any) -> None:
    """Log one failed handler call (the traceback only when DEBUG is enabled)."""
    if log.isEnabledFor(logging.WARNING):
        trace = error if log.isEnabledFor(logging.DEBUG) else None
        log.warning("handler_failed", attempt=attempt, error=repr(error), exc_info=trace,
                    **context)  # fmt: skip


def message_dead_lettered(
    log: Logger, *, topic: str, msg_id: str, attempts: int, error: str, **context: Any
) -> None:
    """Log that a message's last attempt failed: it goes to the dead-letter queue."""
    log.warning("message_dead_lettered", topic=topic, msg_id=msg_id, attempts=attempts,
                error=error, **context)  # fmt: skip
