"""Namespace naming rules (RocketMQ's ``NamespaceUtil``), checked without a broker."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aiorocket.consumer import Consumer, PullConsumer
from aiorocket.errors import ConfigError
from aiorocket.message import MessageQueue
from aiorocket.namespace import unwrap, unwrap_queue, wrap, wrap_queue
from aiorocket.producer import Producer


@pytest.mark.parametrize(
    ("name", "wire"),
    [
        ("orders", "ns1%orders"),
        ("%RETRY%billing", "%RETRY%ns1%billing"),
        ("%DLQ%billing", "%DLQ%ns1%billing"),
        ("ns1%orders", "ns1%orders"),  # already in it: unchanged
        ("%RETRY%ns1%billing", "%RETRY%ns1%billing"),
        ("TBW102", "TBW102"),  # system topics and groups are never prefixed
        ("RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_HALF_TOPIC"),
        ("rmq_sys_wheel_timer", "rmq_sys_wheel_timer"),
        ("CID_RMQ_SYS_TRANS", "CID_RMQ_SYS_TRANS"),
        ("SCHEDULE_TOPIC_XXXX", "SCHEDULE_TOPIC_XXXX"),
    ],
)
def test_names_are_wrapped_as_the_java_client_wraps_them(name: str, wire: str) -> None:
    assert wrap("ns1", name) == wire


@pytest.mark.parametrize(
    ("wire", "name"),
    [
        ("ns1%orders", "orders"),
        ("%RETRY%ns1%billing", "%RETRY%billing"),
        ("%DLQ%ns1%billing", "%DLQ%billing"),
        ("ns2%orders", "ns2%orders"),  # another namespace's: left as it is
        ("orders", "orders"),
        ("TBW102", "TBW102"),
    ],
)
def test_names_are_unwrapped_only_from_their_own_namespace(wire: str, name: str) -> None:
    assert unwrap("ns1", wire) == name


def test_no_namespace_changes_nothing() -> None:
    mq = MessageQueue("orders", "broker-a", 3)
    assert wrap("", "orders") == "orders"
    assert unwrap("", "x%orders") == "x%orders"
    assert wrap_queue("", mq) is mq and unwrap_queue("", mq) is mq


_names = st.from_regex(r"[A-Za-z0-9_-]{1,20}", fullmatch=True).filter(
    lambda n: (
        not n.startswith(("rmq_sys_", "RMQ_SYS_", "CID_RMQ_SYS_"))
        and n not in {"TBW102", "BenchmarkTest", "OFFSET_MOVED_EVENT", "SELF_TEST_TOPIC"}
    )
)


@given(
    namespace=st.from_regex(r"[A-Za-z0-9_-]{1,12}", fullmatch=True),
    name=_names,
    kind=st.sampled_from(["", "%RETRY%", "%DLQ%"]),
)
def test_unwrap_undoes_wrap(namespace: str, name: str, kind: str) -> None:
    app = kind + name
    wire = wrap(namespace, app)
    assert wire == f"{kind}{namespace}%{name}"
    assert unwrap(namespace, wire) == app
    assert wrap(namespace, wire) == wire
    mq = MessageQueue(app, "broker-a", 1)
    assert unwrap_queue(namespace, wrap_queue(namespace, mq)) == mq


@pytest.mark.parametrize("bad", ["a%b", "has space", "x" * 65, "dot.ted"])
@pytest.mark.parametrize("client", [Consumer, PullConsumer, Producer])
def test_a_namespace_that_cannot_prefix_names_is_refused_at_construction(
    bad: str, client: type
) -> None:
    with pytest.raises(ConfigError, match="namespace"):
        client("g", "127.0.0.1:9876", namespace=bad)
