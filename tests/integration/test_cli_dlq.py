"""`aiorocket dlq resend` against the real cluster (issue 39): the whole DLQ, not its
first 1,000; a re-run sends nothing twice; what is confirmed is what is sent; the copies
go to the dead-lettering group alone (its retry topic), not to every group of the topic.

A DLQ of 1,050 messages is made by sending to ``%DLQ%<group>`` with the producer (what
the broker stores there: the original topic in ``RETRY_TOPIC``), not by failing handlers.
"""

from __future__ import annotations

import functools
import json
from collections import Counter
from collections.abc import Callable

import anyio
import pytest
from click.testing import Result

from aiorocket import Message
from aiorocket.admin import Admin
from aiorocket.consumer import ConsumeFromWhere, Consumer, ConsumerMessage
from aiorocket.errors import ConfigError
from aiorocket.message import dlq_topic
from aiorocket.producer import Producer
from aiorocket.testing.broker import LocalRocketMQ

from .cli_helpers import invoke, one_line_error
from .helpers import eventually

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

FAST = {"consume_from_where": ConsumeFromWhere.FIRST_OFFSET, "long_poll_timeout": 1.0,
        "persist_offset_interval": 0.2}  # fmt: skip


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def dead_letters(rocketmq: LocalRocketMQ, group: str, topic: str, n: int) -> list[str]:
    """``n`` dead letters of ``group`` (from ``topic``) in its DLQ (1 queue); their keys."""
    await rocketmq.create_topic(dlq_topic(group), queues=1, brokers=["broker-a"])
    keys = [f"k{i}" for i in range(n)]
    async with Producer(f"{group}-dlq-maker", rocketmq.namesrv_addr, auto_batch=True) as p:

        async def send(chunk: list[str]) -> None:
            for k in chunk:
                props = {"RETRY_TOPIC": topic, "region": "eu"}
                await p.send(Message(dlq_topic(group), k.encode(), keys=[k], properties=props))

        async with anyio.create_task_group() as tg:
            for i in range(16):
                tg.start_soon(send, keys[i::16])
    return keys


async def cli(namesrv: str, *args: str, ok: bool = True) -> Result:
    """``aiorocket ARGS`` in a thread (the command runs its own event loop)."""
    return await anyio.to_thread.run_sync(functools.partial(invoke, namesrv, *args, ok=ok))


async def test_resend_all_pages_the_whole_dlq_and_a_rerun_sends_nothing_twice(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    """1,050 dead letters: --all used to send the first 1,000 on every run (50 never);
    now --limit 1000 sends 1,000 and says 50 remain, the next run sends those 50, a third
    nothing; the group gets each message once, through its retry topic, and another group
    of the topic (audit) gets none."""
    topic, group, audit = unique_name("orders"), unique_name("refunds"), unique_name("audit")
    await rocketmq.create_topic(topic, queues=1)
    keys = await dead_letters(rocketmq, group, topic, 1050)
    aio = functools.partial(cli, rocketmq.namesrv_addr)
    got: list[tuple[str, str]] = []
    audited: list[str] = []

    async def refunds(msg: ConsumerMessage) -> None:
        got.append((msg.topic, msg.keys[0]))

    async def audit_all(msg: ConsumerMessage) -> None:
        audited.append(msg.keys[0])

    c_refunds = Consumer(group, rocketmq.namesrv_addr, handler=refunds, **FAST)
    c_refunds.subscribe(topic)
    c_audit = Consumer(audit, rocketmq.namesrv_addr, handler=audit_all, **FAST)
    c_audit.subscribe(topic)
    async with c_refunds, c_audit:
        # the 1,020th dead letter: past the old 1,000 window
        found = await aio("dlq", "list", group, "--skip", "1019", "--count", "1", "--json")
        (the_1020th,) = json.loads(found.stdout)
        assert the_1020th["keys"][0] in keys
        wanted = the_1020th["msg_id"]
        one = await aio("dlq", "resend", group, "--msg-id", wanted, "--dry-run", "--json")
        assert [m["msg_id"] for m in json.loads(one.stdout)["messages"]] == [wanted]

        first = await aio("dlq", "resend", group, "--all", "--limit", "1000", "--yes", "--json")
        doc = json.loads(first.stdout)
        assert len(doc["messages"]) == 1000 and doc["remaining"] == 50
        assert doc["to"] == f"%RETRY%{group}" and doc["already_resent"] == 0
        second = await aio("dlq", "resend", group, "--all", "--yes", "--json")
        doc = json.loads(second.stdout)
        assert len(doc["messages"]) == 50 and doc["remaining"] == 0
        assert doc["already_resent"] == 1000
        third = await aio("dlq", "resend", group, "--all", "--json")
        assert json.loads(third.stdout)["messages"] == []  # nothing to confirm, nothing sent
        await eventually(lambda: len(got) >= 1050, timeout=60)
    assert Counter(k for _, k in got) == Counter(keys)  # each once
    assert {t for t, _ in got} == {topic}  # the consumer restored the original topic
    assert audited == []


async def test_resend_to_a_pop_group_is_refused_and_to_topic_names_the_other_groups(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    """A POP group reads no %RETRY%<group> (checked: a message sent there never came):
    the resend says so instead of sending where nobody reads; --to-topic names the other
    groups of the topic, which would get the messages too."""
    topic, group, audit = unique_name("orders"), unique_name("popper"), unique_name("audit")
    await rocketmq.create_topic(topic, queues=1)
    await dead_letters(rocketmq, group, topic, 2)
    aio = functools.partial(cli, rocketmq.namesrv_addr)
    c_pop = Consumer(group, rocketmq.namesrv_addr, handler=lambda m: None, consume_mode="pop",
                     consume_from_where=ConsumeFromWhere.FIRST_OFFSET)  # fmt: skip
    c_pop.subscribe(topic)
    c_audit = Consumer(audit, rocketmq.namesrv_addr, handler=lambda m: None, **FAST)
    c_audit.subscribe(topic)
    async with c_pop, c_audit, Admin(rocketmq.namesrv_addr) as admin:
        await eventually(lambda: c_audit.assignment() != [], timeout=30)
        refused = await aio("dlq", "resend", group, "--all", "--yes", ok=False)
        assert refused.exit_code == 2 and "consumes by POP" in one_line_error(refused)
        with pytest.raises(ConfigError, match="consumes by POP"):
            await admin.plan_resend(group, everything=True)
        plan = await admin.plan_resend(group, everything=True, to_topic=True)
        assert plan.target == "" and audit in plan.other_groups and group not in plan.other_groups
        shown = await aio("dlq", "resend", group, "--all", "--to-topic", "--dry-run", "--json")
        doc = json.loads(shown.stdout)
        assert audit in doc["other_groups"] and {m["topic"] for m in doc["messages"]} == {topic}
