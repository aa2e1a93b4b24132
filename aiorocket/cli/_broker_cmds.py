"""``aiorocket broker``: the local test RocketMQ (``python -m aiorocket.testing.broker``)."""

from __future__ import annotations

import sys

import click


def _run(argv: list[str]) -> None:
    from aiorocket.testing._cli import run

    sys.exit(run(argv))


def _common(argv: list[str], base_dir: str | None) -> list[str]:
    return argv + (["--dir", base_dir] if base_dir else [])


_dir = click.option(
    "--dir",
    "base_dir",
    help="Home directory (default $AIOROCKET_BROKER_DIR or /tmp/aiorocket-broker-<uid>).",
)


@click.group()
def broker() -> None:
    """The local RocketMQ for development and tests (needs Java 17+ and Maven)."""


@broker.command()
@click.option("--brokers", type=click.IntRange(1, 8), help="Number of brokers (default 2).")
@click.option("--timeout", type=float, help="Readiness timeout in seconds (300).")
@click.option("--version", "rmq_version", help="RocketMQ version (default: newest 5.x).")
@_dir
def start(
    brokers: int | None, timeout: float | None, rmq_version: str | None, base_dir: str | None
) -> None:
    """Start a NameServer and brokers on 127.0.0.1 (or attach to a running one)."""
    argv = ["start"]
    if brokers is not None:
        argv += ["--brokers", str(brokers)]
    if timeout is not None:
        argv += ["--timeout", str(timeout)]
    if rmq_version:
        argv += ["--version", rmq_version]
    _run(_common(argv, base_dir))


@broker.command()
@click.option("--timeout", type=float, help="SIGTERM grace before SIGKILL (20 s).")
@_dir
def stop(timeout: float | None, base_dir: str | None) -> None:
    """Stop every process of the local RocketMQ (its data is thrown away)."""
    _run(_common(["stop"] + (["--timeout", str(timeout)] if timeout else []), base_dir))


@broker.command()
@click.option("--json", "as_json", is_flag=True, help="Print the state file.")
@click.option("--env", "as_env", is_flag=True, help="Print shell exports.")
@_dir
def status(as_json: bool, as_env: bool, base_dir: str | None) -> None:
    """Addresses and health of the local RocketMQ (exit 1 when it is not running)."""
    _run(
        _common(
            ["status"] + (["--json"] if as_json else []) + (["--env"] if as_env else []), base_dir
        )
    )
