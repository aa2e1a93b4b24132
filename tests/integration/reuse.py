"""Running existing integration tests against another RocketMQ release.

A module of a version's test set (``test_rmq49.py``) takes tests written for the default
cluster with ``reuse`` and defines its own ``rocketmq`` fixture (the version's session
cluster): pytest collects the copies there, where that fixture wins over the conftest one.
Each copy runs on asyncio only (the trio runs of the default suite cover the backend).
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

import pytest


def reuse(test: Callable[..., Any], **only: list[Any]) -> Callable[..., Any]:
    """A copy of ``test`` for the importing module, without its own ``anyio_backend``
    parametrisation (the module pins one); ``only={"how": [...]}`` keeps those values of
    a parametrised argument (the others need a newer broker)."""
    assert isinstance(test, types.FunctionType)
    copy = types.FunctionType(
        test.__code__, test.__globals__, test.__name__, test.__defaults__, test.__closure__
    )
    copy.__kwdefaults__ = test.__kwdefaults__
    copy.__doc__ = test.__doc__
    copy.__annotations__ = test.__annotations__
    marks = getattr(test, "pytestmark", [])
    kept = []
    for mark in marks:
        if mark.name == "parametrize" and "anyio_backend" in str(mark.args[0]):
            continue
        if mark.name == "parametrize" and mark.args[0] in only:
            mark = pytest.mark.parametrize(mark.args[0], only[mark.args[0]]).mark
        kept.append(mark)
    copy.pytestmark = kept  # type: ignore[attr-defined]
    return copy
