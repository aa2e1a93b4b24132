"""A [`Consumer`][aiorocket.consumer.Consumer] whose endpoint is a 5.x Proxy: what of its
configuration carries over to [`aiorocket.grpc.PushConsumer`][], and what exists on
the remoting transport only.

The check runs at construction, where the user made the choice; the PushConsumer is
built at start (importing the ``grpc`` extra only then).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import fields
from typing import TYPE_CHECKING, Any

import anyio

from aiorocket.consumer.config import ConsumerConfig
from aiorocket.consumer.handler import is_async_callable
from aiorocket.consumer.message import ConsumerMessage
from aiorocket.consumer.results import HandlerResult
from aiorocket.errors import ConfigError, UnsupportedTransportError

if TYPE_CHECKING:
    from aiorocket.grpc._push import PushConsumer
    from aiorocket.grpc._transport import GrpcOptions

__all__ = ["CARRIED_SETTINGS", "check_grpc_consumer", "push_consumer", "remoting_only"]

#: ConsumerConfig fields with the same meaning over gRPC (the PushConsumer argument each
#: becomes is in ``push_consumer``); every other field must keep its default.
CARRIED_SETTINGS = frozenset({
    "consume_concurrency", "max_reconsume_times", "request_timeout", "shutdown_timeout",
    "long_poll_timeout", "pull_batch_size", "pull_threshold_for_all", "credentials", "tls",
    "namespace",
})  # fmt: skip
#: The Proxy's largest receive batch.
MAX_RECEIVE_BATCH = 32
#: Hints for the settings a user is most likely to carry over by mistake.
_HINTS = {
    "orderly": "over gRPC, FIFO is a property of the consumer group: create the group "
    "FIFO and the PushConsumer consumes each message group in order",
    "message_model": "the Proxy has no broadcasting consumption",
    "consume_from_where": "over gRPC, where a new group starts is the group's setting on "
    "the server",
}


def remoting_only(feature: str, hint: str = "") -> UnsupportedTransportError:
    """The error for a remoting feature asked of a consumer talking to a Proxy."""
    more = f" ({hint})" if hint else ""
    return UnsupportedTransportError(
        f"{feature} exists only on the remoting transport (a NameServer address); this "
        f"consumer talks to a gRPC Proxy{more}"
    )


def check_grpc_consumer(
    cfg: ConsumerConfig,
    *,
    batch_handler: bool,
    listener: object | None,
    custom_allocation: bool,
    instance_name: str | None,
) -> None:
    """Raise ``UnsupportedTransportError`` for a choice the gRPC transport lacks."""
    defaults = ConsumerConfig()
    for f in fields(cfg):
        if f.name not in CARRIED_SETTINGS and getattr(cfg, f.name) != getattr(defaults, f.name):
            raise remoting_only(f"the consumer setting {f.name}", _HINTS.get(f.name, ""))
    if batch_handler:
        raise remoting_only("batch_handler")
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


def push_consumer(
    group: str,
    endpoint: str,
    subscriptions: Mapping[str, str],
    handler: Callable[[ConsumerMessage], Any] | None,
    cfg: ConsumerConfig,
    *,
    options: GrpcOptions | None,
    client_id: str | None,
) -> PushConsumer:
    """The PushConsumer doing what a Consumer configured with ``cfg`` asks for."""
    from aiorocket.grpc._push import PushConsumer
    from aiorocket.grpc._transport import with_security

    attempts = None if cfg.max_reconsume_times == -1 else cfg.max_reconsume_times + 1
    return PushConsumer(
        group, endpoint, subscriptions, _async(handler) if handler is not None else None,
        concurrency=cfg.consume_concurrency,
        max_cache_count=cfg.pull_threshold_for_all or 1024,  # Java 5.x: 1024 messages
        batch_size=cfg.pull_batch_size,
        # The Proxy holds a receive 5-20 s.
        await_duration=min(max(cfg.long_poll_timeout, 5.0), 20.0),
        request_timeout=cfg.request_timeout,
        max_attempts=attempts,
        drain_timeout=cfg.shutdown_timeout,
        options=with_security(options, cfg.credentials, cfg.tls, cfg.namespace),
        client_id=client_id,
    )  # fmt: skip


def _async(
    fn: Callable[[ConsumerMessage], Any],
) -> Callable[[ConsumerMessage], Awaitable[HandlerResult]]:
    """The handler as a coroutine function; a plain function runs in a worker thread, as
    on the remoting transport."""
    if is_async_callable(fn):
        return fn

    async def in_thread(msg: ConsumerMessage) -> HandlerResult:
        result: HandlerResult = await anyio.to_thread.run_sync(fn, msg)
        return result

    return in_thread
