"""Choosing the consumer's transport: one argument, and a clear error for what the other
transport lacks (no broker, no Proxy needed: it is decided at construction)."""

from __future__ import annotations

from typing import Any

import pytest

from aiorocket.consumer import ConsumeFromWhere, Consumer, MessageModel
from aiorocket.consumer.allocation import allocate_averagely_by_circle
from aiorocket.errors import ConfigError, UnsupportedTransportError


async def _handle(msg: object) -> None: ...


def test_a_proxy_endpoint_selects_grpc_and_a_namesrv_remoting() -> None:
    assert Consumer("g", proxy="127.0.0.1:8081").transport == "grpc"
    assert Consumer("g", "127.0.0.1:8081", transport="grpc").transport == "grpc"
    assert Consumer("g", "127.0.0.1:9876").transport == "remoting"


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"namesrv": "a:9876", "proxy": "b:8081"}, "either namesrv"),
        ({"proxy": "b:8081", "transport": "remoting"}, "cannot use transport='remoting'"),
        ({"transport": "grpc"}, "needs the Proxy endpoint"),
        ({"namesrv": ["a:1", "b:2"], "transport": "grpc"}, "one Proxy endpoint"),
        ({"namesrv": "a:9876", "transport": "quic"}, "transport must be"),
    ],
)
def test_contradictory_transport_arguments_are_refused(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        Consumer("g", **kwargs)


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"orderly": True, "handler": _handle}, "orderly"),
        ({"message_model": MessageModel.BROADCASTING}, "message_model"),
        ({"consume_from_where": ConsumeFromWhere.FIRST_OFFSET}, "consume_from_where"),
        ({"persist_offset_interval": 1.0}, "persist_offset_interval"),
        ({"listener": object()}, "listener"),
        ({"allocate": allocate_averagely_by_circle}, "allocation"),
        ({"instance_name": "a"}, "instance_name"),
    ],
)
def test_remoting_features_over_grpc_name_the_remoting_transport(
    kwargs: dict[str, Any], named: str
) -> None:
    with pytest.raises(UnsupportedTransportError, match=f"(?s){named}.*remoting"):
        Consumer("g", proxy="127.0.0.1:8081", **kwargs)


def test_settings_with_a_meaning_over_grpc_are_accepted_and_checked() -> None:
    Consumer("g", proxy="p:8081", consume_concurrency=4, max_reconsume_times=3,
             pull_batch_size=16, namespace="ns1")  # fmt: skip
    with pytest.raises(ConfigError, match="at most 32"):
        Consumer("g", proxy="p:8081", pull_batch_size=64)
    consumer = Consumer("g", proxy="p:8081")
    with pytest.raises(UnsupportedTransportError, match="SQL92"):
        consumer.subscribe("t", sql="a > 1")
    with pytest.raises(UnsupportedTransportError, match="remoting"):
        consumer.stats()


def test_the_shared_runtime_s_settings_carry_over_to_grpc() -> None:
    """Batch handlers, the consume timeout and thread caps are the shared runtime's."""
    consumer = Consumer("g", proxy="p:8081", batch_handler=_handle, consume_batch_size=8,
                        consume_timeout=5.0, max_abandoned_threads=2,
                        invisible_duration=10)  # fmt: skip
    assert consumer.config.consume_timeout == 5.0
    assert consumer.config.invisible_duration == 10


@pytest.mark.parametrize("bad", [0, 0.5, 9.99, -10, 12 * 3600 + 1, True, "30"])
def test_an_invisible_duration_the_proxy_refuses_is_a_config_error(bad: object) -> None:
    with pytest.raises(ConfigError, match=r"invisible_duration must be 10\.\.43200 seconds"):
        Consumer("g", proxy="p:8081", invisible_duration=bad)


def test_the_invisible_duration_is_refused_over_remoting_in_pull_mode() -> None:
    with pytest.raises(UnsupportedTransportError, match="invisible_duration exists only for pop"):
        Consumer("g", "a:9876", invisible_duration=60)
    assert Consumer("g", "a:9876", consume_mode="pop", invisible_duration=60).consume_mode == "pop"


def test_consume_modes() -> None:
    assert Consumer("g", "a:9876").consume_mode == "pull"
    assert Consumer("g", proxy="p:8081").consume_mode == "pop"
    with pytest.raises(UnsupportedTransportError, match="consumes by pop only"):
        Consumer("g", proxy="p:8081", consume_mode="pull")
    with pytest.raises(ConfigError, match="consume_mode must be 'pull' or 'pop'"):
        Consumer("g", "a:9876", consume_mode="push")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("settings", "error", "match"),
    [
        ({"message_model": "BROADCASTING"}, UnsupportedTransportError, "BROADCASTING"),
        ({"listener": object()}, UnsupportedTransportError, "rebalance listener"),
        ({"pull_batch_size": 33}, ConfigError, "at most 32"),
    ],
)
def test_pull_only_choices_are_refused_in_pop_mode(
    settings: dict[str, object], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        Consumer("g", "a:9876", consume_mode="pop", **settings)  # type: ignore[arg-type]


def test_grpc_options_need_the_grpc_transport() -> None:
    pytest.importorskip("grpclib")
    from aiorocket.grpc import GrpcOptions

    with pytest.raises(UnsupportedTransportError, match="gRPC transport only"):
        Consumer("g", "a:9876", grpc_options=GrpcOptions())
