"""Which settings of a [`Consumer`][aiorocket.consumer.Consumer] carry over to pop
consumption (through a 5.x Proxy, or from the brokers in ``consume_mode="pop"``), and
what exists on the remoting transport or in pull mode only.

The checks run at construction, where the user made the choice.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Literal

from aiorocket._transport import Transport
from aiorocket.consumer.backend import pull_only, remoting_only
from aiorocket.consumer.config import ConsumerConfig, MessageModel
from aiorocket.errors import ConfigError, UnsupportedTransportError

__all__ = [
    "CARRIED_SETTINGS",
    "GRPC_ONLY_SETTINGS",
    "ConsumeMode",
    "check_grpc_consumer",
    "check_remoting_consumer",
    "choose_consume_mode",
]

#: how a consumer gets messages: pulled by offset from owned queues, or popped
ConsumeMode = Literal["pull", "pop"]

#: ConsumerConfig fields with the same meaning over gRPC; every other field must keep
#: its default there. The handler, its threads, batches, the consume timeout, the
#: retry level and the close are the shared runtime's, so they carry over as they are.
CARRIED_SETTINGS = frozenset({
    "consume_concurrency", "consume_batch_size", "consume_timeout", "max_abandoned_threads",
    "max_reconsume_times", "retry_delay_level", "request_timeout", "shutdown_timeout",
    "long_poll_timeout", "pull_batch_size", "pull_threshold_for_all", "credentials", "tls",
    "namespace", "invisible_duration", "trace", "trace_topic", "max_rate", "topic_max_rate",
    "dedup",
})  # fmt: skip
#: ConsumerConfig fields that mean something for pop consumption only.
GRPC_ONLY_SETTINGS = frozenset({"invisible_duration"})
#: The Proxy's (and a broker's POP_MESSAGE's) largest receive batch.
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


def choose_consume_mode(transport: Transport, mode: str | None) -> ConsumeMode:
    """The consume mode: ``mode``, else pull over remoting and pop over gRPC."""
    if mode is None:
        return "pop" if transport == "grpc" else "pull"
    if mode not in ("pull", "pop"):
        raise ConfigError(f"consume_mode must be 'pull' or 'pop', got {mode!r}")
    if transport == "grpc" and mode == "pull":
        raise UnsupportedTransportError(
            "consume_mode='pull' exists only on the remoting transport (a NameServer "
            "address): a 5.x Proxy's gRPC endpoint consumes by pop only"
        )
    return "pop" if mode == "pop" else "pull"


def check_remoting_consumer(
    cfg: ConsumerConfig, *, pop: bool = False, listener: object | None = None,
    custom_allocation: bool = False,
) -> None:  # fmt: skip
    """Raise ``UnsupportedTransportError`` for a choice the remoting consumer lacks in
    its consume mode (pop: queue-level choices; pull: the invisible duration)."""
    if pop:
        if cfg.message_model is not MessageModel.CLUSTERING:
            raise pull_only("BROADCASTING consumption", "pop shares messages in a group")
        if listener is not None:
            raise pull_only("a rebalance listener")
        if custom_allocation:
            raise pull_only("a queue allocation strategy")
        if cfg.pull_batch_size > MAX_RECEIVE_BATCH:
            raise ConfigError(
                f"pull_batch_size in POP mode is at most {MAX_RECEIVE_BATCH} (a broker's "
                f"largest pop), got {cfg.pull_batch_size}"
            )
        return
    defaults = ConsumerConfig()
    for name in sorted(GRPC_ONLY_SETTINGS):
        if getattr(cfg, name) != getattr(defaults, name):
            raise UnsupportedTransportError(
                f"the consumer setting {name} exists only for pop consumption (a Proxy "
                "endpoint, or consume_mode='pop'): the pull consumer pulls by offset, "
                "nothing becomes invisible"
            )
