"""scripts/_groups.py: bootstrap.sh's fallback when pip cannot install dependency groups."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
tomllib = pytest.importorskip("tomllib")


def listed(*groups: str) -> list[str]:
    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "_groups.py"), *groups],
        capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    return proc.stdout.splitlines()


def test_dev_group_includes_the_docs_group() -> None:
    groups = tomllib.loads((REPO / "pyproject.toml").read_text())["dependency-groups"]
    expected: list[str] = []
    for item in groups["dev"]:  # {include-group = "docs"} stands for the docs group's list
        expected += groups[item["include-group"]] if isinstance(item, dict) else [item]
    assert listed("dev") == expected
    assert set(groups["docs"]) <= set(expected)


def test_several_groups_are_listed_in_order() -> None:
    assert listed("docs", "bench") == listed("docs") + listed("bench")
