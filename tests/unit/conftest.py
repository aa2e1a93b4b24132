"""The unit tests' collection: the simulator's seeds can be cut down for a second run.

``AIOROCKET_SIM_SEEDS=N`` keeps the first N seeds of each simulator test parametrized by ``seed``
(tests/unit/test_simulator.py): the other Pythons (scripts/pyversions.sh) run every unit
test but only a few seeds of each workload. The seeds are whole simulated runs, the
same code on every Python; 3.11's full set (scripts/test.sh) and scripts/simulate.py's
thousands of runs are where seeds find defects. Unset: every seed runs.
"""

from __future__ import annotations

import os

import pytest

_SIMULATOR = "test_simulator.py"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    limit = os.environ.get("AIOROCKET_SIM_SEEDS")
    if not limit:
        return
    keep_per_test = int(limit)
    seen: dict[str, int] = {}
    kept: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        callspec = getattr(item, "callspec", None)
        if item.path.name != _SIMULATOR or callspec is None or "seed" not in callspec.params:
            kept.append(item)
            continue
        name = item.originalname if isinstance(item, pytest.Function) else item.name
        seen[name] = seen.get(name, 0) + 1
        (kept if seen[name] <= keep_per_test else dropped).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
