"""Every program under examples/ runs against the real broker and exits cleanly."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from aiorocket.testing.broker import LocalRocketMQ
from tests import snippets
from tests.forked import ForkServer

pytestmark = pytest.mark.integration

ALL_EXAMPLES = sorted((snippets.REPO / "examples").glob("*.py"))
# demo.py has its own test below; the services (*_service.py) run until stopped and are
# driven over HTTP by test_service_examples.py.
EXAMPLES = [p for p in ALL_EXAMPLES if p.name != "demo.py" and not p.stem.endswith("_service")]


def _timeout(example: Path) -> float:
    # A Spark example starts a JVM and Python workers: over a minute on 2 loaded cores.
    return 360.0 if example.name.startswith("spark") else 120.0


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_runs(
    rocketmq: LocalRocketMQ, example: Path, tmp_path: Path, forks: ForkServer
) -> None:
    snippets.create_documented_topics(rocketmq)
    spark = example.name.startswith("spark")  # its JVM gains nothing from a fork
    proc = snippets.run_python([sys.executable, str(example)], snippets.env_for(rocketmq),
                               tmp_path, _timeout(example), None if spark else forks)  # fmt: skip
    assert proc.returncode == 0, f"{example.name}:\n{proc.stdout}\n{proc.stderr}"
    assert proc.stdout.strip(), f"{example.name} printed nothing"


def test_every_example_is_shown_in_the_docs() -> None:
    docs = "\n".join(p.read_text() for p in snippets.doc_files())
    shown = [p for p in ALL_EXAMPLES if p.name != "demo.py"]
    missing = [p.name for p in shown if f'--8<-- "examples/{p.name}"' not in docs]
    assert not missing, f"examples no docs page includes: {missing}"


def test_demo_runs_small(rocketmq: LocalRocketMQ, tmp_path: Path) -> None:
    env = {**os.environ, "AIOROCKET_BROKER_DIR": str(rocketmq.base_dir)}  # the cluster to use
    proc = subprocess.run(
        [sys.executable, str(snippets.REPO / "examples" / "demo.py"), "--count", "2000"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "produced 2,000 messages in" in out and "auto-batching" in out, out
    assert "consumed 2,000 messages in" in out, out
