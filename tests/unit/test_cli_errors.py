"""The command line's error path: whatever a command's coroutine raises, the user reads
one line on stderr and an exit status (task groups' exception groups unwrapped)."""

from __future__ import annotations

import subprocess
import sys

import anyio
import pytest

from aiorocket.cli._common import EXIT_NOT_FOUND, EXIT_USAGE, Settings, run
from aiorocket.errors import ConfigError, MessageTooLargeError, TopicNotExistError


async def _in_task_group(exc: BaseException) -> None:
    """``exc`` raised two task groups deep, beside a task it cancels."""

    async def fail() -> None:
        raise exc

    async def wait() -> None:
        await anyio.sleep(10)  # cancelled by the failure

    async def nested() -> None:
        async with anyio.create_task_group() as inner:
            inner.start_soon(fail)

    async with anyio.create_task_group() as tg:
        tg.start_soon(wait)
        tg.start_soon(nested)


@pytest.mark.parametrize(
    ("exc", "code", "text"),
    [
        (MessageTooLargeError("body of 5000000 bytes"), EXIT_USAGE, "body of 5000000 bytes"),
        (ConfigError("bad value"), EXIT_USAGE, "bad value"),
        (TopicNotExistError(17, "no route"), EXIT_NOT_FOUND, "topic does not exist"),
        (ValueError("a bug"), 1, "unexpected ValueError: a bug (-v shows the traceback)"),
    ],
)
def test_errors_in_task_groups_are_one_line(
    exc: Exception, code: int, text: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        run(_in_task_group, exc)
    assert exited.value.code == code
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and text in err[0]


def test_verbose_shows_an_unexpected_error_whole() -> None:
    Settings(None, 1.0, verbose=True)
    try:
        with pytest.raises(ValueError, match="a bug"):
            run(_in_task_group, ValueError("a bug"))
    finally:
        Settings.verbose = False



def test_the_local_broker_commands_without_click_say_what_to_install() -> None:
    code = (
        "import sys; sys.modules['click'] = None\n"
        "from aiorocket.testing._cli import run\n"
        "sys.exit(run(['status']))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=60)  # fmt: skip
    assert result.returncode == 1
    assert result.stderr.strip() == (
        "error: the local broker's command line needs click (click is missing): "
        "pip install 'aiorocketmq[cli]'"
    )
