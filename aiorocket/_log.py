"""aiorocket's loggers: structlog events with context, emitted through stdlib ``logging``.

A library must not decide where its logs go: every event goes to the standard logger
``aiorocket.<component>`` (``aiorocket.consumer``, ``aiorocket.remoting.connection``, ...),
so an application that configures nothing sees only WARNING and above (Python's
last-resort handler, on stderr), and one that configures ``logging`` controls levels and
handlers as for any other library. aiorocket never touches structlog's global
configuration.

The code logs structlog-style (``log.bind(topic=...)``, ``log.warning("pull_failed",
error=...)``). What reaches ``logging`` is a record whose ``msg`` is the event dict: it
prints as ``pull_failed topic=orders queue=3 error=...`` through any formatter, its
context keys are also record attributes (for JSON formatters), and structlog's
``ProcessorFormatter`` renders it like the application's own structlog events.
A disabled level costs one ``isEnabledFor`` check.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import MutableMapping
from typing import Any

import structlog

__all__ = ["Logger", "get_logger"]

# Attributes a LogRecord has of its own: an ``extra`` key with one of these names raises.
_RESERVED = frozenset(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {
    "message",
    "asctime",
    "taskName",
}


class Event(dict[str, Any]):
    """An event dict that prints as ``event key=value ...`` (the record's message)."""

    def __str__(self) -> str:
        parts = [str(self.get("event"))]
        for key, value in self.items():
            if key in ("event", "exc_info"):
                continue
            text = str(value)
            if not text or any(c.isspace() for c in text):
                text = repr(text)
            parts.append(f"{key}={text}")
        return " ".join(parts)


def _exc_info(value: Any) -> Any:
    if value is True:
        return sys.exc_info()
    if isinstance(value, BaseException):
        return (type(value), value, value.__traceback__)
    return value or None


def _to_record(
    logger: Any, method_name: str, event_dict: MutableMapping[str, Any]
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The final processor: the arguments of the stdlib logger's method."""
    event = Event(event_dict)
    exc_info = _exc_info(event.pop("exc_info", None))
    if exc_info is not None and exc_info[0] is not None:
        event["exc_info"] = exc_info  # for structlog's ProcessorFormatter (it reads msg)
    else:
        exc_info = None
    extra = {k: v for k, v in event.items() if k not in _RESERVED and k != "exc_info"}
    # What structlog.stdlib.ProcessorFormatter looks for (see its wrap_for_formatter).
    extra["_logger"], extra["_name"] = logger, method_name
    return (event,), {"extra": extra, "exc_info": exc_info, **_STACKLEVEL}


# The record's file and line are the caller's, not structlog's: between the caller and
# the stdlib logger are Logger.<level> (or BoundLogger.exception), and structlog's two
# _proxy_to_logger. Python 3.10 counts these frames differently: there it stays off.
_STACKLEVEL = {"stacklevel": 4} if sys.version_info >= (3, 11) else {}


_PROCESSORS = [_to_record]


class Logger(structlog.stdlib.BoundLogger):
    """A structlog bound logger writing to a ``logging.Logger``.

    Each level is checked before the event dict is built, so debug events on hot paths
    cost next to nothing when DEBUG is off.
    """

    def debug(self, event: str | None = None, *args: Any, **kw: Any) -> Any:
        if self._logger.isEnabledFor(logging.DEBUG):
            return self._proxy_to_logger("debug", event, *args, **kw)
        return None

    def info(self, event: str | None = None, *args: Any, **kw: Any) -> Any:
        if self._logger.isEnabledFor(logging.INFO):
            return self._proxy_to_logger("info", event, *args, **kw)
        return None

    def warning(self, event: str | None = None, *args: Any, **kw: Any) -> Any:
        if self._logger.isEnabledFor(logging.WARNING):
            return self._proxy_to_logger("warning", event, *args, **kw)
        return None

    def error(self, event: str | None = None, *args: Any, **kw: Any) -> Any:
        if self._logger.isEnabledFor(logging.ERROR):
            return self._proxy_to_logger("error", event, *args, **kw)
        return None


def get_logger(component: str, **context: Any) -> Logger:
    """The logger of ``aiorocket.<component>``, bound to ``context``."""
    stdlib = logging.getLogger(f"aiorocket.{component}")
    return Logger(stdlib, _PROCESSORS, context)
