"""``aiorocket topic``: list, route, create, update, stats, delete, perm."""

from __future__ import annotations

from typing import Any

import click

from aiorocket.admin import PERMISSIONS, TopicChange
from aiorocket.cli._common import (
    Settings,
    ask,
    confirm,
    json_option,
    mq_json,
    ms_text,
    out,
    pass_settings,
    print_json,
    print_names,
    run,
    table,
    yes_option,
)

_QUEUES = click.IntRange(1, 1024)


@click.group()
def topic() -> None:
    """Topics: list, route, create, update, stats, delete, perm."""


@topic.command("list")
@click.option("--system", is_flag=True, help="Include system topics (retry, DLQ, ...).")
@json_option
@pass_settings
def topic_list(settings: Settings, system: bool, as_json: bool) -> None:
    """The topics the NameServer knows."""
    topics = ask(settings, lambda admin: admin.list_topics(include_system=system))
    print_names(topics, as_json)


@topic.command("route")
@click.argument("name")
@json_option
@pass_settings
def topic_route(settings: Settings, name: str, as_json: bool) -> None:
    """Brokers and queues of a topic."""
    route = ask(settings, lambda admin: admin.route(name))
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
    type=click.Choice(
        ["NORMAL", "FIFO", "DELAY", "TRANSACTION", "PRIORITY", "LITE"], case_sensitive=False
    ),
    help="5.x message type (PRIORITY: 5.4+, LITE: 5.5+).",
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
    """Create a topic on every master broker (or those named). A topic that exists with
    these settings is left alone; one with other settings is refused: see `topic update`."""

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


@topic.command("update")
@click.argument("name")
@click.option("--queues", type=_QUEUES, help="Read and write queues on each broker.")
@click.option("--read-queues", type=_QUEUES, help="Readable queues on each broker.")
@click.option("--write-queues", type=_QUEUES, help="Writable queues on each broker.")
@click.option("--perm", type=click.Choice(list(PERMISSIONS)), help="The permission.")
@click.option("--broker", "brokers", multiple=True, help="Only on this broker (repeatable).")
@yes_option
@json_option
@pass_settings
def topic_update(
    settings: Settings, name: str, queues: int | None, read_queues: int | None,
    write_queues: int | None, perm: str | None, brokers: tuple[str, ...], yes: bool,
    as_json: bool,
) -> None:  # fmt: skip
    """Change an existing topic's queues or permission (what is not given is kept).
    Fewer readable queues leave the messages of the queues cut off unread: asked first."""

    async def go(dry: bool) -> list[TopicChange]:
        async with settings.admin() as admin:
            return await admin.update_topic(
                name, queues=queues, read_queues=read_queues, write_queues=write_queues,
                perm=perm, brokers=list(brokers) or None, allow_shrink=True, dry_run=dry,
            )  # fmt: skip

    plan = run(go, True)
    stranded = [c.stranded() for c in plan if c.strands]
    if stranded:
        confirm(f"{'; '.join(stranded)} (their messages stay unread). Shrink {name}?", yes)
    done = run(go, False) if any(c.before != c.after for c in plan) else plan
    rows = [{"broker": c.broker, "before": c.before.describe(), "after": c.after.describe()}
            for c in done]  # fmt: skip
    if as_json:
        print_json({"topic": name, "changes": rows})
        return
    table(f"topic {name}", ["broker", "before", "after"], [list(r.values()) for r in rows])


@topic.command("stats")
@click.argument("name")
@json_option
@pass_settings
def topic_stats(settings: Settings, name: str, as_json: bool) -> None:
    """Per queue: min and max offset, last store time."""
    stats = ask(settings, lambda admin: admin.topic_stats(name))
    rows = [
        {
            **mq_json(q.queue),
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




@topic.command("delete")
@click.argument("name")
@yes_option
@json_option
@pass_settings
def topic_delete(settings: Settings, name: str, yes: bool, as_json: bool) -> None:
    """Delete a topic from its brokers and the NameServers (its messages become
    unreachable, the groups' offsets of it are dropped)."""

    async def route() -> Any:
        async with settings.admin() as admin:
            return await admin.route(name)

    brokers = sorted(q.broker_name for q in run(route).queue_datas)
    confirm(f"delete topic {name} from {', '.join(brokers)}?", yes)

    deleted = ask(settings, lambda admin: admin.delete_topic(name))
    if as_json:
        print_json({"topic": name, "deleted_from": deleted})
    else:
        out.print(f"topic {name} deleted from {', '.join(deleted)}")


@topic.command("perm")
@click.argument("name")
@click.argument("perm", type=click.Choice(list(PERMISSIONS)))
@click.option("--broker", "brokers", multiple=True, help="Only on this broker (repeatable).")
@json_option
@pass_settings
def topic_perm(
    settings: Settings, name: str, perm: str, brokers: tuple[str, ...], as_json: bool
) -> None:
    """Set a topic's permission: rw, r (drain: no new messages), w, none."""
    route = ask(
        settings, lambda admin: admin.set_topic_perm(name, perm, brokers=list(brokers) or None)
    )
    rows = [
        {"broker": q.broker_name, "perm": q.perm, "read": q.read_queue_nums,
         "write": q.write_queue_nums}
        for q in sorted(route.queue_datas, key=lambda q: q.broker_name)
    ]  # fmt: skip
    if as_json:
        print_json({"topic": name, "brokers": rows})
    else:
        table(f"{name}: permission", ["broker", "perm", "read", "write"],
              [list(r.values()) for r in rows])  # fmt: skip
