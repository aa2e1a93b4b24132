"""``aiorocket group create|update|config|delete|progress|consume-directly``: a group's
subscription config, every group's progress at once, and running one message through a
member's handler (registered on the ``group`` command of `aiorocket.cli._group_cmds`)."""

from __future__ import annotations

import re
from typing import Any

import click

from aiorocket.admin import CustomizedRetry, ExponentialRetry, GroupConfig
from aiorocket.cli._common import (
    EXIT_USAGE,
    Settings,
    ask,
    confirm,
    fail,
    json_option,
    ms_text,
    out,
    pass_settings,
    print_json,
    run,
    table,
    yes_option,
)
from aiorocket.cli._group_cmds import _config_lines, config_json, group

_DURATION = re.compile(r"^(\d+)(ms|s|m|h)$")
_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000}


def _ms(text: str) -> int:
    found = _DURATION.match(text.strip())
    if not found:
        raise click.BadParameter(f"{text!r} is not a duration (500ms, 5s, 2m, 1h)")
    return int(found.group(1)) * _MS[found.group(2)]


def parse_policy(text: str | None) -> ExponentialRetry | CustomizedRetry | None:
    """``exponential:INITIAL:MAX[:MULTIPLIER]`` or ``customized:D1,D2,...`` (durations)."""
    if text is None:
        return None
    kind, _, spec = text.partition(":")
    try:
        if kind == "exponential":
            parts = spec.split(":")
            if len(parts) not in (2, 3):
                raise click.BadParameter("exponential:INITIAL:MAX[:MULTIPLIER], e.g. 1s:1h:2")
            multiplier = int(parts[2]) if len(parts) == 3 else 2
            return ExponentialRetry(_ms(parts[0]), _ms(parts[1]), multiplier)
        if kind == "customized" and spec:
            return CustomizedRetry(tuple(_ms(d) for d in spec.split(",")))
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--retry-policy") from None
    raise click.BadParameter(
        "exponential:INITIAL:MAX[:MULTIPLIER] or customized:D1,D2,... (durations 1s, 5m)",
        param_hint="--retry-policy",
    )


def _config_options(fn: Any) -> Any:
    for option in reversed(
        [
            click.option("--retry-max", "retry_max_times", type=click.IntRange(-1, 1000),
                         help="Redeliveries before the DLQ (-1: the broker's 16)."),
            click.option("--orderly/--no-orderly", default=None,
                         help="FIFO: consume each queue in order."),
            click.option("--consume/--no-consume", "consume_enable", default=None,
                         help="Allow consuming (--no-consume stops the group's pulls)."),
            click.option("--broadcast/--no-broadcast", "broadcast_enable", default=None,
                         help="Allow broadcasting consumers."),
            click.option("--consume-timeout", "consume_timeout_minutes",
                         type=click.IntRange(1), help="POP consumers: minutes per message."),
            click.option("--retry-policy", help="POP consumers' retry delays: "
                         "exponential:1s:1h[:2] or customized:1s,5s,30s."),
            click.option("--lite-bind-topic", metavar="TOPIC",
                         help="A lite group (5.5+) of this LITE topic."),
            click.option("--lite-quota", type=click.IntRange(-1),
                         help="A lite group's lite subscriptions per client (-1: no limit)."),
            click.option("--lite-exclusive/--lite-shared", default=None,
                         help="A lite topic belongs to the member that subscribed last."),
        ]
    ):  # fmt: skip
        fn = option(fn)
    return fn


def _print_config(c: GroupConfig, as_json: bool) -> None:
    if as_json:
        print_json(config_json(c))
        return
    out.print(f"group {c.group}")
    for line in _config_lines(c):
        out.print(line)


@group.command("create")
@click.argument("name")
@_config_options
@click.option("--broker", "brokers", multiple=True, help="Only on this broker (repeatable).")
@json_option
@pass_settings
def group_create(
    settings: Settings, /, name: str, brokers: tuple[str, ...], as_json: bool, **fields: Any
) -> None:
    """Create a consumer group on every master broker (or update the one there)."""
    fields["retry_policy"] = parse_policy(fields.pop("retry_policy"))

    only = list(brokers) or None
    _print_config(ask(settings, lambda a: a.create_group(name, brokers=only, **fields)), as_json)


@group.command("update")
@click.argument("name")
@_config_options
@json_option
@pass_settings
def group_update(settings: Settings, /, name: str, as_json: bool, **fields: Any) -> None:
    """Change an existing group's config where it exists; other fields keep their value."""
    fields["retry_policy"] = parse_policy(fields.pop("retry_policy"))
    if all(v is None for v in fields.values()):
        fail("nothing to change: give at least one option (see --help)", EXIT_USAGE)

    _print_config(ask(settings, lambda admin: admin.update_group(name, **fields)), as_json)


@group.command("config")
@click.argument("name")
@json_option
@pass_settings
def group_config(settings: Settings, name: str, as_json: bool) -> None:
    """A group's subscription config: retry, FIFO, consume and broadcast flags."""
    _print_config(ask(settings, lambda admin: admin.group_config(name)), as_json)


@group.command("delete")
@click.argument("name")
@click.option("--keep-offsets", is_flag=True, help="Keep the group's committed offsets.")
@yes_option
@json_option
@pass_settings
def group_delete(
    settings: Settings, name: str, keep_offsets: bool, yes: bool, as_json: bool
) -> None:
    """Delete a group's config (and its committed offsets) from every broker."""
    found = ask(settings, lambda admin: admin.group_config(name))
    confirm(f"delete group {name} from {', '.join(found.brokers)}?", yes)

    deleted = ask(settings, lambda admin: admin.delete_group(name, clean_offsets=not keep_offsets))
    if as_json:
        print_json({"group": name, "deleted_from": deleted, "offsets_kept": keep_offsets})
    else:
        out.print(f"group {name} deleted from {', '.join(deleted)}")


@group.command("progress")
@click.option("--system", is_flag=True, help="Include system groups.")
@click.option("--min-lag", type=click.IntRange(0), default=0, help="Only groups this far behind.")
@click.option("--match", "pattern", help="Only groups whose name contains this.")
@json_option
@pass_settings
def group_progress(
    settings: Settings, system: bool, min_lag: int, pattern: str | None, as_json: bool
) -> None:
    """Every group's lag over all its topics, the most behind first."""

    rows: list[dict[str, Any]] = [
        {"group": p.group, "lag": p.lag, "members": p.members, "topics": list(p.topics),
         "last_consumed_ms": p.last_consumed_ms}
        for p in ask(settings, lambda a: a.progress(include_system=system))
        if p.lag >= min_lag and (pattern is None or pattern in p.group)
    ]  # fmt: skip
    if as_json:
        print_json(rows)
        return
    table(
        f"{len(rows)} group(s), lag {sum(r['lag'] for r in rows)}",
        ["group", "lag", "members", "topics", "last consumed"],
        [
            [r["group"], r["lag"], "?" if r["members"] < 0 else r["members"],
             " ".join(r["topics"]) or "-", ms_text(r["last_consumed_ms"])]
            for r in rows
        ],
    )  # fmt: skip


@group.command("consume-directly")
@click.argument("name")
@click.argument("msg_id")
@click.option("--client-id", help="The member to ask (default: the first connected one).")
@click.option("--topic", "topic_name", help="The topic (for a producer message id).")
@json_option
@pass_settings
def group_consume_directly(
    settings: Settings, name: str, msg_id: str, client_id: str | None,
    topic_name: str | None, as_json: bool,
) -> None:  # fmt: skip
    """Have a member run its handler on one stored message (nothing is committed)."""

    async def go() -> tuple[str, dict[str, Any]]:
        async with settings.admin() as admin:
            member = client_id
            if member is None:
                described = await admin.describe_group(name, assignment=False)
                if not described.members:
                    fail(f"group {name} has no members connected", 1)
                member = described.members[0].client_id
            offset_id = msg_id
            if topic_name is not None:  # a producer id: find the stored message's id
                offset_id = (await admin.get_message(msg_id, topic_name)).offset_msg_id
            return member, await admin.consume_directly(name, member, offset_id)

    member, result = run(go)
    doc = {
        "group": name, "client_id": member, "msg_id": msg_id,
        "result": str(result.get("consumeResult", "")),
        "spent_ms": int(result.get("spentTimeMills", 0)), "remark": result.get("remark"),
    }  # fmt: skip
    if as_json:
        print_json(doc)
    else:
        out.print(f"{member}: {doc['result']} in {doc['spent_ms']} ms"
                  + (f" ({doc['remark']})" if doc["remark"] else ""))  # fmt: skip
