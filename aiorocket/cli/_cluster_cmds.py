"""``aiorocket cluster|producer``: the brokers (versions, TPS, config) and the producers
connected to them."""

from __future__ import annotations

from typing import Any

import click

from aiorocket.admin import BrokerStatus
from aiorocket.cli._common import (
    EXIT_NOT_FOUND,
    Settings,
    ask,
    fail,
    json_option,
    ms_text,
    out,
    pass_settings,
    print_json,
    table,
)


def _status_json(b: BrokerStatus, full: bool = False) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "cluster": b.cluster, "broker": b.name, "broker_id": b.broker_id,
        "address": b.address, "version": b.version, "put_tps": round(b.put_tps, 1),
        "get_tps": round(b.get_tps, 1), "put_today": b.put_today, "got_today": b.got_today,
        "boot_ms": b.boot_ms, "error": b.error or None,
    }  # fmt: skip
    if full:
        doc["runtime"] = b.runtime
    return doc


@click.group()
def cluster() -> None:
    """The cluster's brokers: list, status, config, set-config."""


@cluster.command("list")
@json_option
@pass_settings
def cluster_list(settings: Settings, as_json: bool) -> None:
    """Every broker: cluster, name, id (0: master), address, version, TPS, totals today."""

    brokers = [_status_json(b) for b in ask(settings, lambda admin: admin.cluster())]
    if as_json:
        print_json(brokers)
        return
    table(
        None,
        ["cluster", "broker", "id", "address", "version", "put tps", "get tps",
         "put today", "got today"],
        [
            [b["cluster"], b["broker"], b["broker_id"], b["address"],
             b["version"] or f"error: {b['error']}", b["put_tps"], b["get_tps"],
             b["put_today"], b["got_today"]]
            for b in brokers
        ],
    )  # fmt: skip


@cluster.command("status")
@click.argument("broker")
@json_option
@pass_settings
def cluster_status(settings: Settings, broker: str, as_json: bool) -> None:
    """Everything one broker (name or address) reports about itself."""
    status = ask(settings, lambda admin: admin.broker_status(broker))
    if as_json:
        print_json(_status_json(status, full=True))
        return
    out.print(f"{status.name} ({status.address}, {status.version}, up since "
              f"{ms_text(status.boot_ms)})")  # fmt: skip
    table(None, ["figure", "value"], sorted(status.runtime.items()))


@cluster.command("config")
@click.argument("broker")
@click.argument("keys", nargs=-1)
@json_option
@pass_settings
def cluster_config(settings: Settings, broker: str, keys: tuple[str, ...], as_json: bool) -> None:
    """A broker's settings: all, or the KEYS named."""
    config = ask(settings, lambda admin: admin.broker_config(broker))
    if keys:
        missing = [k for k in keys if k not in config]
        if missing:
            fail(f"broker {broker} has no config key {missing[0]!r}", EXIT_NOT_FOUND)
        config = {k: config[k] for k in keys}
    if as_json:
        print_json(config)
    else:
        for k, v in config.items():
            out.print(f"{k}={v}")


@cluster.command("set-config")
@click.argument("key")
@click.argument("value")
@click.option(
    "--broker", "brokers", multiple=True, help="Only this broker (default: every master)."
)
@json_option
@pass_settings
def cluster_set_config(
    settings: Settings, key: str, value: str, brokers: tuple[str, ...], as_json: bool
) -> None:
    """Set a broker setting (in memory and in the broker's config file)."""
    changes = ask(
        settings,
        lambda admin: admin.update_broker_config(key, value, brokers=list(brokers) or None),
    )
    rows = [{"broker": b, "key": key, "old": old, "new": new} for b, (old, new) in changes.items()]
    if as_json:
        print_json(rows)
    else:
        table(None, ["broker", "key", "old", "new"], [list(r.values()) for r in rows])


@click.group()
def producer() -> None:
    """Producers connected to the brokers."""


@producer.command("list")
@click.option("--group", help="Only this producer group.")
@json_option
@pass_settings
def producer_list(settings: Settings, group: str | None, as_json: bool) -> None:
    """Connected producers: group, client id, address, language, version, broker."""

    rows: list[dict[str, Any]] = [
        {"group": p.group, "client_id": p.client_id, "address": p.address,
         "language": p.language, "version": p.version, "broker": p.broker,
         "last_update_ms": p.last_update_ms}
        for p in ask(settings, lambda admin: admin.producers(group))
    ]  # fmt: skip
    if as_json:
        print_json(rows)
        return
    table(
        f"{len(rows)} producer connection(s)",
        ["group", "client id", "address", "language", "broker", "last heartbeat"],
        [[r["group"], r["client_id"], r["address"], r["language"], r["broker"],
          ms_text(r["last_update_ms"])] for r in rows],
    )  # fmt: skip
