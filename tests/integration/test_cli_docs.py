"""Every command of docs/cli.md, run as written (in bash) against the real cluster, gives
the output and exit status the page shows (see doc_commands for what is masked)."""

from __future__ import annotations

from pathlib import Path

import pytest

from aiorocket.testing.broker import LocalRocketMQ

from .doc_commands import matches, normalize, run_all, steps

pytestmark = [pytest.mark.integration]


def test_the_doc_shows_sessions_with_quoting_a_shell_keeps() -> None:
    commands = [s.command for s in steps()]
    assert len(commands) >= 35
    produce = next(c for c in commands if c.startswith("aiorocket produce shop-orders '{"))
    assert "'{\"order\": 1}'" in produce  # JSON bodies quoted: one shell word each


def test_every_command_of_the_cli_doc_runs_as_written(
    rocketmq: LocalRocketMQ, tmp_path: Path
) -> None:
    results = run_all(rocketmq.namesrv_addr, str(rocketmq.base_dir), tmp_path)
    failures = []
    for step, code, lines in results:
        want = normalize(step.output, str(rocketmq.base_dir))
        got = normalize(lines, str(rocketmq.base_dir))
        if code != step.exit_code or not matches(want, got):
            failures.append(
                f"$ {step.command}\n  exit {code} (doc: {step.exit_code})\n  got:\n    "
                + "\n    ".join(lines)
            )
    assert not failures, "\n".join(failures)
