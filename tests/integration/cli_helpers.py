"""Running ``aiorocket`` as a user would, in process (click's CliRunner)."""

from __future__ import annotations

from click.testing import CliRunner, Result

from aiorocket.cli import cli


def invoke(namesrv: str, *args: str, input: str | None = None, ok: bool = True) -> Result:
    """``aiorocket --namesrv NAMESRV ARGS...``; with ``ok``, it must exit 0."""
    result = CliRunner().invoke(cli, ["--namesrv", namesrv, *args], input=input,
                                catch_exceptions=False)  # fmt: skip
    if ok:
        assert result.exit_code == 0, (result.output, result.stderr)
    return result


def one_line_error(result: Result) -> str:
    """The error line of a failed command: one line on stderr, no traceback."""
    assert "Traceback" not in result.output + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]
