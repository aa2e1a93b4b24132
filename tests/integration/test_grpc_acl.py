"""ACL over gRPC against a real Proxy with authentication and authorization on.

A throw-away cluster (one broker with the Proxy in local mode) whose broker has ACL 2.0
on and whose Proxy checks every call itself, reading users and rules from its broker
(the Proxy's ``ProxyAuthenticationMetadataProvider``): calls signed with the 5.x
``authorization`` header get through; unsigned or badly signed clients are refused at
start with a typed, non-retriable error that carries the Proxy's reason.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import anyio
import pytest

from aiorocket.errors import ProxyResponseError
from aiorocket.message import Message
from aiorocket.producer import Producer
from aiorocket.security import Credentials
from aiorocket.testing.broker import LocalRocketMQ
from tests.integration.helpers import throwaway_cluster
from tests.integration.test_security import ACL_BROKER, ADMIN

pytest.importorskip("grpclib")

from aiorocket.grpc import GrpcOptions, SimpleConsumer
from tests.integration.test_grpc import receive_all

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

#: The Proxy's own authentication and authorization, with users and rules read from the
#: broker (rmq-proxy.json keys).
PROXY_AUTH = {
    "authenticationEnabled": True,
    "authenticationProvider": ACL_BROKER["authenticationProvider"],
    "authenticationMetadataProvider":
        "org.apache.rocketmq.proxy.auth.ProxyAuthenticationMetadataProvider",
    "authorizationEnabled": True,
    "authorizationProvider": ACL_BROKER["authorizationProvider"],
    "authorizationMetadataProvider":
        "org.apache.rocketmq.proxy.auth.ProxyAuthorizationMetadataProvider",
}  # fmt: skip


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # grpclib is asyncio-only


@pytest.fixture(scope="module")
def acl_proxy() -> Iterator[LocalRocketMQ]:
    yield from throwaway_cluster(
        "grpc-acl", brokers=1, broker_props=ACL_BROKER, proxy_props=PROXY_AUTH, admin=ADMIN
    )


async def test_signed_clients_send_and_receive_through_an_acl_proxy(
    acl_proxy: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    topic, group = unique_name("gacl"), unique_name("g")
    await acl_proxy.create_topic(topic, queues=2, brokers=[acl_proxy.state["proxy_broker"]])
    await acl_proxy.create_group(group)
    # The first client of a Proxy just started: on a loaded machine (a JVM starting
    # beside it) its first settings took longer than the default 3 s request timeout
    # once. Only a bound: a Proxy that answers is not waited on.
    async with Producer("pg", proxy=acl_proxy.proxy_grpc, credentials=ADMIN,
                        request_timeout=30.0) as producer:  # fmt: skip
        sent = [await producer.send(Message(topic, b"signed %d" % i)) for i in range(3)]
    options = GrpcOptions(credentials=ADMIN)
    async with SimpleConsumer(
        group, acl_proxy.proxy_grpc, {topic: "*"}, await_duration=5, options=options
    ) as consumer:
        got = await receive_all(consumer, len(sent))
    assert sorted(m.msg_id for m in got) == sorted(r.msg_id for r in sent)


@pytest.mark.parametrize(
    ("credentials", "reason"),
    [(None, "username"), (Credentials(ADMIN.access_key, "not-the-secret"), "signature")],
    ids=["unsigned", "wrong-secret"],
)
async def test_an_acl_proxy_refuses_unsigned_and_badly_signed_clients_at_start(
    acl_proxy: LocalRocketMQ, credentials: Credentials | None, reason: str
) -> None:
    # The Proxy answers the Telemetry settings with UNAUTHORIZED and ends the stream: the
    # client's start fails with that answer, not with a timeout or a protocol error.
    with anyio.fail_after(10), pytest.raises(ProxyResponseError) as refused:
        async with Producer("pg", proxy=acl_proxy.proxy_grpc, credentials=credentials):
            pass
    assert refused.value.code == 40100  # UNAUTHORIZED
    assert not refused.value.retriable
    assert reason in str(refused.value)
