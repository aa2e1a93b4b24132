"""Shared handling of client settings: a config dataclass plus keyword overrides."""

from __future__ import annotations

from dataclasses import fields
from typing import Any, Protocol, TypeVar

from aiorocket.errors import ConfigError


class _Config(Protocol):
    def validate(self) -> None: ...


C = TypeVar("C", bound=_Config)


def check_group(group: str, kind: str) -> None:
    """Group names travel in headers and topic names (%RETRY%<group>): keep them plain."""
    if not group or any(c in group for c in " \t\r\n%"):
        raise ConfigError(f"invalid {kind} group {group!r}")


def apply_settings(config: C, settings: dict[str, Any], kind: str) -> C:
    """``config`` with keyword overrides applied and validated; unknown names are errors."""
    known = {f.name for f in fields(config)}  # type: ignore[arg-type]
    for name, value in settings.items():
        if name not in known:
            raise ConfigError(f"unknown {kind} setting {name!r}")
        setattr(config, name, value)
    config.validate()
    return config
