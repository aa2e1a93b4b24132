"""The package as a user installs it: ``pip install .`` without extras into a fresh venv.

Catches undeclared runtime dependencies (a module importing something only the dev
environment has) and optional dependencies imported eagerly.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
from collections.abc import Iterator
from pathlib import Path

import pytest

from aiorocket.testing.broker import LocalRocketMQ
from tests import snippets

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def clean_python(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The python of a fresh venv holding only ``pip install <repo>``."""
    root = tmp_path_factory.mktemp("clean-venv")
    venv.EnvBuilder(with_pip=True).create(root)
    py = root / ("Scripts" if sys.platform == "win32" else "bin") / "python"
    subprocess.run(
        [str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", str(REPO)],
        check=True,
        cwd=root,
    )
    yield py


def run_outside_repo(
    py: Path, args: list[str], cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    clean_env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run(
        [str(py), *args], cwd=cwd, env={**clean_env, **(env or {})},
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def test_clean_install_imports_every_module_and_constructs_clients(
    clean_python: Path, tmp_path: Path
) -> None:
    proc = run_outside_repo(clean_python, [str(REPO / "tests" / "install_smoke.py")], tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    # the installed copy was imported, not the source tree
    where = run_outside_repo(clean_python, ["-c", "import aiorocket; print(aiorocket.__file__)"],
                             tmp_path)  # fmt: skip
    assert not where.stdout.strip().startswith(str(REPO)), where.stdout
    assert {"aiorocket", "aiorocket.consumer", "aiorocket.producer"} <= set(seen["imported"])
    assert len(seen["imported"]) > 40  # every module, not just the top level
    assert seen["clients"] == ["Consumer", "PullConsumer", "Producer"]
    # Dev-only tools must not be what made the imports work.
    for dev_only in ("pytest", "trio", "hypothesis", "mypy"):
        probe = run_outside_repo(clean_python, ["-c", f"import {dev_only}"], tmp_path)
        assert probe.returncode != 0, f"{dev_only} is installed in the clean venv"


def test_clean_install_names_the_extra_each_optional_part_needs(
    clean_python: Path, tmp_path: Path
) -> None:
    """No extras installed: every optional module, and the ``aiorocket`` command, says
    which extra to install instead of a bare ModuleNotFoundError (issue 30, item 8)."""
    proc = run_outside_repo(clean_python, [str(REPO / "tests" / "install_smoke.py")], tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr  # a module that names none fails
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert {
        "aiorocket.cli": "cli",
        "aiorocket.grpc": "grpc",
        "aiorocket.integrations.fastapi": "fastapi",
        "aiorocket.integrations.aiohttp": "aiohttp",
        "aiorocket.integrations.telemetry": "otel",
        "aiorocket.spark": "spark",
    }.items() <= seen["needs_extra"].items()
    script = clean_python.parent / ("aiorocket.exe" if sys.platform == "win32" else "aiorocket")
    for args in ([str(script), "--help"], [str(clean_python), "-m", "aiorocket.cli", "--help"]):
        cmd = run_outside_repo(Path(args[0]), args[1:], tmp_path)
        assert cmd.returncode != 0
        assert "pip install 'aiorocketmq[cli]'" in cmd.stderr, cmd.stderr
    # The console script says it in one line; `python -m` shows Python's traceback.
    cmd = run_outside_repo(script, ["--help"], tmp_path)
    assert "Traceback" not in cmd.stderr and cmd.stderr.count("\n") == 1, cmd.stderr


def test_clean_install_runs_the_readme_quick_start(
    clean_python: Path, rocketmq: LocalRocketMQ, tmp_path: Path
) -> None:
    """The README's first snippets (send, then consume) with nothing but the package."""
    snippets.create_documented_topics(rocketmq)
    for block in snippets.python_blocks(REPO / "README.md")[:2]:
        snippets.run_block(block, snippets.env_for(rocketmq), tmp_path, str(clean_python))


def test_the_wheel_ships_the_monitoring_files_and_the_examples(
    clean_python: Path, tmp_path: Path
) -> None:
    """Issue 42: a pip user gets the dashboard, the alert rules and the examples the docs
    point at (``aiorocket export``, which reads them from the installed package)."""
    probe = run_outside_repo(clean_python, ["-c", (
        "from importlib.resources import files; a = files('aiorocket').joinpath('_assets'); "
        "print(sorted(p.name for p in a.joinpath('monitoring').iterdir())); "
        "print(sorted(p.name for p in a.joinpath('examples').iterdir() if p.is_file()))"
    )], tmp_path)  # fmt: skip
    assert probe.returncode == 0, probe.stderr
    monitoring, examples = probe.stdout.strip().splitlines()
    assert monitoring == str(sorted(p.name for p in (REPO / "monitoring").iterdir()))
    assert examples == str(sorted(p.name for p in (REPO / "examples").glob("*.py")))
