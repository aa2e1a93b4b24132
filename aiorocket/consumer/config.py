"""Consumer settings. Defaults are the Java client's (DefaultMQPushConsumer, ClientConfig)."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass

from aiorocket._settings import (
    check_invisible_duration,
    check_positive_ints,
    check_positive_numbers,
)
from aiorocket._trace import TRACE_TOPIC, check_trace_settings
from aiorocket.consumer.dedup import Dedup
from aiorocket.errors import ConfigError
from aiorocket.namespace import check_namespace
from aiorocket.security import Credentials, TlsSetting, check_security

__all__ = [
    "DEFAULT_MAX_RECONSUME_TIMES",
    "UNLIMITED_RECONSUME",
    "ConsumeFromWhere",
    "ConsumerConfig",
    "MessageModel",
]


class MessageModel(str, enum.Enum):
    CLUSTERING = "CLUSTERING"
    BROADCASTING = "BROADCASTING"


class ConsumeFromWhere(str, enum.Enum):
    """Where a group with *no stored offset* starts; ignored once the group has one."""

    LAST_OFFSET = "CONSUME_FROM_LAST_OFFSET"
    FIRST_OFFSET = "CONSUME_FROM_FIRST_OFFSET"
    TIMESTAMP = "CONSUME_FROM_TIMESTAMP"


#: what ``max_reconsume_times=-1`` means when consuming concurrently (the broker's default).
DEFAULT_MAX_RECONSUME_TIMES = 16
#: what it means when orderly: Java's Integer.MAX_VALUE, retried in place for ever.
UNLIMITED_RECONSUME = 2**31 - 1


@dataclass(slots=True)
class ConsumerConfig:
    """Settings of [`Consumer`][aiorocket.consumer.Consumer] and ``PullConsumer``.

    Pass them as keyword arguments (``Consumer(group, consume_concurrency=50)``) or as
    ``config=ConsumerConfig(...)``; invalid values raise ``ConfigError``.
    """

    #: CLUSTERING: the group's members share the queues; BROADCASTING: each gets every message.
    message_model: MessageModel = MessageModel.CLUSTERING
    #: where a group with no committed offset starts (ignored once it has one).
    consume_from_where: ConsumeFromWhere = ConsumeFromWhere.LAST_OFFSET
    #: epoch milliseconds for CONSUME_FROM_TIMESTAMP; None means "30 minutes ago" (Java).
    consume_timestamp_ms: int | None = None
    #: messages asked for per pull request (at most 1024).
    pull_batch_size: int = 32
    #: cached messages per queue before its pulling pauses.
    pull_threshold_for_queue: int = 1000
    #: cached bytes per queue before its pulling pauses.
    pull_threshold_size_for_queue: int = 100 * 1024 * 1024
    #: process-wide cap on cached messages; None = no cap beyond the per-queue ones.
    pull_threshold_for_all: int | None = None
    #: pulling a queue pauses when its newest cached message is this many offsets past
    #: its oldest unfinished one (the commit point waits for the slowest handler).
    #: pulling pauses this many offsets past a queue's oldest unsettled message.
    consume_concurrently_max_span: int = 2000
    #: a queue paused this long by one unsettled message (the span limit) logs a
    #: warning naming it, once per message.
    stall_warning_after: float = 60.0
    #: handlers running at once (the Java consume thread pool's size).
    consume_concurrency: int = 20
    #: messages of one queue handed to a ``batch_handler`` at once.
    consume_batch_size: int = 1
    #: retries of a failed message before it goes to the dead-letter queue; -1 means the
    #: Java client's default: 16 when consuming concurrently, no limit when orderly.
    max_reconsume_times: int = 16
    #: delay level for failed messages when the handler does not choose one
    #: (0: the broker's default, 3 + reconsume times, i.e. 10 s, 30 s, 1 min, ...).
    retry_delay_level: int = 0
    #: seconds a handler may run; then it is cancelled and the message counts as failed.
    consume_timeout: float = 15 * 60.0
    #: over gRPC (pop): seconds a received message stays invisible to the rest of the
    #: group; the consumer renews it before then while it is cached or handled (up to
    #: ``consume_timeout``), so it is the bound on a redelivery after a crash, not on a
    #: handler. 10 s to 12 h (the Proxy's bounds).
    invisible_duration: float = 30.0
    #: synchronous handlers: threads abandoned by a timeout (a thread cannot be
    #: interrupted) that may still run before new handler calls wait for one to return.
    max_abandoned_threads: int = 20
    #: seconds between offset commits.
    persist_offset_interval: float = 5.0
    #: seconds between heartbeats to every broker of the subscribed topics.
    heartbeat_interval: float = 30.0
    #: seconds between rebalance passes (a group change also starts one at once).
    rebalance_interval: float = 20.0
    #: seconds between route refreshes from the NameServer.
    route_refresh_interval: float = 30.0
    #: seconds a broker holds a pull request that finds no message.
    long_poll_timeout: float = 15.0
    #: client-side timeout of a pull request (long poll included).
    pull_request_timeout: float = 30.0
    #: seconds a queue waits before pulling again after a failed pull.
    pull_backoff_on_error: float = 1.0
    #: messages per second this consumer receives at most, all its topics together
    #: (``aiorocket.consumer.rate``); None: no limit.
    max_rate: float | None = None
    #: messages per second received at most per topic, by the application's topic name
    #: (``{"orders": 50.0}``), beside ``max_rate``; topics not named have no own limit.
    topic_max_rate: Mapping[str, float] | None = None
    #: idempotent consumption: claim each message's key in a store before its handler
    #: runs, and skip keys handled already (``aiorocket.consumer.dedup``); handlers only.
    dedup: Dedup | None = None
    #: when a send-back fails, retry the message locally after this many seconds (Java: 5),
    #: or after the send-back's delay level's time if that is longer.
    local_retry_delay: float = 5.0
    #: timeout of other requests (routes, heartbeats, offsets, send-backs).
    request_timeout: float = 3.0
    #: how long close() and a queue drop wait for running handlers.
    shutdown_timeout: float = 30.0
    #: consume each queue in order, one message at a time, under a broker lock.
    orderly: bool = False
    #: orderly: how long a queue pauses after a failed message before retrying it.
    suspend_current_queue_time: float = 1.0
    #: orderly: broker queue locks are renewed this often; a lock older than
    #: ``lock_max_live_time`` without renewal stops dispatch (Java: 20 s / 30 s).
    lock_renew_interval: float = 20.0
    lock_max_live_time: float = 30.0
    #: broadcasting: a failed message is retried locally this many times, then dropped.
    broadcast_max_retries: int = 3
    #: broadcasting: where the local offset files live (default ~/.aiorocket/offsets).
    offset_store_dir: str | None = None
    #: ACL identity (access key, secret key, optional security token) signing every
    #: request; see [`aiorocket.security`][]. Remoting transport only.
    credentials: Credentials | None = None
    #: TLS to the NameServers and brokers: True (system CAs, host names checked) or an
    #: ``ssl.SSLContext`` (e.g. [`aiorocket.security.tls_context`][] with a private CA).
    tls: TlsSetting = False
    #: servers reached at another address than the one they advertise (port forwarding,
    #: a tunnel, a test proxy): ``{"10.0.0.5:10911": "127.0.0.1:20911"}``.
    address_map: dict[str, str] | None = None
    #: a namespace (Java ``setNamespace``): every topic and group name is sent as
    #: ``<namespace>%<name>`` and handed back without it ([`aiorocket.namespace`][]).
    #: Empty: none.
    namespace: str = ""
    #: write message trace records (Java ``enableMsgTrace``): what the RocketMQ Dashboard
    #: and ``mqadmin queryMsgTraceById`` show; see docs/trace.md. Off by default.
    trace: bool = False
    #: where they go (Java ``customizedTraceTopic``); over gRPC a topic of your own (the
    #: Proxy refuses system topics, ``RMQ_SYS_TRACE_TOPIC`` among them).
    trace_topic: str = TRACE_TOPIC

    def reconsume_limit(self) -> int:
        """Retries before the dead-letter queue, with -1 resolved as the Java client does
        (``getMaxReconsumeTimes``: 16 concurrently, ``Integer.MAX_VALUE`` orderly)."""
        if self.max_reconsume_times != -1:
            return self.max_reconsume_times
        return UNLIMITED_RECONSUME if self.orderly else DEFAULT_MAX_RECONSUME_TIMES

    def validate(self) -> None:
        check_security(self.credentials, self.tls)
        check_namespace(self.namespace)
        check_trace_settings(self.trace, self.trace_topic)
        positive_ints = {
            "pull_batch_size": self.pull_batch_size,
            "pull_threshold_for_queue": self.pull_threshold_for_queue,
            "pull_threshold_size_for_queue": self.pull_threshold_size_for_queue,
            "consume_concurrently_max_span": self.consume_concurrently_max_span,
            "consume_concurrency": self.consume_concurrency,
            "consume_batch_size": self.consume_batch_size,
            "max_abandoned_threads": self.max_abandoned_threads,
        }
        check_positive_ints(positive_ints)
        if self.pull_threshold_for_all is not None:
            check_positive_ints({"pull_threshold_for_all": self.pull_threshold_for_all})
        if self.pull_batch_size > 1024:
            raise ConfigError("pull_batch_size must be at most 1024")
        if self.max_reconsume_times < -1:
            raise ConfigError("max_reconsume_times must be >= -1")
        positive_floats = {
            "consume_timeout": self.consume_timeout,
            "persist_offset_interval": self.persist_offset_interval,
            "heartbeat_interval": self.heartbeat_interval,
            "rebalance_interval": self.rebalance_interval,
            "long_poll_timeout": self.long_poll_timeout,
            "pull_request_timeout": self.pull_request_timeout,
            "request_timeout": self.request_timeout,
            "stall_warning_after": self.stall_warning_after,
        }
        if self.max_rate is not None:
            positive_floats["max_rate"] = self.max_rate
        if self.topic_max_rate is not None:
            if not isinstance(self.topic_max_rate, Mapping):
                raise ConfigError("topic_max_rate must map topic names to messages per second")
            for topic, rate in self.topic_max_rate.items():
                positive_floats[f"topic_max_rate[{topic!r}]"] = rate
        check_positive_numbers(positive_floats)
        check_invisible_duration(self.invisible_duration)
        if self.dedup is not None:
            if not isinstance(self.dedup, Dedup):
                raise ConfigError("dedup must be a Dedup (aiorocket.consumer.dedup)")
            self.dedup.validate()
        # The broker sweeps held pulls every 5 s, so a long poll can last that much longer.
        if self.pull_request_timeout < self.long_poll_timeout + 5:
            raise ConfigError("pull_request_timeout must exceed long_poll_timeout by 5 s or more")
        if self.shutdown_timeout < 0:
            raise ConfigError("shutdown_timeout must be >= 0")
        self.message_model = MessageModel(self.message_model)
        self.consume_from_where = ConsumeFromWhere(self.consume_from_where)
