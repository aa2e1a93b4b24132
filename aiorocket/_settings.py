"""Shared handling of client settings: a config dataclass plus keyword overrides."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import fields, replace
from typing import Any, Protocol, TypeGuard, TypeVar

from aiorocket.errors import ConfigError


class _Config(Protocol):
    def validate(self) -> None: ...


C = TypeVar("C", bound=_Config)


#: what the Java client takes (Validators.checkGroup), less '%': a group's name is part
#: of its retry and dead-letter topics' (%RETRY%<group>)
_GROUP_RE = re.compile(r"^[|a-zA-Z0-9_-]{1,255}$")


def check_group(group: str, kind: str) -> None:
    """Group names travel in headers and topic names (%RETRY%<group>): keep them plain."""
    if not isinstance(group, str) or not _GROUP_RE.match(group):
        raise ConfigError(
            f"invalid {kind} group {group!r}: 1 to 255 letters, digits, '-', '_' or '|'"
        )


def apply_settings(config: C, settings: dict[str, Any], kind: str) -> C:
    """A copy of ``config`` with keyword overrides applied and validated; unknown names
    are errors. The caller's object is never changed: one config may serve several
    clients with different overrides."""
    known = {f.name for f in fields(config)}  # type: ignore[arg-type]
    for name in settings:
        if name not in known:
            raise ConfigError(f"unknown {kind} setting {name!r}")
    config = replace(config, **settings)  # type: ignore[type-var]
    config.validate()
    return config


def check_positive_ints(values: Mapping[str, object]) -> None:
    """Each value is an int above 0 (``True`` is not a count, though Python says int)."""
    for name, value in values.items():
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise ConfigError(f"{name} must be a positive integer, got {value!r}")


def _is_number(value: object) -> TypeGuard[float]:
    """An int or a float, not a bool (``True`` is no number of seconds)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_positive_numbers(values: Mapping[str, object]) -> None:
    """Each value is a number of seconds (int or float, not bool) above 0."""
    for name, value in values.items():
        if not _is_number(value) or not value > 0:
            raise ConfigError(f"{name} must be a positive number, got {value!r}")


def check_finite_seconds(name: str, value: object) -> None:
    """``value`` is a finite number of seconds >= 0 (0: at once)."""
    if not _is_number(value) or not 0 <= value < math.inf:
        raise ConfigError(f"{name} must be a finite number of seconds >= 0, got {value!r}")


#: The bounds the Apache Proxy puts on a receive's invisible duration, in seconds
#: (ProxyConfig ``minInvisibleTimeMillsForRecv`` 10 s, ``maxInvisibleTimeMills`` 12 h);
#: outside them every receive fails.
MIN_INVISIBLE_DURATION = 10.0
MAX_INVISIBLE_DURATION = 12 * 3600.0


def check_invisible_duration(value: object) -> None:
    """A pop consumer's invisible duration: a number of seconds the Proxy accepts."""
    if not _is_number(value) or not (MIN_INVISIBLE_DURATION <= value <= MAX_INVISIBLE_DURATION):
        raise ConfigError(
            f"invisible_duration must be {MIN_INVISIBLE_DURATION:g}..{MAX_INVISIBLE_DURATION:g} "
            f"seconds (the Proxy's bounds), got {value!r}"
        )
