"""The commands of the local test RocketMQ (click): the one command set, run as
``aiorocket broker``, ``python -m aiorocket.testing.broker`` and ``aiorocket-broker``."""

from __future__ import annotations

import functools
import json
import sys
from typing import TYPE_CHECKING

import anyio

from aiorocket._extras import needs_extra

with needs_extra("cli", "the local broker's command line (aiorocket.testing._commands)"):
    import click

if TYPE_CHECKING:
    from aiorocket.testing.broker import LocalRocketMQ

_dir = click.option(
    "--dir",
    "base_dir",
    help="Home directory (default $AIOROCKET_BROKER_DIR or /tmp/aiorocket-broker-<uid>).",
)


def _fail(message: str, code: int = 1) -> None:
    click.echo(f"error: {message}", err=True)
    sys.exit(code)


def env_lines(inst: LocalRocketMQ) -> str:
    """Shell ``export`` lines with the endpoints (``eval "$(... status --env)"``)."""
    brokers = ";".join(inst.broker_addrs.values())
    lines = (
        f"export AIOROCKET_NAMESRV_ADDR={inst.namesrv_addr}\n"
        f"export AIOROCKET_BROKER_ADDRS='{brokers}'"
    )
    if not inst.has_proxy:  # a 4.x cluster
        return lines
    return (
        f"{lines}\n"
        f"export AIOROCKET_PROXY_GRPC={inst.proxy_grpc}\n"
        f"export AIOROCKET_PROXY_REMOTING={inst.proxy_remoting}"
    )


def _running(base_dir: str | None) -> LocalRocketMQ:
    from aiorocket.testing.broker import LocalRocketMQ

    inst = LocalRocketMQ.attach(base_dir)
    if inst is None:
        _fail("no local RocketMQ runs (aiorocket broker start)")
    assert inst is not None
    return inst


class _SetupErrors(click.Group):
    """Turns the harness's errors (no Java, no Maven, a port taken, a refused request)
    into one line."""

    def invoke(self, ctx: click.Context) -> object:
        from aiorocket.errors import RocketMQError
        from aiorocket.testing._maven import BrokerSetupError

        try:
            return super().invoke(ctx)
        except (BrokerSetupError, RocketMQError, OSError) as exc:
            _fail(" ".join(str(exc).split()))
            return None


@click.group(cls=_SetupErrors, context_settings={"help_option_names": ["-h", "--help"]})
def broker() -> None:
    """The local RocketMQ for development and tests (needs Java 17+ and Maven)."""


@broker.command()
@click.option("--brokers", type=click.IntRange(1, 8),
              help="Number of brokers (default 2; without it any running cluster is accepted).")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=300.0,
              show_default=True, help="Readiness timeout in seconds.")
@click.option("--version", "rmq_version",
              help="RocketMQ version, e.g. 5.3.3 or 4.9.7 (4.x: no Proxy); it runs in a "
                   "directory of its own, /tmp/aiorocket-broker-<uid>-<version>, unless --dir "
                   "says (default: newest 5.x, or $AIOROCKET_RMQ_VERSION).")
@_dir
def start(brokers: int | None, timeout: float, rmq_version: str | None, base_dir: str | None
          ) -> None:  # fmt: skip
    """Start a NameServer and brokers on 127.0.0.1 (or attach to a running one)."""
    from aiorocket.testing.broker import DEFAULT_BROKERS, LocalRocketMQ

    home = base_dir if base_dir is not None or rmq_version is None else None
    here = LocalRocketMQ(home, version=rmq_version).base_dir
    running = LocalRocketMQ.attach(here) if brokers is None else None
    if running is not None:  # no --brokers: any healthy cluster will do
        inst, fresh = running, False
    else:
        inst = LocalRocketMQ(here, version=rmq_version)
        fresh = inst.start(brokers or DEFAULT_BROKERS, timeout=timeout, version=rmq_version)
    took = f" in {inst.state.get('ready_seconds')}s" if fresh else " (already running)"
    click.echo(f"ready{took}\n{inst.describe()}")
    click.echo("clients read the NameServer address from AIOROCKET_NAMESRV_ADDR:\n"
               '  eval "$(aiorocket broker status --env)"')  # fmt: skip


@broker.command()
@click.option("--timeout", type=click.FloatRange(min=0), default=20.0, show_default=True,
              help="SIGTERM grace before SIGKILL.")  # fmt: skip
@_dir
def stop(timeout: float, base_dir: str | None) -> None:
    """Stop every process of the local RocketMQ (its data is thrown away)."""
    from aiorocket.testing.broker import LocalRocketMQ

    inst = LocalRocketMQ(base_dir)
    if not inst.load():
        click.echo(f"nothing recorded in {inst.base_dir}")
        return
    killed = inst.stop(timeout=timeout)
    click.echo("stopped" + (f" (SIGKILL needed for {', '.join(killed)})" if killed else ""))


@broker.command()
@click.option("--json", "as_json", is_flag=True, help="Print the state file.")
@click.option("--env", "as_env", is_flag=True, help="Print shell exports.")
@_dir
def status(as_json: bool, as_env: bool, base_dir: str | None) -> None:
    """Addresses and health of the local RocketMQ (exit 1 when it is not running, 2 when
    it is unhealthy)."""
    from aiorocket.testing.broker import LocalRocketMQ

    inst = LocalRocketMQ(base_dir)
    if not inst.load() or not inst.running():
        click.echo(f"not running ({inst.base_dir})")
        sys.exit(1)
    ok = inst.healthy()
    if as_json:
        click.echo(json.dumps(inst.state, indent=2))
    elif as_env:
        click.echo(env_lines(inst))
    else:
        click.echo(inst.describe() + ("" if ok else "\n  UNHEALTHY: route/ports check failed"))
    sys.exit(0 if ok else 2)


@broker.command()
@click.option("--version", "rmq_version", help="RocketMQ version (default: newest 5.x).")
@click.option("--refresh", is_flag=True, help="Re-probe Maven Central.")
def resolve(rmq_version: str | None, refresh: bool) -> None:
    """Fetch the RocketMQ jars only (into ~/.cache/aiorocket)."""
    from aiorocket.testing import _maven

    jars = _maven.resolve(rmq_version, refresh=refresh)
    click.echo(f"{jars.version} {jars.lib_dir}")


@broker.command("topic")
@click.argument("names", nargs=-1, required=True)
@click.option("--queues", type=click.IntRange(1, 1024), default=8, show_default=True,
              help="Queues on each broker.")  # fmt: skip
@click.option(
    "--type",
    "message_type",
    type=click.Choice(
        ["NORMAL", "FIFO", "DELAY", "TRANSACTION", "PRIORITY", "LITE"], case_sensitive=False
    ),
    help="The topic's 5.x message type.",
)
@_dir
def topic(names: tuple[str, ...], queues: int, message_type: str | None, base_dir: str | None
          ) -> None:  # fmt: skip
    """Create (or update) topics on every broker of the local RocketMQ."""
    inst = _running(base_dir)
    kind = message_type.upper() if message_type else None
    for name in names:
        anyio.run(functools.partial(inst.create_topic, name, queues, message_type=kind))
        click.echo(f"topic {name}: {queues} queues on each of {', '.join(inst.broker_addrs)}")


@broker.command("group")
@click.argument("names", nargs=-1, required=True)
@_dir
def group(names: tuple[str, ...], base_dir: str | None) -> None:
    """Create (or update) consumer groups on every broker of the local RocketMQ."""
    inst = _running(base_dir)
    for name in names:
        anyio.run(functools.partial(inst.create_group, name))
        click.echo(f"consumer group {name} on each of {', '.join(inst.broker_addrs)}")
