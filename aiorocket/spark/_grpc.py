"""The sink's few gRPC-only needs when it writes through a Proxy (option ``proxy``).

Imported only then: it needs the ``grpc`` extra (grpclib), which a NameServer-only
deployment need not install.
"""

from __future__ import annotations

from aiorocket.grpc import _pb as pb
from aiorocket.grpc._transport import GrpcOptions, GrpcTransport, check_status, with_security
from aiorocket.spark._options import WriteOptions

__all__ = ["topic_exists"]


async def topic_exists(opts: WriteOptions, topic: str) -> bool:
    """Whether the Proxy knows ``topic`` (one QueryRoute; other errors propagate)."""
    assert opts.proxy is not None
    client = opts.client
    options = with_security(GrpcOptions(), client.credentials(), client.tls_setting())
    transport = GrpcTransport.create(
        opts.proxy, options, client_id=None, request_timeout=client.request_timeout
    )
    try:
        req = pb.QueryRouteRequest(topic=pb.Resource(name=topic), endpoints=transport.endpoints())
        resp = await transport.unary("QueryRoute", req, pb.QueryRouteResponse)
        if resp.status is not None and resp.status.code == pb.Code.TOPIC_NOT_FOUND:
            return False
        check_status(resp.status, "QueryRoute")
        return True
    finally:
        transport.close()
