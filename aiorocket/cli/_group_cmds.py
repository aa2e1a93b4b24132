"""``aiorocket group``: consumer groups: list, describe, lag, progress, reset-offset,
create, update, config, delete, consume-directly."""

from __future__ import annotations

from typing import Any

import click

from aiorocket.admin import (
    CustomizedRetry,
    ExponentialRetry,
    GroupConfig,
    GroupDescription,
    GroupLag,
    OffsetChange,
    ResetTarget,
)
from aiorocket.cli._common import (
    EXIT_USAGE,
    Settings,
    ask,
    confirm,
    fail,
    json_option,
    mq_json,
    out,
    parse_time,
    pass_settings,
    print_json,
    print_names,
    run,
    table,
    yes_option,
)
from aiorocket.errors import RocketMQError
from aiorocket.message import RETRY_TOPIC_PREFIX, MessageQueue


@click.group()
def group() -> None:
    """Consumer groups: list, describe, lag, progress, reset-offset, create, update,
    config, delete, consume-directly."""


@group.command("list")
@click.option("--system", is_flag=True, help="Include system groups.")
@json_option
@pass_settings
def group_list(settings: Settings, system: bool, as_json: bool) -> None:
    """The consumer groups of the brokers."""
    groups = ask(settings, lambda admin: admin.list_groups(include_system=system))
    print_names(groups, as_json)


def config_json(c: GroupConfig) -> dict[str, Any]:
    policy: Any = None
    if isinstance(c.retry_policy, ExponentialRetry):
        policy = {"type": "EXPONENTIAL", "initial_ms": c.retry_policy.initial_ms,
                  "max_ms": c.retry_policy.max_ms, "multiplier": c.retry_policy.multiplier}
    elif isinstance(c.retry_policy, CustomizedRetry):
        policy = {"type": "CUSTOMIZED", "delays_ms": list(c.retry_policy.delays_ms)}
    return {
        "group": c.group, "brokers": list(c.brokers), "consume_enable": c.consume_enable,
        "broadcast_enable": c.broadcast_enable, "orderly": c.orderly,
        "retry_max_times": c.retry_max_times, "retry_queues": c.retry_queues,
        "consume_timeout_minutes": c.consume_timeout_minutes, "retry_policy": policy,
        "attributes": c.attributes,
    }  # fmt: skip


def _policy_text(c: GroupConfig) -> str:
    p = c.retry_policy
    if isinstance(p, ExponentialRetry):
        return f"exponential {p.initial_ms} ms x{p.multiplier} up to {p.max_ms} ms"
    if isinstance(p, CustomizedRetry) and p.delays_ms:
        return "customized " + " ".join(f"{d}ms" for d in p.delays_ms)
    return "the delay levels (1s 5s 10s 30s 1m ... 2h)"


def _config_lines(c: GroupConfig) -> list[str]:
    yes_no = {True: "yes", False: "no"}
    return [
        f"  on brokers: {', '.join(c.brokers)}",
        f"  consume enabled: {yes_no[c.consume_enable]}, broadcast allowed: "
        f"{yes_no[c.broadcast_enable]}, orderly (FIFO): {yes_no[c.orderly]}",
        f"  retry max times: {c.retry_max_times}, retry policy: {_policy_text(c)}, "
        f"POP consume timeout: {c.consume_timeout_minutes} min",
    ] + ([_lite_line(c)] if c.lite_bind_topic else [])


def _retries(c: GroupConfig, d: GroupDescription) -> str:
    """What decides how often a failed message is retried: a push or pull member sends
    its own max_reconsume_times with each failed message, and the broker takes it over
    the group's retry max times; only POP and gRPC consumers get the group's."""
    own = sorted({m.max_reconsume_times for m in d.members if m.max_reconsume_times is not None})
    group_part = f"the group's retry max times ({c.retry_max_times}) for POP and gRPC consumers"
    if d.consume_type == "CONSUME_POP":
        return f"{group_part} (this group pops)"
    if own:
        values = ", ".join("16 (-1: the default)" if v == -1 else str(v) for v in own)
        return (f"{values}, the max_reconsume_times of the members (push/pull consumers "
                f"decide their own); {group_part}")  # fmt: skip
    return f"push/pull consumers decide with their own max_reconsume_times; {group_part}"


def _lite_line(c: GroupConfig) -> str:
    quota = c.lite_quota
    per_client = "the broker's default" if quota is None else "no limit" if quota < 0 else quota
    model = "exclusive" if c.lite_exclusive else "shared"
    return f"  lite group of {c.lite_bind_topic} ({model}), lite topics per client: {per_client}"


def _lag_rows(lag: GroupLag | None) -> list[dict[str, Any]]:
    if lag is None:
        return []
    return [
        {**mq_json(q.queue), "committed": q.committed, "max": q.max_offset, "lag": q.lag}
        for q in lag.queues
    ]


@group.command("describe")
@click.argument("name")
@json_option
@pass_settings
def group_describe(settings: Settings, name: str, as_json: bool) -> None:
    """Config, members (client ids, addresses, assigned queues), subscriptions, and
    the committed offsets and lag, with or without members connected."""

    async def go() -> tuple[GroupDescription, GroupConfig, GroupLag | None]:
        async with settings.admin() as admin:
            described = await admin.describe_group(name)
            config = await admin.group_config(name)
            try:
                lag: GroupLag | None = await admin.lag(name)
            except RocketMQError:
                lag = None  # no offsets committed yet
            return described, config, lag

    d, config, lag = run(go)
    members = [
        {
            "client_id": m.client_id,
            "address": m.address,
            "language": m.language,
            "version": m.version,
            "assignment": None if m.assignment is None else [mq_json(q) for q in m.assignment],
            "max_reconsume_times": m.max_reconsume_times,
        }
        for m in d.members
    ]
    rows = _lag_rows(lag)
    if as_json:
        print_json(
            {
                "group": name,
                "message_model": d.message_model,
                "consume_type": d.consume_type,
                "consume_from_where": d.consume_from_where,
                "subscriptions": d.subscriptions,
                "members": members,
                "config": config_json(config),
                "retries": _retries(config, d),
                "lag": {"total": lag.total if lag else 0, "queues": rows},
            }
        )
        return
    if members:
        out.print(f"group {name}: {len(members)} member(s) {d.message_model} {d.consume_type}")
    else:
        out.print(f"group {name}: no members connected")
    for line in _config_lines(config):
        out.print(line)
    out.print(f"  retries: {_retries(config, d)}")
    for t, expr in d.subscriptions.items():
        out.print(f"  subscribed to {t}: {expr}")
    if rows:
        table(
            f"offsets: lag {lag.total if lag else 0}",
            ["topic", "broker", "queue", "committed", "max", "lag"],
            [list(r.values()) for r in rows],
        )
    else:
        out.print("  no committed offsets")
    if not members:
        return

    def queues(m: dict[str, Any]) -> str:
        if m["assignment"] is None:
            return "?"
        return (
            " ".join(
                f"{q['broker']}:{q['queue']}"
                for q in m["assignment"]
                if not q["topic"].startswith(RETRY_TOPIC_PREFIX)
            )
            or "-"
        )

    table(
        "members",
        ["client id", "address", "language", "queues"],
        [[m["client_id"], m["address"], m["language"], queues(m)] for m in members],
    )


@group.command("lag")
@click.argument("name")
@click.option("--topic", "topic_name", help="Only this topic.")
@json_option
@pass_settings
def group_lag(settings: Settings, name: str, topic_name: str | None, as_json: bool) -> None:
    """Per queue: committed offset, max offset, lag; and the total."""
    lag = ask(settings, lambda admin: admin.lag(name, topic_name))
    rows = [
        {**mq_json(q.queue), "committed": q.committed, "max": q.max_offset, "lag": q.lag}
        for q in lag.queues
    ]
    if as_json:
        print_json({"group": name, "total": lag.total, "queues": rows})
        return
    table(
        f"{name}: lag {lag.total}",
        ["topic", "broker", "queue", "committed", "max", "lag"],
        [list(r.values()) for r in rows],
    )


def _target(to: str) -> ResetTarget:
    if to in ("earliest", "latest"):
        return to  # type: ignore[return-value]
    try:
        return parse_time(to)
    except click.BadParameter as exc:
        raise click.BadParameter(
            f"--to takes earliest, latest or a time; {exc.message}", param_hint="--to"
        ) from None


def _queues(topic: str, specs: tuple[str, ...]) -> list[MessageQueue] | None:
    """``--queue BROKER:ID`` options as queues of ``topic`` (None: all of them)."""
    if not specs:
        return None
    found = []
    for spec in specs:
        broker, sep, qid = spec.rpartition(":")
        if not sep or not broker or not qid.isdigit():
            raise click.BadParameter(f"{spec!r} is not BROKER:QUEUE_ID", param_hint="--queue")
        found.append(MessageQueue(topic, broker, int(qid)))
    return found


def _show_changes(
    title: str, group: str, topic: str, changes: list[OffsetChange], dry: bool, as_json: bool
) -> None:
    rows = [{**mq_json(c.queue), "old": c.old, "new": c.new} for c in changes]
    if as_json:
        print_json({"group": group, "topic": topic, "dry_run": dry, "queues": rows})
    elif dry:
        table(title, ["broker", "queue", "old", "new"],
              [[r["broker"], r["queue"], r["old"], r["new"]] for r in rows])  # fmt: skip
    else:
        out.print(f"reset {len(rows)} queue(s)")


@group.command("reset-offset")
@click.argument("name")
@click.option("--topic", "topic_name", required=True, help="The topic whose offsets move.")
@click.option(
    "--to", "to", help="earliest, latest, or a time: ISO 8601, epoch ms, or -10m/-2h/-1d."
)
@click.option("--offset", type=click.IntRange(0), help="This offset of each queue (or of --queue).")
@click.option("--queue", "queue_specs", multiple=True, metavar="BROKER:ID",
              help="Only this queue (repeatable), e.g. broker-a:0.")  # fmt: skip
@click.option("--dry-run", is_flag=True, help="Show the new offsets, change nothing.")
@yes_option
@json_option
@pass_settings
def group_reset(
    settings: Settings,
    name: str,
    topic_name: str,
    to: str | None,
    offset: int | None,
    queue_specs: tuple[str, ...],
    dry_run: bool,
    yes: bool,
    as_json: bool,
) -> None:
    """Move a group's committed offsets (--to a place or time, or --offset N; on every
    queue or only --queue); running consumers follow."""
    if (to is None) == (offset is None):
        fail("give --to or --offset (one of them)", EXIT_USAGE)
    target = _target(to) if to is not None else None
    queues = _queues(topic_name, queue_specs)
    where = to if to is not None else f"offset {offset}"

    async def plan(dry: bool) -> list[OffsetChange]:
        async with settings.admin() as admin:
            return await admin.reset_offset(name, topic_name, target, offset=offset,
                                            queues=queues, dry_run=dry)  # fmt: skip

    changes = run(plan, True)
    title = f"{name} on {topic_name}: reset to {where}"
    if not as_json:
        _show_changes(title, name, topic_name, changes, True, False)
    if dry_run:
        if as_json:
            _show_changes(title, name, topic_name, changes, True, True)
        return
    confirm(f"reset {len(changes)} queue(s) of group {name}?", yes)
    _show_changes(title, name, topic_name, run(plan, False), False, as_json)


@group.command("clone-offsets")
@click.argument("source")
@click.argument("target")
@click.option("--topic", "topic_name", required=True, help="The topic whose offsets copy.")
@click.option("--dry-run", is_flag=True, help="Show the new offsets, change nothing.")
@yes_option
@json_option
@pass_settings
def group_clone(
    settings: Settings, source: str, target: str, topic_name: str, dry_run: bool, yes: bool,
    as_json: bool,
) -> None:  # fmt: skip
    """Give TARGET the committed offsets of SOURCE on a topic (mqadmin cloneGroupOffset);
    running consumers of TARGET follow."""

    async def plan(dry: bool) -> list[OffsetChange]:
        async with settings.admin() as admin:
            return await admin.clone_offsets(source, target, topic_name, dry_run=dry)

    changes = run(plan, True)
    title = f"{target} on {topic_name}: the offsets of {source}"
    if dry_run or not as_json:
        _show_changes(title, target, topic_name, changes, True, as_json)
    if dry_run:
        return
    confirm(f"reset {len(changes)} queue(s) of group {target}?", yes)
    _show_changes(title, target, topic_name, run(plan, False), False, as_json)
