"""Optional modules name the extra they need when its dependency is missing.

An optional module (the command line, the service integrations, the Spark data source,
the gRPC transport) imports its third-party dependencies inside ``needs_extra``, so
that a base install (``pip install aiorocketmq``) gets one sentence saying what to
install instead of a bare ``No module named 'click'``. The error stays a
``ModuleNotFoundError`` with the missing module's ``name``: code that probes for an
optional feature with ``except ImportError`` works as before.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["DIST", "install_hint", "needs_extra"]

#: the distribution's name on PyPI (the import package is ``aiorocket``)
DIST = "aiorocketmq"


def install_hint(extra: str) -> str:
    return f"pip install '{DIST}[{extra}]'"


@contextmanager
def needs_extra(extra: str, feature: str) -> Iterator[None]:
    """Imports inside the block need ``extra``: a missing one is named, with the fix."""
    try:
        yield
    except ModuleNotFoundError as exc:
        if exc.name is None or exc.name.split(".")[0] in ("aiorocket", "pyspark_rocketmq"):
            raise  # a bug of ours, not a missing extra
        raise ModuleNotFoundError(
            f"{feature} needs the '{extra}' extra ({exc.name} is missing): {install_hint(extra)}",
            name=exc.name,
        ) from exc
