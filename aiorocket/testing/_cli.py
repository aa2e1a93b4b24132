"""Command line of [`aiorocket.testing.broker`][] (kept apart to keep files small)."""

from __future__ import annotations

import argparse
import functools
import json
import sys
from collections.abc import Sequence

import anyio

from aiorocket.testing import _maven, broker
from aiorocket.testing._maven import BrokerSetupError
from aiorocket.testing.broker import DEFAULT_BROKERS, LocalRocketMQ


def env_lines(inst: LocalRocketMQ) -> str:
    """Shell ``export`` lines with the endpoints (``eval "$(... status --env)"``)."""
    brokers = ";".join(inst.broker_addrs.values())
    return (
        f"export AIOROCKET_NAMESRV_ADDR={inst.namesrv_addr}\n"
        f"export AIOROCKET_BROKER_ADDRS='{brokers}'\n"
        f"export AIOROCKET_PROXY_GRPC={inst.proxy_grpc}\n"
        f"export AIOROCKET_PROXY_REMOTING={inst.proxy_remoting}"
    )


def create_resources(
    base_dir: str | None, kind: str, names: Sequence[str], queues: int, message_type: str | None
) -> int:
    """``topic``/``group``: create (or update) each name on every broker of the cluster."""
    if not names:
        print(f"error: name the {kind}(s) to create", file=sys.stderr)
        return 2
    inst = LocalRocketMQ.attach(base_dir)
    if inst is None:
        print("error: no local RocketMQ runs (python -m aiorocket.testing.broker start)",
              file=sys.stderr)  # fmt: skip
        return 1
    brokers = ", ".join(inst.broker_addrs)
    for name in names:
        if kind == "topic":
            anyio.run(functools.partial(inst.create_topic, name, queues, message_type=message_type))
            print(f"topic {name}: {queues} queues on each of {brokers}")
        else:
            anyio.run(functools.partial(inst.create_group, name))
            print(f"consumer group {name} on each of {brokers}")
    return 0


def run(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m aiorocket.testing.broker",
        description=broker.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("command",
                        choices=["start", "stop", "status", "resolve", "topic", "group"])
    parser.add_argument("names", nargs="*", metavar="NAME", help="topic, group: the topic(s) "
                        "or consumer group(s) to create (or update) on every broker")  # fmt: skip
    parser.add_argument("--dir", default=None, help="home dir (default $AIOROCKET_BROKER_DIR "
                        "or /tmp/aiorocket-broker-<uid>)")  # fmt: skip
    parser.add_argument("--brokers", type=int, default=None,
                        help="start: number of brokers (default 2; without it any running "
                        "cluster is accepted)")  # fmt: skip
    parser.add_argument("--queues", type=int, default=8, help="topic: queues per broker (8)")
    parser.add_argument("--type", dest="message_type", default=None,
                        choices=["NORMAL", "FIFO", "DELAY", "TRANSACTION"],
                        help="topic: the topic's message type (5.x attribute)")  # fmt: skip
    parser.add_argument("--timeout", type=float, default=None, help="start: readiness timeout "
                        "(300 s); stop: SIGTERM grace before SIGKILL (20 s)")  # fmt: skip
    parser.add_argument("--version", default=None, help="RocketMQ version (else newest 5.x that "
                        "resolves, or $AIOROCKET_RMQ_VERSION)")  # fmt: skip
    parser.add_argument("--refresh", action="store_true", help="resolve: re-probe Maven Central")
    parser.add_argument("--json", action="store_true", help="status: print the state file")
    parser.add_argument("--env", action="store_true", help="status: print shell exports")
    args = parser.parse_args(argv)
    inst = LocalRocketMQ(args.dir)
    try:
        if args.command == "resolve":
            jars = _maven.resolve(args.version, refresh=args.refresh)
            print(f"{jars.version} {jars.lib_dir}")
        elif args.command == "start":
            running = LocalRocketMQ.attach(args.dir) if args.brokers is None else None
            if running is not None:  # no --brokers: any healthy cluster will do
                inst, fresh = running, False
            else:
                brokers = args.brokers or DEFAULT_BROKERS
                fresh = inst.start(brokers, timeout=args.timeout or 300.0, version=args.version)
            took = f" in {inst.state.get('ready_seconds')}s" if fresh else " (already running)"
            print(f"ready{took}\n{inst.describe()}")
            print("clients read the NameServer address from AIOROCKET_NAMESRV_ADDR:\n"
                  '  eval "$(python -m aiorocket.testing.broker status --env)"')  # fmt: skip
        elif args.command in ("topic", "group"):
            return create_resources(
                args.dir, args.command, args.names, args.queues, args.message_type
            )
        elif args.command == "stop":
            if not inst.load():
                print(f"nothing recorded in {inst.base_dir}")
                return 0
            killed = inst.stop(timeout=args.timeout or 20.0)
            print("stopped" + (f" (SIGKILL needed for {', '.join(killed)})" if killed else ""))
        else:
            if not inst.load() or not inst.running():
                print(f"not running ({inst.base_dir})")
                return 1
            ok = inst.healthy()
            if args.json:
                print(json.dumps(inst.state, indent=2))
            elif args.env:
                print(env_lines(inst))
            else:
                print(inst.describe() + ("" if ok else "\n  UNHEALTHY: route/ports check failed"))
            return 0 if ok else 2
    except BrokerSetupError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0
