"""``aiorocket broker``: the local test RocketMQ's commands (defined in the test harness,
[`aiorocket.testing._commands`][], which ``python -m aiorocket.testing.broker`` runs too)."""

from __future__ import annotations

from aiorocket.testing._commands import broker

__all__ = ["broker"]
