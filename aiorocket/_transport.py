"""Which transport a client uses: the remoting protocol to a NameServer and brokers, or
gRPC to a 5.x Proxy. One argument decides it, the same way for every client."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

from aiorocket.errors import ConfigError, UnsupportedTransportError

if TYPE_CHECKING:
    from aiorocket.grpc._transport import GrpcOptions

__all__ = ["Transport", "choose_transport"]

Transport = Literal["remoting", "grpc"]


def choose_transport(
    namesrv: str | Sequence[str] | None,
    proxy: str | None,
    transport: Transport | None,
    grpc_options: GrpcOptions | None,
) -> Transport:
    """``proxy=`` (a Proxy endpoint) means gRPC; otherwise ``transport``, by default
    remoting. Contradictory arguments are a ``ConfigError``."""
    if transport not in (None, "remoting", "grpc"):
        raise ConfigError(f"transport must be 'remoting' or 'grpc', got {transport!r}")
    if proxy is not None:
        if namesrv is not None:
            raise ConfigError("give either namesrv= (remoting) or proxy= (gRPC), not both")
        if transport == "remoting":
            raise ConfigError("proxy= is a gRPC endpoint: it cannot use transport='remoting'")
        return "grpc"
    chosen: Transport = transport or "remoting"
    if namesrv is None and chosen == "grpc":
        raise ConfigError("transport='grpc' needs the Proxy endpoint (proxy='host:port')")
    if chosen == "grpc" and not isinstance(namesrv, str):
        raise ConfigError("transport='grpc' takes one Proxy endpoint 'host:port'")
    if chosen == "remoting" and grpc_options is not None:
        raise UnsupportedTransportError(
            "grpc_options apply to the gRPC transport only (proxy= or transport='grpc')"
        )
    return chosen
