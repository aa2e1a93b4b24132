"""The ``aiorocket`` command line (the ``cli`` extra: click and rich).

``aiorocket --help`` lists the commands; ``docs/cli.md`` shows each with its output.
Only this package imports click and rich: the library never does.
"""

from __future__ import annotations

import logging

from aiorocket._extras import needs_extra

with needs_extra("cli", "the aiorocket command (aiorocket.cli)"):
    import click
    import rich  # noqa: F401  # the commands' output: checked here, with click

from aiorocket._version import __version__
from aiorocket.cli import _group_config_cmds  # noqa: F401  (adds group subcommands)
from aiorocket.cli._broker_cmds import broker
from aiorocket.cli._cluster_cmds import cluster, producer
from aiorocket.cli._common import Settings
from aiorocket.cli._data_cmds import bench, produce
from aiorocket.cli._export_cmds import export
from aiorocket.cli._group_cmds import group
from aiorocket.cli._message_cmds import dlq, message
from aiorocket.cli._tail import tail
from aiorocket.cli._topic_cmds import topic
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
    ctx.obj = Settings(namesrv, timeout, verbose)


cli.add_command(produce)
cli.add_command(tail)
cli.add_command(tail, "consume")
cli.add_command(topic)
cli.add_command(group)
cli.add_command(message)
cli.add_command(dlq)
cli.add_command(cluster)
cli.add_command(producer)
cli.add_command(broker)
cli.add_command(bench)
cli.add_command(export)


def _namesrv_here(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    if value:
        ctx.find_object(Settings).namesrv = value  # type: ignore[union-attr]


def _timeout_here(ctx: click.Context, _param: click.Parameter, value: float | None) -> None:
    if value is not None:
        ctx.find_object(Settings).timeout = value  # type: ignore[union-attr]


def _accept_root_options(command: click.Command) -> None:
    """``-n/--namesrv`` and ``--timeout`` after the command too (``aiorocket topic list
    -n host:9876 --timeout 1``, as mqadmin takes them): ``-n`` means the NameServer
    everywhere. A command with a ``--timeout`` of its own (tail, bench consume: the whole
    run's bound) keeps it."""
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            _accept_root_options(sub)
        return
    names = {p.name for p in command.params}
    if "namesrv" in names:
        return  # registered under two names (tail and consume)
    command.params.append(
        click.Option(
            ["--namesrv", "-n"],
            metavar="HOST:PORT[;HOST:PORT]",
            expose_value=False,
            callback=_namesrv_here,
            help="NameServer address(es) (as the global option).",
        )
    )
    if "timeout" not in names:
        command.params.append(
            click.Option(
                ["--timeout"],
                type=click.FloatRange(min=0, min_open=True),
                expose_value=False,
                callback=_timeout_here,
                help="Seconds per request (as the global option).",
            )
        )


for _command in cli.commands.values():
    if _command not in (broker, export):  # the local broker has its own addresses
        _accept_root_options(_command)


def main() -> None:
    """The console script."""
    cli(prog_name="aiorocket")
