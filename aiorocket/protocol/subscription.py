"""Subscription expressions: tag sets, their Java hash codes, SQL92 selectors."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from aiorocket.errors import ConfigError

__all__ = [
    "EXPRESSION_SQL92",
    "EXPRESSION_TAG",
    "SUB_ALL",
    "Subscription",
    "java_string_hash",
    "parse_tags",
]

SUB_ALL = "*"
EXPRESSION_TAG = "TAG"
EXPRESSION_SQL92 = "SQL92"


def java_string_hash(value: str) -> int:
    """Java's ``String.hashCode`` (over UTF-16 code units), as the broker computes tag codes."""
    h = 0
    data = value.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - 0x100000000 if h & 0x80000000 else h


def parse_tags(expression: str | None) -> frozenset[str]:
    """The tags of ``"tagA || tagB"``; empty means every tag (``"*"`` or blank)."""
    if expression is None:
        return frozenset()
    expression = expression.strip()
    if not expression or expression == SUB_ALL:
        return frozenset()
    tags = frozenset(part.strip() for part in expression.split("||") if part.strip())
    return tags


@dataclass(slots=True)
class Subscription:
    """What one consumer group subscribes to on one topic (heartbeat SubscriptionData)."""

    topic: str
    expression: str = SUB_ALL
    expression_type: str = EXPRESSION_TAG
    sub_version: int = field(default_factory=lambda: time.time_ns() // 1_000_000)
    tags: frozenset[str] = field(default_factory=frozenset)

    def __post_init__(self) -> None:
        if not self.topic:
            raise ConfigError("subscription topic must not be empty")
        if self.expression_type not in (EXPRESSION_TAG, EXPRESSION_SQL92):
            raise ConfigError(f"unknown expression type {self.expression_type!r}")
        if self.expression_type == EXPRESSION_TAG:
            self.expression = (self.expression or SUB_ALL).strip() or SUB_ALL
            self.tags = parse_tags(self.expression)
            if not self.tags:
                self.expression = SUB_ALL
        elif not self.expression.strip():
            raise ConfigError("an SQL92 subscription needs a non-empty expression")

    @property
    def matches_all(self) -> bool:
        return self.expression_type == EXPRESSION_TAG and not self.tags

    def accepts_tag(self, tag: str | None) -> bool:
        """Client-side re-filter: the broker only compares tag hash codes."""
        if self.expression_type != EXPRESSION_TAG or not self.tags:
            return True
        return tag is not None and tag in self.tags

    def to_heartbeat(self) -> dict[str, Any]:
        tags = sorted(self.tags)
        return {
            "classFilterMode": False,
            "topic": self.topic,
            "subString": self.expression,
            "tagsSet": tags,
            "codeSet": [java_string_hash(t) for t in tags],
            "subVersion": self.sub_version,
            "expressionType": self.expression_type,
        }
