"""A [`Consumer`][aiorocket.consumer.Consumer] whose endpoint is a 5.x Proxy: which of its
settings carry over to pop consumption, and what exists on the remoting transport only.

The check runs at construction, where the user made the choice.
"""

from __future__ import annotations

from dataclasses import fields

from aiorocket.consumer.backend import remoting_only
from aiorocket.consumer.config import ConsumerConfig
from aiorocket.errors import ConfigError, UnsupportedTransportError

__all__ = [
    "CARRIED_SETTINGS",
    "GRPC_ONLY_SETTINGS",
    "check_grpc_consumer",
    "check_remoting_consumer",
]

#: ConsumerConfig fields with the same meaning over gRPC; every other field must keep
#: its default there. The handler, its threads, batches, the consume timeout, the
#: retry level and the close are the shared runtime's, so they carry over as they are.
CARRIED_SETTINGS = frozenset({
    "consume_concurrency", "consume_batch_size", "consume_timeout", "max_abandoned_threads",
    "max_reconsume_times", "retry_delay_level", "request_timeout", "shutdown_timeout",
    "long_poll_timeout", "pull_batch_size", "pull_threshold_for_all", "credentials", "tls",
    "namespace", "invisible_duration",
})  # fmt: skip
#: ConsumerConfig fields that mean something over gRPC only.
GRPC_ONLY_SETTINGS = frozenset({"invisible_duration"})
#: The Proxy's largest receive batch.
MAX_RECEIVE_BATCH = 32
#: Hints for the settings a user is most likely to carry over by mistake.
_HINTS = {
    "orderly": "over gRPC, FIFO is a property of the consumer group: create the group "
    "FIFO and the consumer handles each message group in order",
    "message_model": "the Proxy has no broadcasting consumption",
    "consume_from_where": "over gRPC, where a new group starts is the group's setting on "
    "the server",
}


def check_grpc_consumer(
    cfg: ConsumerConfig,
    *,
    listener: object | None,
    custom_allocation: bool,
    instance_name: str | None,
) -> None:
    """Raise ``UnsupportedTransportError`` for a choice the gRPC transport lacks."""
    defaults = ConsumerConfig()
    for f in fields(cfg):
        if f.name not in CARRIED_SETTINGS and getattr(cfg, f.name) != getattr(defaults, f.name):
            raise remoting_only(f"the consumer setting {f.name}", _HINTS.get(f.name, ""))
    if listener is not None:
        raise remoting_only("a rebalance listener", "the Proxy assigns messages, not queues")
    if custom_allocation:
        raise remoting_only("a queue allocation strategy", "the Proxy assigns messages")
    if instance_name is not None:
        raise remoting_only("instance_name")
    if cfg.pull_batch_size > MAX_RECEIVE_BATCH:
        raise ConfigError(
            f"pull_batch_size over gRPC is at most {MAX_RECEIVE_BATCH} (the Proxy's largest "
            f"receive batch), got {cfg.pull_batch_size}"
        )


def check_remoting_consumer(cfg: ConsumerConfig) -> None:
    """Raise ``UnsupportedTransportError`` for a gRPC-only setting over remoting."""
    defaults = ConsumerConfig()
    for name in sorted(GRPC_ONLY_SETTINGS):
        if getattr(cfg, name) != getattr(defaults, name):
            raise UnsupportedTransportError(
                f"the consumer setting {name} exists only over gRPC (a Proxy endpoint): "
                "the remoting consumer pulls by offset, nothing becomes invisible"
            )
