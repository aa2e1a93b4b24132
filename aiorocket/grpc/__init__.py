"""RocketMQ 5.x Proxy over gRPC (the ``grpc`` extra: grpclib and betterproto; asyncio only).

* [`aiorocket.producer.Producer`][] with ``proxy="host:port"`` sends through the Proxy.
* [`aiorocket.consumer.Consumer`][] with ``proxy="host:port"`` consumes through the
  Proxy, on the same runtime as over remoting; its messages are ``PopMessage``.
* ``SimpleConsumer`` receives with long polling, acks and changes invisibility.
* ``GrpcOptions`` sets TLS, namespace, ACL credentials and the keepalive
  (``KeepaliveSettings``) that abandons a connection which stopped answering.

Nothing else in aiorocket imports this package, so ``import aiorocket`` never needs
grpclib or betterproto.
"""

from __future__ import annotations

from aiorocket._extras import needs_extra

with needs_extra("grpc", "aiorocket.grpc (the 5.x Proxy over gRPC)"):
    import betterproto  # noqa: F401
    import grpclib  # noqa: F401

from aiorocket.grpc._keepalive import KeepaliveSettings
from aiorocket.grpc._push_message import PopMessage
from aiorocket.grpc._received import ReceivedMessage
from aiorocket.grpc._simple import SimpleConsumer
from aiorocket.grpc._transport import GrpcOptions
from aiorocket.security import Credentials  # the one ACL identity of both transports

__all__ = [
    "Credentials",
    "GrpcOptions",
    "KeepaliveSettings",
    "PopMessage",
    "ReceivedMessage",
    "SimpleConsumer",
]
