"""Capture aiorocket's log events in tests.

aiorocket logs through the standard ``logging`` module (see [`aiorocket._log`][]), so
``structlog.testing.capture_logs`` does not see its events; this does, at every level:

```python
with capture_logs() as events:
    ...
assert any(e["event"] == "send_failed" for e in events)
```

Each entry is the event dict (``event``, the bound context, the call's keywords) plus
``log_level`` and ``logger`` (the stdlib logger's name).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["capture_logs"]


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.events: list[dict[str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        base = dict(record.msg) if isinstance(record.msg, dict) else {"event": record.getMessage()}
        base.update(log_level=record.levelname.lower(), logger=record.name)
        self.events.append(base)


@contextmanager
def capture_logs(
    logger: str = "aiorocket", level: int = logging.DEBUG
) -> Iterator[list[dict[str, Any]]]:
    """Collect the events of ``logger`` (and its children) at ``level`` and above."""
    target = logging.getLogger(logger)
    handler = _Collect()
    old_level = target.level
    target.addHandler(handler)
    target.setLevel(level)
    try:
        yield handler.events
    finally:
        target.removeHandler(handler)
        target.setLevel(old_level)
