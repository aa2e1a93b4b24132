"""What every command shares: the cluster options, output (rich or JSON), errors, exit codes.

Exit codes: 0 success, 1 an operation failed (unreachable NameServer or broker, refused
request), 2 a usage mistake (bad option, bad offset or time), 3 something named does
not exist (topic, group, message), 130 interrupted. Errors are one line on stderr.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import os
import re
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, NoReturn, ParamSpec, TypeVar

import anyio
import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from aiorocket._loop import first_error
from aiorocket.admin import Admin
from aiorocket.client.namesrv import NAMESRV_ENV
from aiorocket.errors import (
    AccessDeniedError,
    BrokerNotFoundError,
    ConfigError,
    GroupNotFoundError,
    MessageNotFoundError,
    MessageTooLargeError,
    NameServerUnavailableError,
    NoRouteError,
    RocketMQError,
    TopicNotExistError,
)
from aiorocket.message import MessageQueue

P = ParamSpec("P")
T = TypeVar("T")

EXIT_FAILED, EXIT_USAGE, EXIT_NOT_FOUND, EXIT_INTERRUPTED = 1, 2, 3, 130

#: stdout for results; stderr for progress and messages. Colours only on a terminal
#: (rich checks isatty, NO_COLOR and FORCE_COLOR).
out = Console(
    highlight=False,
    soft_wrap=True,
    # Piped into a file or another program, a table keeps its full width (rich would
    # otherwise squeeze it into 80 columns and cut long topic and group names).
    width=None if sys.stdout.isatty() or os.environ.get("COLUMNS") else 250,
)
err = Console(stderr=True, highlight=False)


class Settings:
    """The root options, passed to every command through click's context object."""

    #: -v: the client's log, and the traceback of an unexpected error
    verbose = False

    def __init__(self, namesrv: str | None, timeout: float, verbose: bool = False) -> None:
        self.namesrv = namesrv
        self.timeout = timeout
        Settings.verbose = verbose

    @property
    def addrs(self) -> str:
        """The NameServer address(es); a usage error when neither the option nor the
        environment gives one (the library's message names its Python argument)."""
        if not (self.namesrv or "").strip():
            fail(
                f"no NameServer address: pass --namesrv/-n HOST:PORT or set {NAMESRV_ENV}",
                EXIT_USAGE,
            )
        return str(self.namesrv)

    def admin(self) -> Admin:
        return Admin(self.addrs, request_timeout=self.timeout)


pass_settings = click.make_pass_decorator(Settings)


_FAQ = re.compile(r"\s*See https?://\S+ for further details\.?")


def fail(message: str, code: int = EXIT_FAILED) -> NoReturn:
    """Print ``error: message`` as one line on stderr and exit with ``code``."""
    line = " ".join(_FAQ.sub("", message).split())  # broker remarks carry newlines
    err.print(f"[red]error:[/red] {escape(line)}", markup=True, highlight=False, soft_wrap=True)
    sys.exit(code)


def _exit_code(exc: RocketMQError) -> int:
    if isinstance(
        exc, TopicNotExistError | GroupNotFoundError | MessageNotFoundError | BrokerNotFoundError
    ):
        return EXIT_NOT_FOUND
    if isinstance(exc, NoRouteError) and isinstance(exc.__cause__, TopicNotExistError):
        return EXIT_NOT_FOUND  # a send to a topic that does not exist
    if isinstance(exc, ConfigError | MessageTooLargeError):
        return EXIT_USAGE
    return EXIT_FAILED


def _describe(exc: RocketMQError) -> str:
    if isinstance(exc, NameServerUnavailableError):
        return f"NameServer unreachable: {exc}"
    if isinstance(exc, TopicNotExistError):
        return f"topic does not exist: {exc}"
    if isinstance(exc, AccessDeniedError):
        return f"permission denied: {exc}"
    return str(exc) or type(exc).__name__


def ask(settings: Settings, op: Callable[[Admin], Awaitable[T]]) -> T:
    """Run one admin operation on an `Admin` opened for it (errors as `run`)."""

    async def go() -> T:
        async with settings.admin() as admin:
            return await op(admin)

    return run(go)


def run(fn: Callable[P, Awaitable[T]], *args: P.args, **kwargs: P.kwargs) -> T:
    """Run a coroutine function; a library error becomes a one-line message and an exit code."""
    try:
        return anyio.run(functools.partial(fn, *args, **kwargs))
    except BaseException as raised:
        exc = first_error(raised)
        if isinstance(exc, RocketMQError):
            fail(_describe(exc), _exit_code(exc))
        if isinstance(exc, TimeoutError):
            fail("timed out")
        if isinstance(exc, KeyboardInterrupt):
            err.print("interrupted")
            sys.exit(EXIT_INTERRUPTED)
        if isinstance(exc, OSError):  # a file named on the command line, a closed pipe
            fail(str(exc))
        if isinstance(exc, click.ClickException | click.Abort):
            raise exc from None  # click prints these itself
        if isinstance(exc, Exception) and not Settings.verbose:  # a bug: still one line
            fail(f"unexpected {type(exc).__name__}: {exc} (-v shows the traceback)")
        if exc is not raised:
            raise exc from None
        raise


def confirm(question: str, yes: bool) -> None:
    """Ask before changing something; without a terminal, refuse unless ``--yes``."""
    if yes:
        return
    if not sys.stdin.isatty():
        fail("refusing without confirmation: pass --yes", EXIT_USAGE)
    click.confirm(question, abort=True, err=True)


def yes_option(fn: Callable[P, T]) -> Callable[P, T]:
    return click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")(fn)


def mq_json(mq: MessageQueue) -> dict[str, Any]:
    return {"topic": mq.topic, "broker": mq.broker_name, "queue": mq.queue_id}


def json_option(fn: Callable[P, T]) -> Callable[P, T]:
    return click.option("--json", "as_json", is_flag=True, help="Print JSON (for scripts).")(fn)


def print_json(value: Any) -> None:
    sys.stdout.write(json.dumps(value, indent=2, default=str) + "\n")


def print_names(names: list[str], as_json: bool) -> None:
    """A listing: a JSON array, or one name per line."""
    if as_json:
        print_json(names)
    else:
        for name in names:
            out.print(name)


def table(title: str | None, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """A rich table; columns whose values are all numbers are right-aligned."""
    t = Table(title=title, title_justify="left", header_style="bold")
    for i, c in enumerate(columns):
        values = [row[i] for row in rows if row[i] is not None]
        numeric = bool(values) and all(
            isinstance(v, int | float) and not isinstance(v, bool) for v in values
        )
        t.add_column(c, justify="right" if numeric else "left")
    for row in rows:
        t.add_row(*("" if v is None else str(v) for v in row))
    out.print(t)


def ms_text(ms: int) -> str:
    """Epoch milliseconds as local ISO time; '-' for 0 (never)."""
    if ms <= 0:
        return "-"
    return dt.datetime.fromtimestamp(ms / 1000).astimezone().isoformat(timespec="milliseconds")


def parse_time(text: str) -> int:
    """An ISO 8601 time (local when it has no zone), epoch ms, or ``-5m``/``-2h``/``-1d``."""
    text = text.strip()
    if text.isdigit():
        if int(text) < 10**11:  # before 1973: an offset or a count, surely not a time
            raise click.BadParameter(
                f"{text!r} is not a time: epoch milliseconds have 13 digits; "
                "use ISO 8601 (2026-01-31T12:00) or -10m"
            )
        return int(text)
    if text.startswith("-") and text[1:-1].isdigit() and text[-1] in "smhd":
        seconds = int(text[1:-1]) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[text[-1]]
        return int((dt.datetime.now().timestamp() - seconds) * 1000)
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        raise click.BadParameter(
            f"{text!r} is not a time: use ISO 8601 (2026-01-31T12:00), epoch ms or -10m"
        ) from None
    if when.tzinfo is None:
        when = when.astimezone()
    return int(when.timestamp() * 1000)
