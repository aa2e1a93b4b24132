"""The README is the package index's long description: its links must lead somewhere.

Relative links work in the repository only. While pyproject.toml's ``[project.urls]``
has no Source or Documentation address they must at least resolve in the repository;
once it has one, every link must be absolute (to the repository or the docs site).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

REPO = Path(__file__).resolve().parents[2]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def links(text: str) -> list[str]:
    return LINK.findall(text)


def relative(targets: list[str]) -> list[str]:
    return [t for t in targets if not re.match(r"^[a-z][a-z0-9+.-]*:", t) and not t.startswith("#")]


def test_link_parsing() -> None:
    text = "see [the CLI](docs/cli.md), [site](https://x.org/a) and [top](#install)"
    assert relative(links(text)) == ["docs/cli.md"]


def test_readme_links_resolve_and_become_absolute_with_project_urls() -> None:
    readme = (REPO / "README.md").read_text()
    urls = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["urls"]
    left = relative(links(readme))
    assert left, "no relative link: drop the README's note about them"
    if {"Source", "Documentation"} & set(urls):
        assert left == [], "project.urls has a public address: make these links absolute"
    missing = [t for t in left if not (REPO / t.split("#")[0]).exists()]
    assert missing == []
