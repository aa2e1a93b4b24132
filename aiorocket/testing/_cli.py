"""Command line of [`aiorocket.testing.broker`][]: the ``aiorocket broker`` commands.

One command set (`aiorocket.testing._commands`, click, also `aiorocket broker`); ``python -m
aiorocket.testing.broker`` and ``aiorocket-broker`` run it under their own names.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence


def run(argv: Sequence[str] | None = None, prog_name: str = "python -m aiorocket.testing.broker"
        ) -> int:  # fmt: skip
    """Run ``argv`` (default: the process's arguments); the exit status."""
    try:
        from aiorocket.testing._commands import broker
    except ImportError as exc:  # click is the cli extra
        print(f"error: the local broker's command line needs click ({exc.name} is missing): "
              "pip install 'aiorocketmq[cli]'", file=sys.stderr)  # fmt: skip
        return 1
    try:
        broker.main(args=list(argv) if argv is not None else None, prog_name=prog_name)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
    return 0
