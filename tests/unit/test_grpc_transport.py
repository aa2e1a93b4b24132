"""The gRPC transport's call conventions: metadata, signature, endpoints, status mapping."""

from __future__ import annotations

import hashlib
import hmac
import subprocess
import sys
import uuid
from datetime import timedelta

import pytest

pytest.importorskip("grpclib")

from aiorocket.errors import ConfigError, ProxyResponseError
from aiorocket.grpc import Credentials
from aiorocket.grpc import _pb as pb
from aiorocket.grpc._session import backoff_delays
from aiorocket.grpc._transport import GrpcTransport, check_status, parse_endpoint


def test_importing_the_core_never_imports_grpclib() -> None:
    code = (
        "import sys, aiorocket, aiorocket.consumer, aiorocket.producer\n"
        "from aiorocket.producer import Producer\n"
        "Producer('g', proxy='127.0.0.1:8081')  # choosing gRPC imports nothing yet\n"
        "bad = [m for m in ('grpclib', 'betterproto', 'h2', 'aiorocket.grpc') "
        "if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_metadata_on_every_call() -> None:
    t = GrpcTransport("127.0.0.1:8081", client_id="10.0.0.1@42#ab", namespace="ns1")
    first, second = dict(t.metadata()), dict(t.metadata())
    assert first["x-mq-client-id"] == "10.0.0.1@42#ab"
    assert first["x-mq-language"] == "PYTHON"  # the remoting LanguageCode name
    assert first["x-mq-protocol"] == "v2"
    assert first["x-mq-client-version"]
    assert first["x-mq-namespace"] == "ns1"
    assert first["x-mq-request-id"] != second["x-mq-request-id"]
    assert "authorization" not in first


def test_request_ids_are_uuids_unique_across_calls_and_transports() -> None:
    # Made from a random prefix per transport and a count (no uuid4() per call): still
    # UUID-shaped, never repeated within a transport nor shared by two.
    a, b = (GrpcTransport("h:1", client_id="c") for _ in range(2))
    ids = [dict(t.metadata())["x-mq-request-id"] for t in (a, b) for _ in range(1000)]
    assert len(set(ids)) == len(ids)
    assert all(str(uuid.UUID(i)) == i for i in ids)


def test_acl_signature() -> None:
    t = GrpcTransport("h:1", client_id="c", credentials=Credentials("AK", "SK", "tok"))
    md = dict(t.metadata())
    stamp = md["x-mq-date-time"]
    sign = hmac.new(b"SK", stamp.encode(), hashlib.sha1).hexdigest()
    assert md["authorization"] == (
        f"MQv2-HMAC-SHA1 Credential=AK, SignedHeaders=x-mq-date-time, Signature={sign}"
    )
    assert md["x-mq-session-token"] == "tok"


def test_endpoints() -> None:
    assert parse_endpoint("proxy.example:8081") == ("proxy.example", 8081)
    assert parse_endpoint("[::1]:8081") == ("::1", 8081)
    with pytest.raises(ConfigError):
        parse_endpoint("no-port")
    v4 = GrpcTransport("127.0.0.1:1", client_id="c").endpoints()
    assert v4.scheme == pb.AddressScheme.IPv4 and v4.addresses[0].port == 1
    dns = GrpcTransport("proxy.example:2", client_id="c").endpoints()
    assert dns.scheme == pb.AddressScheme.DOMAIN_NAME


def test_status_mapping() -> None:
    check_status(pb.Status(code=pb.Code.OK), "X")
    check_status(pb.Status(code=pb.Code.MULTIPLE_RESULTS), "X")
    with pytest.raises(ProxyResponseError) as info:
        check_status(pb.Status(code=pb.Code.TOO_MANY_REQUESTS, message="slow down"), "Send")
    err = info.value
    assert (err.code, err.name, err.rpc) == (42900, "TOO_MANY_REQUESTS", "Send")
    with pytest.raises(ProxyResponseError) as info:
        check_status(pb.Status(code=49999), "X")  # a code newer than this client
    assert info.value.code == 49999


def test_backoff_follows_the_server_policy() -> None:
    exp = pb.RetryPolicy(
        max_attempts=3,
        exponential_backoff=pb.ExponentialBackoff(
            initial=pb_seconds(0.01), max=pb_seconds(1), multiplier=2.0
        ),
    )
    delay = backoff_delays(exp)
    assert [delay(n) for n in (1, 2, 3)] == pytest.approx([0.01, 0.02, 0.04])
    assert delay(20) == 1.0
    custom = pb.RetryPolicy(
        max_attempts=4,
        customized_backoff=pb.CustomizedBackoff(next=[pb_seconds(1), pb_seconds(5)]),
    )
    delay = backoff_delays(custom)
    assert [delay(n) for n in (1, 2, 3)] == [1.0, 5.0, 5.0]


def pb_seconds(s: float) -> timedelta:
    return timedelta(seconds=s)


def test_config_credentials_and_tls_reach_the_grpc_transport() -> None:
    """The ProducerConfig's credentials/tls (shared with remoting) sign and encrypt the
    gRPC calls too; given twice differently they are a ConfigError."""
    from aiorocket.grpc._producer import GrpcProducer
    from aiorocket.grpc._transport import GrpcOptions, with_security
    from aiorocket.producer import ProducerConfig

    creds = Credentials("ak", "sk")
    producer = GrpcProducer("g", "127.0.0.1:8081",
                            config=ProducerConfig(credentials=creds, tls=True))  # fmt: skip
    md = dict(producer.transport.metadata())
    assert md["authorization"].startswith("MQv2-HMAC-SHA1 Credential=ak,")
    assert producer.transport._ssl is not None
    with pytest.raises(ConfigError):
        with_security(GrpcOptions(credentials=Credentials("other", "x")), creds, False)
