"""ACL and TLS against a throw-away broker started with authentication, authorization
and TLS on (one cluster for the whole module: NameServer + one broker, no Proxy).

The broker runs RocketMQ 5.x ACL 2.0 (users and policies created by the harness with
the admin user) and migrates a 4.x ACL 1.0 ``plain_acl.yml`` account at start-up
(``migrateAuthFromV1Enabled``): both check the same request signature. TLS is on in
``permissive`` mode with a certificate signed by a CA made in the test.
"""

from __future__ import annotations

import shutil
import ssl
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from aiorocket.consumer import ConsumeFromWhere, PullConsumer
from aiorocket.errors import AccessDeniedError, TlsError
from aiorocket.message import Message
from aiorocket.producer import Producer
from aiorocket.security import Credentials, tls_context
from aiorocket.testing import _admin
from aiorocket.testing.broker import BrokerStartError, LocalRocketMQ
from aiorocket.testing.pki import Pki, make_pki

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

ADMIN = Credentials("rocketmq", "admin-secret-12345")
ALICE = Credentials("alice", "alice-secret-12345")  # ACL 2.0: pub+sub on TOPIC / GROUP
BOB = Credentials("bob", "bob-secret-12345")  # ACL 2.0: pub on TOPIC, sub on GROUP
LEGACY = Credentials("legacy", "legacy-secret-12345")  # ACL 1.0 account, migrated
TOPIC, GROUP, OTHER_TOPIC = "acl_topic", "acl_group", "acl_other_topic"
LEGACY_TOPIC, LEGACY_GROUP = "acl_v1_topic", "acl_v1_group"

ACL_BROKER = {
    "authenticationEnabled": True,
    "authenticationProvider":
        "org.apache.rocketmq.auth.authentication.provider.DefaultAuthenticationProvider",
    "authenticationMetadataProvider":
        "org.apache.rocketmq.auth.authentication.provider.LocalAuthenticationMetadataProvider",
    "authorizationEnabled": True,
    "authorizationProvider":
        "org.apache.rocketmq.auth.authorization.provider.DefaultAuthorizationProvider",
    "authorizationMetadataProvider":
        "org.apache.rocketmq.auth.authorization.provider.LocalAuthorizationMetadataProvider",
    "initAuthenticationUser":
        f'{{"username":"{ADMIN.access_key}","password":"{ADMIN.secret_key}"}}',
    "innerClientAuthenticationCredentials":
        f'{{"accessKey":"{ADMIN.access_key}","secretKey":"{ADMIN.secret_key}"}}',
    "migrateAuthFromV1Enabled": True,
}  # fmt: skip

PLAIN_ACL_V1 = f"""\
globalWhiteRemoteAddresses: []
accounts:
  - accessKey: {LEGACY.access_key}
    secretKey: {LEGACY.secret_key}
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms:
      - {LEGACY_TOPIC}=PUB|SUB
    groupPerms:
      - {LEGACY_GROUP}=SUB
"""


class Secured:
    def __init__(self, cluster: LocalRocketMQ, pki: Pki, other_ca: Path) -> None:
        self.cluster = cluster
        self.namesrv = cluster.namesrv_addr
        self.pki = pki
        self.other_ca = other_ca


@pytest.fixture(scope="module")
def secured() -> Iterator[Secured]:
    base = Path(tempfile.mkdtemp(prefix="aiorocket-acl-"))
    pki = make_pki(base / "pki")
    other = make_pki(base / "pki-other", name="other")
    cluster = LocalRocketMQ(base / "cluster")
    try:
        cluster.start(
            brokers=1, proxy=False, broker_props=ACL_BROKER, jvm_props=pki.server_jvm_props(),
            conf_files={"plain_acl.yml": PLAIN_ACL_V1}, admin=ADMIN,
        )  # fmt: skip
        anyio.run(_setup, cluster)
    except BrokerStartError as exc:
        cluster.stop(timeout=5)
        pytest.fail(f"ACL/TLS broker failed to start: {exc}", pytrace=False)
    try:
        yield Secured(cluster, pki, other.ca_cert)
    finally:
        cluster.stop(timeout=10)
        shutil.rmtree(base, ignore_errors=True)


async def _setup(cluster: LocalRocketMQ) -> None:
    for topic in (TOPIC, OTHER_TOPIC, LEGACY_TOPIC):
        await cluster.create_topic(topic, queues=2)
    for group in (GROUP, LEGACY_GROUP):
        await cluster.create_group(group)
    broker = cluster.broker_addrs["broker-a"]
    await _admin.create_user_on(broker, ALICE.access_key, ALICE.secret_key)
    both = {f"Topic:{TOPIC}": ["Pub", "Sub"], f"Group:{GROUP}": ["Sub"]}
    await _admin.grant_on(broker, ALICE.access_key, both)
    await _admin.create_user_on(broker, BOB.access_key, BOB.secret_key)
    await _admin.grant_on(
        broker, BOB.access_key, {f"Topic:{TOPIC}": ["Pub"], f"Group:{GROUP}": ["Sub"]}
    )


async def roundtrip(
    namesrv: str, topic: str, group: str, credentials: Credentials | None, **tls: Any
) -> None:
    """Send 5 messages and read them back (the group's committed offsets are where the
    previous test of the group stopped, or the first offset)."""
    sent = {f"{uuid.uuid4().hex}-{i}".encode() for i in range(5)}
    async with Producer("acl-producer", namesrv, credentials=credentials, **tls) as producer:
        for body in sent:
            await producer.send(Message(topic, body))
    consumer = PullConsumer(
        group, namesrv, credentials=credentials, consume_from_where=ConsumeFromWhere.FIRST_OFFSET,
        long_poll_timeout=1.0, pull_request_timeout=10.0, **tls,
    )  # fmt: skip
    consumer.subscribe(topic)
    got: set[bytes] = set()
    async with consumer:
        with anyio.fail_after(30):
            while not sent <= got:
                for msgs in (await consumer.getmany(timeout=2)).values():
                    got.update(m.body for m in msgs)


async def test_acl2_user_with_permissions_produces_and_consumes(secured: Secured) -> None:
    await roundtrip(secured.namesrv, TOPIC, GROUP, ALICE)


async def test_acl1_account_migrated_from_plain_acl_yml_produces_and_consumes(
    secured: Secured,
) -> None:
    await roundtrip(secured.namesrv, LEGACY_TOPIC, LEGACY_GROUP, LEGACY)


@pytest.mark.parametrize(
    "credentials",
    [
        Credentials(ALICE.access_key, "not-the-secret"),
        Credentials("nobody", "whatever-secret"),
        None,
    ],
    ids=["wrong-secret", "unknown-user", "no-credentials"],
)
async def test_send_with_bad_or_missing_credentials_is_refused(
    secured: Secured, credentials: Credentials | None
) -> None:
    async with Producer("acl-producer", secured.namesrv, credentials=credentials,
                        retries=0) as producer:  # fmt: skip
        with pytest.raises(AccessDeniedError) as info:
            await producer.send(Message(TOPIC, b"x"))
    assert info.value.code == 16
    print(info.value)


async def test_send_to_a_topic_without_pub_permission_names_the_topic(secured: Secured) -> None:
    async with Producer("acl-producer", secured.namesrv, credentials=ALICE,
                        retries=0) as producer:  # fmt: skip
        with pytest.raises(AccessDeniedError) as info:
            await producer.send(Message(OTHER_TOPIC, b"x"))
    assert OTHER_TOPIC in str(info.value)


@pytest.mark.parametrize(
    ("user", "group", "resource"),
    [(BOB, GROUP, f"Topic:{TOPIC}"), (ALICE, "acl_other_group", "Group:acl_other_group")],
    ids=["no-sub-on-topic", "no-sub-on-group"],
)
async def test_consumer_without_sub_permission_fails_to_start_naming_the_resource(
    secured: Secured, user: Credentials, group: str, resource: str
) -> None:
    """Every broker refuses the first heartbeat: starting fails with the typed error
    instead of a consumer that retries forever in silence."""
    consumer = PullConsumer(group, secured.namesrv, credentials=user,
                            long_poll_timeout=1.0, pull_request_timeout=10.0)  # fmt: skip
    consumer.subscribe(TOPIC)
    with anyio.fail_after(30), pytest.raises(AccessDeniedError, match=resource):
        async with consumer:
            pass


async def test_tls_with_the_right_ca_works(secured: Secured) -> None:
    await roundtrip(secured.namesrv, TOPIC, GROUP, ALICE, tls=tls_context(secured.pki.ca_cert))


@pytest.mark.parametrize("which", ["other-ca", "system-cas"])
async def test_tls_with_an_untrusted_certificate_fails_with_tls_error(
    secured: Secured, which: str
) -> None:
    tls: ssl.SSLContext | bool = tls_context(secured.other_ca) if which == "other-ca" else True
    async with Producer("tls-producer", secured.namesrv, credentials=ALICE, tls=tls) as producer:
        with anyio.fail_after(20), pytest.raises(TlsError, match="certificate is not trusted"):
            await producer.send(Message(TOPIC, b"x"))
