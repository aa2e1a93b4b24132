"""Namespaces: one cluster shared by several tenants or environments, each seeing only
its own topics and groups.

A client with a namespace puts it in front of every topic and group name it sends, the
way RocketMQ's own clients do (Java ``ClientConfig.setNamespace``), and takes it off every
name it hands back, so the application never sees it: topic ``orders`` of namespace
``staging`` is ``staging%orders`` on the broker, the group's retry topic is
``%RETRY%staging%group`` and its dead-letter queue ``%DLQ%staging%group``. System topics
and groups (``TBW102``, ``RMQ_SYS_*``, ``rmq_sys_*``, ``CID_RMQ_SYS_*``) are never
prefixed. Pure functions, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace

from aiorocket.errors import ConfigError
from aiorocket.message import DLQ_TOPIC_PREFIX, RETRY_TOPIC_PREFIX, MessageQueue
from aiorocket.protocol.subscription import Subscription

__all__ = [
    "SEPARATOR",
    "app_subscriptions",
    "check_namespace",
    "unwrap",
    "unwrap_queue",
    "wrap",
    "wrap_queue",
]

#: Between the namespace and the name (``NamespaceUtil.NAMESPACE_SEPARATOR``).
SEPARATOR = "%"
_SYSTEM_NAMES = frozenset({
    "TBW102", "SCHEDULE_TOPIC_XXXX", "BenchmarkTest", "OFFSET_MOVED_EVENT",
    "TRANS_CHECK_MAX_TIME_TOPIC", "SELF_TEST_TOPIC",
})  # fmt: skip
_SYSTEM_PREFIXES = ("rmq_sys_", "RMQ_SYS_", "CID_RMQ_SYS_")
_NAMESPACE_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def check_namespace(namespace: str) -> str:
    """``namespace`` if it can prefix names (letters, digits, ``-``, ``_``; at most 64),
    else ``ConfigError``. The empty string means no namespace."""
    if not isinstance(namespace, str):
        raise ConfigError(f"namespace must be a string, got {type(namespace).__name__}")
    if namespace and not _NAMESPACE_RE.match(namespace):
        raise ConfigError(
            f"namespace {namespace!r} may only contain letters, digits, '-' and '_' "
            "(at most 64 of them): it becomes part of every topic and group name"
        )
    return namespace


def _is_system(name: str) -> bool:
    return name in _SYSTEM_NAMES or name.startswith(_SYSTEM_PREFIXES)


def _split_kind(name: str) -> tuple[str, str]:
    """(``%RETRY%`` or ``%DLQ%`` or ``""``, the rest)."""
    for prefix in (RETRY_TOPIC_PREFIX, DLQ_TOPIC_PREFIX):
        if name.startswith(prefix):
            return prefix, name[len(prefix) :]
    return "", name


def wrap(namespace: str, name: str) -> str:
    """The broker's name of topic or group ``name`` in ``namespace``.

    ```python
    wrap("staging", "orders"), wrap("staging", "%RETRY%billing")
    ```

    ('staging%orders', '%RETRY%staging%billing')

    Idempotent: a name already in the namespace is returned as it is.
    """
    if not namespace or not name or _is_system(name):
        return name
    kind, rest = _split_kind(name)
    if rest.startswith(namespace + SEPARATOR):
        return name
    return f"{kind}{namespace}{SEPARATOR}{rest}"


def unwrap(namespace: str, name: str) -> str:
    """The application's name of the broker's ``name``: ``namespace`` taken off; a name
    of another namespace (or of none) is returned as it is.

    ```python
    unwrap("staging", "staging%orders"), unwrap("staging", "%DLQ%staging%billing")
    ```

    ('orders', '%DLQ%billing')
    """
    if not namespace or not name:
        return name
    kind, rest = _split_kind(name)
    head = namespace + SEPARATOR
    if rest.startswith(head):
        return kind + rest[len(head) :]
    return name


def wrap_queue(namespace: str, mq: MessageQueue) -> MessageQueue:
    """``mq`` with its topic in ``namespace``."""
    topic = wrap(namespace, mq.topic)
    return mq if topic == mq.topic else replace(mq, topic=topic)


def unwrap_queue(namespace: str, mq: MessageQueue) -> MessageQueue:
    """``mq`` with its topic as the application names it."""
    topic = unwrap(namespace, mq.topic)
    return mq if topic == mq.topic else replace(mq, topic=topic)


def app_subscriptions(namespace: str, subs: Mapping[str, Subscription]) -> dict[str, Subscription]:
    """A consumer's subscriptions (by the broker's topic names) as the application names
    them."""
    if not namespace:
        return dict(subs)
    out = {}
    for sub in subs.values():
        topic = unwrap(namespace, sub.topic)
        out[topic] = replace(sub, topic=topic)
    return out
