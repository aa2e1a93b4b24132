"""The ``aiorocket`` command line (the ``cli`` extra: click and rich).

``aiorocket --help`` lists the commands; ``docs/cli.md`` shows each with its output.
Only this package imports click and rich: the library never does.
"""

from __future__ import annotations

import logging

import click

from aiorocket._version import __version__
from aiorocket.cli._admin_cmds import group, message, topic
from aiorocket.cli._broker_cmds import broker
from aiorocket.cli._common import Settings
from aiorocket.cli._data_cmds import bench, produce, tail
from aiorocket.client.namesrv import NAMESRV_ENV

__all__ = ["cli", "main"]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--namesrv",
    "-n",
    envvar=NAMESRV_ENV,
    metavar="HOST:PORT[;HOST:PORT]",
    help=f"NameServer address(es); default ${NAMESRV_ENV}.",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=5.0,
    show_default=True,
    help="Seconds per request.",
)
@click.option("--verbose", "-v", is_flag=True, help="Show the client's log (INFO and up).")
@click.version_option(__version__, prog_name="aiorocket")
@click.pass_context
def cli(ctx: click.Context, namesrv: str | None, timeout: float, verbose: bool) -> None:
    """Produce, tail, and administer Apache RocketMQ: topics, groups, lag, offsets."""
    # The library warns as it retries (an unreachable NameServer, a failed pull); the
    # command reports the outcome in one line, so only --verbose shows the log.
    if verbose:
        logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s %(message)s")
    else:
        logging.getLogger("aiorocket").setLevel(logging.CRITICAL)
    ctx.obj = Settings(namesrv, timeout)


cli.add_command(produce)
cli.add_command(tail)
cli.add_command(tail, "consume")
cli.add_command(topic)
cli.add_command(group)
cli.add_command(message)
cli.add_command(broker)
cli.add_command(bench)


def main() -> None:
    """The console script."""
    cli(prog_name="aiorocket")
