"""The middlewares need FastStream's own extras (``faststream[otel]``,
``faststream[prometheus]``): a missing one is named, with the fix."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["needs_faststream_extra"]


@contextmanager
def needs_faststream_extra(extra: str, feature: str) -> Iterator[None]:
    try:
        yield
    except ModuleNotFoundError as exc:
        if exc.name is None or exc.name.split(".")[0] == "aiorocket":
            raise
        raise ModuleNotFoundError(
            f"{feature} needs FastStream's '{extra}' extra ({exc.name} is missing): "
            f"pip install 'faststream[{extra}]'",
            name=exc.name,
        ) from exc
