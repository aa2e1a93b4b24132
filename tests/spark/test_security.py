"""The Spark source and sink with ACL and TLS (options ``rocketmq.accessKey``,
``rocketmq.secretKey``, ``rocketmq.tls``, ``rocketmq.tls.caFile``) against the throw-away
ACL + TLS broker of tests/integration/test_security.py (its module fixture: this module
starts its own copy)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from pyspark.sql import SparkSession

from aiorocket.security import Credentials
from aiorocket.testing import _admin
from tests.integration.test_security import BOB, GROUP, TOPIC, Secured
from tests.integration.test_security import secured as secured  # the module fixture

pytestmark = pytest.mark.integration

#: The reader asks the brokers for queue offsets (min/max): with ACL 2.0 that takes Get
#: on the topic beside Sub (a user with Pub+Sub only is refused at the first query).
CAROL = Credentials("carol", "carol-secret-12345")


@pytest.fixture(scope="module")
def reader_user(secured: Secured) -> Iterator[Credentials]:
    broker = secured.cluster.broker_addrs["broker-a"]

    async def create() -> None:
        await _admin.create_user_on(broker, CAROL.access_key, CAROL.secret_key)
        allowed = {f"Topic:{TOPIC}": ["Pub", "Sub", "Get"], f"Group:{GROUP}": ["Sub"]}
        await _admin.grant_on(broker, CAROL.access_key, allowed)

    anyio.run(create)
    yield CAROL


def options(secured: Secured, secret: str = CAROL.secret_key, **extra: str) -> dict[str, str]:
    return {
        "nameServer": secured.namesrv,
        "rocketmq.accessKey": CAROL.access_key,
        "rocketmq.secretKey": secret,
        "rocketmq.tls.caFile": str(secured.pki.ca_cert),  # TLS on, with the test's CA
        **extra,
    }


def with_options(target: Any, opts: dict[str, str]) -> Any:
    for key, value in opts.items():
        target = target.option(key, value)
    return target


def test_write_and_read_back_with_credentials_over_tls(
    spark: SparkSession, secured: Secured, reader_user: Credentials
) -> None:
    bodies = [f"spark-acl-{uuid.uuid4().hex}-{i}".encode() for i in range(5)]
    df = spark.createDataFrame([(b,) for b in bodies], "body binary")
    with_options(df.write.format("rocketmq").mode("append"), options(secured, topic=TOPIC)).save()
    # Pulls go out under a group the user may read with (Sub on GROUP).
    opts = options(secured, subscribe=TOPIC, commitOffsetsToGroup=GROUP)
    reader = with_options(spark.read.format("rocketmq"), opts)
    got = {r.body for r in reader.load().select("body").collect()}
    assert set(bodies) <= got


def test_a_wrong_secret_fails_with_an_access_error(
    spark: SparkSession, secured: Secured, reader_user: Credentials
) -> None:
    reader = with_options(spark.read.format("rocketmq"),
                          options(secured, secret="not-the-secret", subscribe=TOPIC))  # fmt: skip
    with pytest.raises(Exception, match=r"AccessDeniedError|NO_PERMISSION"):
        reader.load().collect()


def test_a_user_without_the_permission_cannot_write(spark: SparkSession, secured: Secured) -> None:
    # BOB may publish to TOPIC only; the write to another topic is refused by name.
    df = spark.createDataFrame([(b"x",)], "body binary")
    opts = {**options(secured, topic="acl_other_topic"),
            "rocketmq.accessKey": BOB.access_key, "rocketmq.secretKey": BOB.secret_key}  # fmt: skip
    with pytest.raises(Exception, match=r"AccessDeniedError|NO_PERMISSION"):
        with_options(df.write.format("rocketmq").mode("append"), opts).save()


@pytest.mark.parametrize(
    ("opts", "error"),
    [
        ({"rocketmq.accessKey": "a"}, "go together"),
        ({"rocketmq.secretKey": "s"}, "go together"),
        ({"rocketmq.tls.caFile": "/no/such/ca.pem"}, "no such file"),
        ({"rocketmq.tls": "yes"}, "rocketmq.tls must be true or false"),
    ],
)
def test_bad_security_options_are_reported_by_name(
    spark: SparkSession, opts: dict[str, str], error: str
) -> None:
    reader = with_options(spark.read.format("rocketmq"),
                          {"nameServer": "127.0.0.1:9876", "subscribe": "t", **opts})  # fmt: skip
    with pytest.raises(Exception, match=error):
        reader.load()
