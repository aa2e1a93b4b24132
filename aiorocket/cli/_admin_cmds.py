"""``aiorocket topic|group|message``: the admin commands, on [`aiorocket.admin.Admin`][]."""

from __future__ import annotations

import base64
import sys
from typing import Any

import click

from aiorocket.admin import ResetTarget
from aiorocket.cli._common import (
    EXIT_USAGE,
    Settings,
    fail,
    json_option,
    ms_text,
    out,
    parse_time,
    pass_settings,
    print_json,
    run,
    table,
)
from aiorocket.errors import MessageNotFoundError
from aiorocket.message import RETRY_TOPIC_PREFIX, MessageExt, MessageQueue


def _mq(mq: MessageQueue) -> dict[str, Any]:
    return {"topic": mq.topic, "broker": mq.broker_name, "queue": mq.queue_id}


# -- topic ---------------------------------------------------------------------------------


@click.group()
def topic() -> None:
    """Topics: list, route, create, stats."""


@topic.command("list")
@click.option("--system", is_flag=True, help="Include system topics (retry, DLQ, ...).")
@json_option
@pass_settings
def topic_list(settings: Settings, system: bool, as_json: bool) -> None:
    """The topics the NameServer knows."""

    async def go() -> list[str]:
        async with settings.admin() as admin:
            return await admin.list_topics(include_system=system)

    topics = run(go)
    if as_json:
        print_json(topics)
    else:
        for t in topics:
            out.print(t)


@topic.command("route")
@click.argument("name")
@json_option
@pass_settings
def topic_route(settings: Settings, name: str, as_json: bool) -> None:
    """Brokers and queues of a topic."""

    async def go() -> Any:
        async with settings.admin() as admin:
            return await admin.route(name)

    route = run(go)
    rows = [
        {
            "broker": q.broker_name,
            "address": route.master_addr(q.broker_name) or "",
            "read": q.read_queue_nums,
            "write": q.write_queue_nums,
            "perm": q.perm,
        }
        for q in sorted(route.queue_datas, key=lambda q: q.broker_name)
    ]
    if as_json:
        print_json({"topic": name, "brokers": rows})
    else:
        table(
            f"route of {name}",
            ["broker", "address", "read", "write", "perm"],
            [list(r.values()) for r in rows],
        )


@topic.command("create")
@click.argument("name")
@click.option("--queues", default=8, show_default=True, help="Queues on each broker.")
@click.option("--broker", "brokers", multiple=True, help="Only on this broker (repeatable).")
@click.option(
    "--type",
    "message_type",
    type=click.Choice(["NORMAL", "FIFO", "DELAY", "TRANSACTION"], case_sensitive=False),
    help="5.x message type.",
)
@click.option("--order", is_flag=True, help="An ordered topic (orderTopicConf).")
@pass_settings
def topic_create(
    settings: Settings,
    name: str,
    queues: int,
    brokers: tuple[str, ...],
    message_type: str | None,
    order: bool,
) -> None:
    """Create (or update) a topic on every master broker."""

    async def go() -> Any:
        async with settings.admin() as admin:
            return await admin.create_topic(
                name,
                queues=queues,
                brokers=brokers or None,
                message_type=message_type,
                order=order,
            )

    route = run(go)
    names = ", ".join(sorted(q.broker_name for q in route.queue_datas))
    out.print(f"topic {name}: {queues} queues on each of {names}")


@topic.command("stats")
@click.argument("name")
@json_option
@pass_settings
def topic_stats(settings: Settings, name: str, as_json: bool) -> None:
    """Per queue: min and max offset, last store time."""

    async def go() -> Any:
        async with settings.admin() as admin:
            return await admin.topic_stats(name)

    stats = run(go)
    rows = [
        {
            **_mq(q.queue),
            "min": q.min_offset,
            "max": q.max_offset,
            "messages": q.messages,
            "last_store_ms": q.last_store_ms,
        }
        for q in stats.queues
    ]
    if as_json:
        print_json({"topic": name, "messages": stats.messages, "queues": rows})
        return
    table(
        f"{name}: {stats.messages} messages",
        ["broker", "queue", "min", "max", "messages", "last stored"],
        [
            [
                r["broker"],
                r["queue"],
                r["min"],
                r["max"],
                r["messages"],
                ms_text(r["last_store_ms"]),
            ]
            for r in rows
        ],
    )


# -- group ---------------------------------------------------------------------------------


@click.group()
def group() -> None:
    """Consumer groups: list, describe, lag, reset-offset."""


@group.command("list")
@click.option("--system", is_flag=True, help="Include system groups.")
@json_option
@pass_settings
def group_list(settings: Settings, system: bool, as_json: bool) -> None:
    """The consumer groups of the brokers."""

    async def go() -> list[str]:
        async with settings.admin() as admin:
            return await admin.list_groups(include_system=system)

    groups = run(go)
    if as_json:
        print_json(groups)
    else:
        for g in groups:
            out.print(g)


@group.command("describe")
@click.argument("name")
@json_option
@pass_settings
def group_describe(settings: Settings, name: str, as_json: bool) -> None:
    """Members (client ids, addresses, assigned queues) and subscriptions."""

    async def go() -> Any:
        async with settings.admin() as admin:
            return await admin.describe_group(name)

    d = run(go)
    members = [
        {
            "client_id": m.client_id,
            "address": m.address,
            "language": m.language,
            "version": m.version,
            "assignment": None if m.assignment is None else [_mq(q) for q in m.assignment],
        }
        for m in d.members
    ]
    if as_json:
        print_json(
            {
                "group": name,
                "message_model": d.message_model,
                "consume_type": d.consume_type,
                "consume_from_where": d.consume_from_where,
                "subscriptions": d.subscriptions,
                "members": members,
            }
        )
        return
    out.print(f"group {name}: {len(members)} member(s) {d.message_model} {d.consume_type}")
    for t, expr in d.subscriptions.items():
        out.print(f"  subscribed to {t}: {expr}")

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
        None,
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

    async def go() -> Any:
        async with settings.admin() as admin:
            return await admin.lag(name, topic_name)

    lag = run(go)
    rows = [
        {**_mq(q.queue), "committed": q.committed, "max": q.max_offset, "lag": q.lag}
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


@group.command("reset-offset")
@click.argument("name")
@click.option("--topic", "topic_name", required=True, help="The topic whose offsets move.")
@click.option(
    "--to",
    "to",
    required=True,
    help="earliest, latest, or a time: ISO 8601, epoch ms, or -10m/-2h/-1d.",
)
@click.option("--dry-run", is_flag=True, help="Show the new offsets, change nothing.")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@json_option
@pass_settings
def group_reset(
    settings: Settings,
    name: str,
    topic_name: str,
    to: str,
    dry_run: bool,
    yes: bool,
    as_json: bool,
) -> None:
    """Move a group's committed offsets; running consumers follow."""
    target = _target(to)

    async def plan(dry: bool) -> Any:
        async with settings.admin() as admin:
            return await admin.reset_offset(name, topic_name, target, dry_run=dry)

    changes = run(plan, True)
    rows = [{**_mq(c.queue), "old": c.old, "new": c.new} for c in changes]
    if not as_json:
        table(
            f"{name} on {topic_name}: reset to {to}",
            ["broker", "queue", "old", "new"],
            [[r["broker"], r["queue"], r["old"], r["new"]] for r in rows],
        )
    if dry_run:
        if as_json:
            print_json({"group": name, "topic": topic_name, "dry_run": True, "queues": rows})
        return
    if not yes:
        if not sys.stdin.isatty():
            fail("refusing to reset without confirmation: pass --yes", EXIT_USAGE)
        click.confirm(f"reset {len(rows)} queue(s) of group {name}?", abort=True, err=True)
    changes = run(plan, False)
    rows = [{**_mq(c.queue), "old": c.old, "new": c.new} for c in changes]
    if as_json:
        print_json({"group": name, "topic": topic_name, "dry_run": False, "queues": rows})
    else:
        out.print(f"reset {len(rows)} queue(s)")


# -- message -------------------------------------------------------------------------------


def message_json(msg: MessageExt, body_format: str = "text") -> dict[str, Any]:
    return {
        "msg_id": msg.msg_id,
        "offset_msg_id": msg.offset_msg_id,
        "topic": msg.topic,
        "broker": msg.broker_name,
        "queue": msg.queue_id,
        "queue_offset": msg.queue_offset,
        "tags": msg.tags,
        "keys": msg.keys,
        "born_ms": msg.born_timestamp,
        "store_ms": msg.store_timestamp,
        "reconsume_times": msg.reconsume_times,
        "properties": dict(msg.properties),
        "body": body_text(msg.body, body_format),
    }


def body_text(body: bytes, body_format: str) -> str:
    if body_format == "hex":
        return body.hex()
    if body_format == "base64":
        return base64.b64encode(body).decode()
    return body.decode("utf-8", "replace")


@click.group()
def message() -> None:
    """Look messages up by id or key."""


@message.command("get")
@click.argument("msg_id", required=False)
@click.option("--topic", "topic_name", help="The topic (needed for producer ids and keys).")
@click.option("--key", help="Find the messages with this key instead.")
@click.option(
    "--format",
    "body_format",
    type=click.Choice(["text", "hex", "base64"]),
    default="text",
    show_default=True,
    help="How to print bodies.",
)
@json_option
@pass_settings
def message_get(
    settings: Settings,
    msg_id: str | None,
    topic_name: str | None,
    key: str | None,
    body_format: str,
    as_json: bool,
) -> None:
    """A message by its id (offset id, or producer id with --topic), or by --key."""
    if (msg_id is None) == (key is None):
        fail("give a message id or --key (not both)", EXIT_USAGE)
    if key is not None and topic_name is None:
        fail("--key needs --topic", EXIT_USAGE)

    async def go() -> list[MessageExt]:
        async with settings.admin() as admin:
            if key is not None:
                assert topic_name is not None
                found = await admin.find_messages(topic_name, key)
                if not found:
                    raise MessageNotFoundError(f"no message with key {key!r} in {topic_name!r}")
                return found
            assert msg_id is not None
            return [await admin.get_message(msg_id, topic_name)]

    found = run(go)
    if as_json:
        docs = [message_json(m, body_format) for m in found]
        print_json(docs if key is not None else docs[0])
        return
    for m in found:
        doc = message_json(m, body_format)
        body = doc.pop("body")
        for k, v in doc.items():
            if k in ("born_ms", "store_ms"):
                v = ms_text(int(v))
            out.print(f"{k:<16} {v}")
        out.print(f"{'body':<16} {body}")
        out.print()
