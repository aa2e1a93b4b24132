"""The README's and the docs' code runs as written against the real broker."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from aiorocket.testing.broker import LocalRocketMQ
from tests import snippets
from tests.forked import ForkServer

pytestmark = pytest.mark.integration

DOCS = [p for p in snippets.doc_files() if snippets.python_blocks(p)]


@pytest.mark.parametrize("doc", DOCS, ids=[str(p.relative_to(snippets.REPO)) for p in DOCS])
def test_python_blocks_run_as_written(
    rocketmq: LocalRocketMQ, doc: Path, tmp_path: Path, forks: ForkServer
) -> None:
    snippets.create_documented_topics(rocketmq)
    for block in snippets.python_blocks(doc):
        snippets.run_block(block, snippets.env_for(rocketmq), tmp_path, sys.executable, forks)


def test_readme_shows_topic_creation_and_the_address_from_the_environment() -> None:
    readme = snippets.REPO / "README.md"
    assert ["topic", "orders"] in snippets.topic_commands(readme)
    first = snippets.python_blocks(readme)[0].code
    assert "namesrv" not in first  # the address comes from AIOROCKET_NAMESRV_ADDR


def test_readme_describes_exactly_the_declared_extras() -> None:
    tomllib = pytest.importorskip("tomllib")
    pyproject = tomllib.loads((snippets.REPO / "pyproject.toml").read_text())
    extras = set(pyproject["project"].get("optional-dependencies", {}))
    readme = (snippets.REPO / "README.md").read_text()
    table = set(re.findall(r"^\| `([\w-]+)` \|", readme, re.MULTILINE))
    assert table == extras
    for extra in extras:
        assert f"pip install 'aiorocketmq[{extra}]'" in readme
