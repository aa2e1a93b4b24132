"""``aiorocket message|dlq``: look messages up by id or key; a group's dead letters,
and sending them back to their topic."""

from __future__ import annotations

import click

from aiorocket._trace import TRACE_TOPIC
from aiorocket.admin import ResendPlan, Resent, original_topic
from aiorocket.cli._common import (
    EXIT_USAGE,
    Settings,
    ask,
    confirm,
    err,
    fail,
    json_option,
    ms_text,
    out,
    parse_time,
    pass_settings,
    print_json,
    run,
    table,
    yes_option,
)
from aiorocket.cli._show import BODY_FORMATS, message_block, message_json
from aiorocket.errors import MessageNotFoundError
from aiorocket.message import MessageExt

_format = click.option(
    "--format",
    "body_format",
    type=click.Choice(BODY_FORMATS),
    default="text",
    show_default=True,
    help="How to print bodies (text falls back to hex for binary).",
)


def print_block(m: MessageExt, body_format: str) -> None:
    fields = message_block(m, body_format)
    width = max(len(label) for label, _ in fields) + 2
    for label, value in fields:
        out.print(f"{label:<{width}}{value}")


@click.group()
def message() -> None:
    """Look messages up by id or key."""


def _looks_like_a_message_id(text: str) -> bool:
    return len(text) >= 16 and all(c in "0123456789abcdefABCDEF" for c in text)


@message.command("get")
@click.argument("msg_id", required=False)
@click.option("--topic", "topic_name", help="The topic (needed for keys; narrows an id lookup).")
@click.option("--key", help="Find the messages with this key instead.")
@click.option("--count", "-c", "limit", type=click.IntRange(1), default=32, show_default=True,
              help="With --key: at most this many (oldest first).")  # fmt: skip
@click.option("--from", "since", help="With --key: stored at or after this time.")
@click.option("--until", help="With --key: stored at or before this time.")
@_format
@json_option
@pass_settings
def message_get(
    settings: Settings,
    msg_id: str | None,
    topic_name: str | None,
    key: str | None,
    limit: int,
    since: str | None,
    until: str | None,
    body_format: str,
    as_json: bool,
) -> None:
    """A message by its id (the offset id, or the producer's id that SendResult, the
    logs and FastStream give: looked up in --topic, or in every topic), or the messages
    with --key in --topic."""
    if (msg_id is None) == (key is None):
        fail("give a message id or --key (not both)", EXIT_USAGE)
    if key is not None and topic_name is None:
        fail("--key needs --topic", EXIT_USAGE)
    if key is None and (since or until):
        fail("--from and --until go with --key", EXIT_USAGE)
    if msg_id is not None and not _looks_like_a_message_id(msg_id):
        # Every id the brokers and clients make is hex (offset ids, UNIQ_KEY, the 5.x
        # ids): anything else is a mistake, not a lookup in every topic's index.
        fail(f"not a message id: {msg_id!r} (ids are hexadecimal; for a key: --key with "
             "--topic)", EXIT_USAGE)  # fmt: skip
    begin = parse_time(since) if since else 0
    end = parse_time(until) if until else None

    async def go() -> tuple[list[MessageExt], bool]:
        async with settings.admin() as admin:
            if key is not None:
                assert topic_name is not None
                got = await admin.lookup_key(topic_name, key, limit=limit, begin_ms=begin,
                                             end_ms=end)  # fmt: skip
                if not got.messages:
                    raise MessageNotFoundError(f"no message with key {key!r} in {topic_name!r}")
                return got.messages, got.more
            assert msg_id is not None
            return [await admin.get_message(msg_id, topic_name)], False

    found, more = run(go)
    if more:
        err.print(f"the first {len(found)} messages with key {key!r}; more match (--count "
                  "for more, --from/--until to narrow)")  # fmt: skip
    if as_json:
        docs = [message_json(m, body_format) for m in found]
        print_json(docs if key is not None else docs[0])
        return
    for i, m in enumerate(found):
        if i:
            out.print()
        print_block(m, body_format)


@click.group()
def dlq() -> None:
    """A consumer group's dead-letter queue: list, resend."""


@dlq.command("list")
@click.argument("group")
@click.option("--count", "-c", "limit", type=click.IntRange(1), default=1000, show_default=True)
@click.option("--skip", type=click.IntRange(0), default=0, help="Start after this many.")
@_format
@json_option
@pass_settings
def dlq_list(
    settings: Settings, group: str, limit: int, skip: int, body_format: str, as_json: bool
) -> None:
    """The messages in a group's dead-letter queue (%DLQ%GROUP)."""
    found = ask(settings, lambda admin: admin.dead_letters(group, limit=limit, skip=skip))
    if as_json:
        print_json([{**message_json(m, body_format), "original_topic": original_topic(m)}
                    for m in found])  # fmt: skip
        return
    out.print(f"{len(found)} dead-lettered message(s) of group {group}")
    for m in found:
        out.print()
        print_block(m, body_format)


@dlq.command("resend")
@click.argument("group")
@click.option("--msg-id", help="The message with this id (producer id or DLQ offset id).")
@click.option("--key", help="The messages with this key.")
@click.option("--all", "everything", is_flag=True, help="Every message not resent yet.")
@click.option("--limit", type=click.IntRange(1), help="At most this many (default: all).")
@click.option("--skip", type=click.IntRange(0), default=0, help="Start after this many.")
@click.option("--again", is_flag=True, help="With --all: those resent before too.")
@click.option(
    "--to-topic",
    is_flag=True,
    help="To the original topic (every group of it gets them), not %RETRY%GROUP.",
)
@click.option("--dry-run", is_flag=True, help="Show what would be sent, send nothing.")
@yes_option
@json_option
@pass_settings
def dlq_resend(
    settings: Settings, group: str, msg_id: str | None, key: str | None, everything: bool,
    limit: int | None, skip: int, again: bool, to_topic: bool, dry_run: bool, yes: bool,
    as_json: bool,
) -> None:  # fmt: skip
    """Send dead-lettered messages again to their group, through its retry topic
    %RETRY%GROUP (copies stay in the DLQ): one (--msg-id), those with a key (--key), or
    --all not resent by an earlier --all."""
    if sum((msg_id is not None, key is not None, everything)) != 1:
        fail("choose one of --msg-id, --key or --all", EXIT_USAGE)
    if again and not everything:
        fail("--again goes with --all", EXIT_USAGE)

    async def plan_it() -> ResendPlan:
        async with settings.admin() as admin:
            return await admin.plan_resend(
                group, msg_id=msg_id, key=key, everything=everything, limit=limit, skip=skip,
                again=again, to_topic=to_topic,
            )  # fmt: skip

    async def send(plan: ResendPlan) -> list[Resent]:
        async with settings.admin() as admin:
            return await admin.resend(plan)

    plan = run(plan_it)
    where = plan.target or "the original topic"
    notes = []
    if plan.already_resent:
        notes.append(f"{plan.already_resent} resent before (--again sends them too)")
    if plan.remaining:
        notes.append(f"{plan.remaining} more left in the DLQ (--skip/--limit)")
    if plan.other_groups:
        notes.append(f"the groups {', '.join(plan.other_groups)} of that topic get them too")
    if not dry_run and plan.letters:
        # what is confirmed is what is sent: the plan read once, not the DLQ again
        note = f" ({'; '.join(notes)})" if notes else ""
        confirm(f"send {len(plan.letters)} message(s) of the DLQ of {group} to {where}{note}?",
                yes)  # fmt: skip
    done = plan.resent() if dry_run or not plan.letters else run(send, plan)
    rows = [{"msg_id": r.msg_id, "dlq_offset_msg_id": r.dlq_offset_msg_id, "topic": r.topic,
             "new_msg_id": r.new_msg_id} for r in done]  # fmt: skip
    if as_json:
        print_json({"group": group, "dry_run": dry_run, "to": plan.target or "topic",
                    "remaining": plan.remaining, "already_resent": plan.already_resent,
                    "other_groups": plan.other_groups, "messages": rows})  # fmt: skip
        return
    verb = "would send" if dry_run else "sent"
    table(
        f"{verb} {len(rows)} message(s) of the DLQ of {group}",
        ["msg id", "to topic", "new msg id"],
        [[r["msg_id"], r["topic"], r["new_msg_id"] or "-"] for r in rows],
    )
    for line in notes:
        err.print(line)


@message.command("trace")
@click.argument("msg_id")
@click.option(
    "--trace-topic", default=TRACE_TOPIC, show_default=True,
    help="The trace topic the clients write to (their trace_topic).",
)  # fmt: skip
@json_option
@pass_settings
def message_trace(settings: Settings, msg_id: str, trace_topic: str, as_json: bool) -> None:
    """The trace of a message (its id, as SendResult gives it): sends, transaction ends and
    each consumer group's handler calls, from the trace records clients write with
    trace=True (Java: enableMsgTrace), as mqadmin queryMsgTraceById and the Dashboard
    show them."""

    async def go() -> list[dict[str, str]]:
        async with settings.admin() as admin:
            return await admin.message_trace(msg_id, trace_topic)

    records = run(go)
    if as_json:
        print_json(records)
        return
    if not records:
        raise MessageNotFoundError(f"no trace of {msg_id} in {trace_topic!r}")
    rows = [_trace_row(r) for r in records]
    table(f"trace of {msg_id}", ["type", "time", "group", "client", "cost ms", "status",
                                 "detail"], rows)  # fmt: skip


def _trace_row(r: dict[str, str]) -> list[object]:
    stamp = r.get("timestamp") or ""
    when = ms_text(int(stamp)) if stamp.isdigit() else "-"
    kind = r["type"]
    if kind == "Pub":
        status = "success" if r.get("success") == "true" else "failed"
        detail = f"topic {r.get('topic')} on {r.get('store_host')} ({r.get('body_length')} B)"
    elif kind == "SubAfter":
        status = _OUTCOMES.get(r.get("context_code", ""), "?")
        detail = f"call {r.get('request_id')}"
    elif kind == "SubBefore":
        status = f"attempt {int(r.get('retry_times') or 0) + 1}"
        detail = f"call {r.get('request_id')}"
    elif kind == "EndTransaction":
        status = r.get("transaction_state", "")
        detail = f"topic {r.get('topic')}" + (
            " (check-back)" if r.get("from_check") == "true" else ""
        )
    else:
        status, detail = "", r.get("fields", "")
    return [kind, when, r.get("group", ""), r.get("client_host", ""), r.get("cost_ms", ""),
            status, detail]  # fmt: skip


#: SubAfter's context codes (Java ConsumeReturnType)
_OUTCOMES = {"0": "success", "1": "timeout", "2": "exception", "3": "returned null", "4": "failed"}
