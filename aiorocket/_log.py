"""structlog loggers for aiorocket; every event carries its component and context."""

from __future__ import annotations

from typing import Any

import structlog


def get_logger(component: str, **context: Any) -> Any:
    """A bound structlog logger (``component`` plus whatever context the caller binds)."""
    return structlog.get_logger("aiorocket").bind(component=component, **context)
