"""Which topics and groups are the brokers' own (left out of listings unless asked for)."""

from __future__ import annotations

from aiorocket.message import DLQ_TOPIC_PREFIX, RETRY_TOPIC_PREFIX

__all__ = ["TOOLS_GROUP", "is_system_group", "is_system_topic"]

#: the group every broker creates at start for tools (MixAll.TOOLS_CONSUMER_GROUP), even
#: with autoCreateSubscriptionGroup=false: mqadmin's own readers pull through it. The CLI's
#: and the admin's reads use it too, so they need no group of their own (which a
#: production cluster would not have, and which would clutter ``group list`` elsewhere).
TOOLS_GROUP = "TOOLS_CONSUMER"

_SYSTEM_TOPICS = {
    "TBW102", "SCHEDULE_TOPIC_XXXX", "BenchmarkTest", "RMQ_SYS_TRANS_HALF_TOPIC",
    "RMQ_SYS_TRACE_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC", "TRANS_CHECK_MAX_TIME_TOPIC",
    "SELF_TEST_TOPIC", "OFFSET_MOVED_EVENT", "DefaultHeartBeatSyncerTopic",
}  # fmt: skip
_SYSTEM_TOPIC_PREFIXES = ("rmq_sys_", RETRY_TOPIC_PREFIX, DLQ_TOPIC_PREFIX, "%SYS%", "RMQ_SYS_")
_SYSTEM_GROUPS = {
    TOOLS_GROUP, "FILTERSRV_CONSUMER", "__MONITOR_CONSUMER", "SELF_TEST_C_GROUP",
    "CLIENT_INNER_PRODUCER", "SELF_TEST_P_GROUP",
}  # fmt: skip
_SYSTEM_GROUP_PREFIXES = ("CID_RMQ_SYS_", "CID_SYS_", "CID_ONS", "PID_RMQ_SYS_")


def is_system_topic(topic: str) -> bool:
    """A broker-internal topic (retry, dead-letter, schedule, transaction, trace, ...)."""
    return topic in _SYSTEM_TOPICS or topic.startswith(_SYSTEM_TOPIC_PREFIXES)


def is_system_group(group: str) -> bool:
    return group in _SYSTEM_GROUPS or group.startswith(_SYSTEM_GROUP_PREFIXES)
