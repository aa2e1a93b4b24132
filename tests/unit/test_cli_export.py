"""``aiorocket export`` and the extras: what the docs run is what the package installs
and ships (issue 42, newcomer items 1 and 2)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from aiorocket.cli import cli

REPO = Path(__file__).resolve().parents[2]


def test_export_writes_the_shipped_files_and_refuses_to_overwrite(tmp_path: Path) -> None:
    runner = CliRunner()
    done = runner.invoke(cli, ["export", "monitoring", str(tmp_path / "mon")])
    assert done.exit_code == 0, done.output
    for name in ("aiorocket-dashboard.json", "aiorocket-alerts.yml"):
        assert (tmp_path / "mon" / name).read_bytes() == (REPO / "monitoring" / name).read_bytes()
    again = runner.invoke(cli, ["export", "monitoring", str(tmp_path / "mon")])
    assert again.exit_code == 2 and "--force" in again.stderr
    assert runner.invoke(cli, ["export", "monitoring", str(tmp_path / "mon"), "--force"]
                         ).exit_code == 0  # fmt: skip
    examples = runner.invoke(cli, ["export", "examples", str(tmp_path / "ex")])
    assert examples.exit_code == 0
    assert sorted(p.name for p in (tmp_path / "ex").iterdir()) == sorted(
        p.name for p in (REPO / "examples").glob("*.py")
    )


def test_each_extra_installs_what_its_docs_page_runs() -> None:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]

    def names(extra: str) -> set[str]:
        return {re.split(r"[<>=;~! ]", r, maxsplit=1)[0] for r in extras[extra]}

    assert "uvicorn" in names("fastapi")  # services.md: uvicorn fastapi_service:app
    assert "faststream[cli]" in names("faststream")  # faststream.md: faststream run
    # services.md: /metrics/ (the SDK's PrometheusMetricReader)
    assert {"opentelemetry-sdk", "opentelemetry-exporter-prometheus"} <= names("otel")
