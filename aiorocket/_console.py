"""The ``aiorocket`` console script: runs ``aiorocket.cli``, or says which extra it
needs (a base install has the script but not click and rich)."""

from __future__ import annotations

import sys

__all__ = ["main"]


def main() -> None:
    try:
        from aiorocket.cli import main as cli_main
    except ModuleNotFoundError as exc:
        if "aiorocketmq[" not in str(exc):  # not a missing extra: a real bug, show it all
            raise
        print(f"aiorocket: {exc}", file=sys.stderr)
        sys.exit(1)
    cli_main()
