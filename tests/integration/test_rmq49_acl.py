"""RocketMQ 4.9's plain ACL (``aclEnable`` and ``conf/plain_acl.yml``): an account's access
and secret key sign every request; a wrong secret and a topic without permission are
refused with ``AccessDeniedError``. One private 4.9.7 broker (no Proxy) for the module."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from aiorocket.errors import AccessDeniedError
from aiorocket.message import Message
from aiorocket.producer import Producer
from aiorocket.security import Credentials
from aiorocket.testing._maven import RMQ_49
from aiorocket.testing.broker import BrokerStartError, LocalRocketMQ

from .test_security import roundtrip

pytestmark = [pytest.mark.anyio, pytest.mark.integration, pytest.mark.broker49]

ADMIN = Credentials("rocketmq2", "admin-secret-12345")
USER = Credentials("user4997", "user-secret-12345")  # 4.9: keys longer than 6
TOPIC, GROUP, DENIED_TOPIC = "acl49_topic", "acl49_group", "acl49_denied"
PLAIN_ACL = f"""\
globalWhiteRemoteAddresses: []
accounts:
  - accessKey: {ADMIN.access_key}
    secretKey: {ADMIN.secret_key}
    admin: true
  - accessKey: {USER.access_key}
    secretKey: {USER.secret_key}
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms:
      - {TOPIC}=PUB|SUB
      - {DENIED_TOPIC}=SUB
    groupPerms:
      - {GROUP}=SUB
"""


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def acl49() -> Iterator[LocalRocketMQ]:
    base = Path(tempfile.mkdtemp(prefix="aiorocket-acl49-"))
    cluster = LocalRocketMQ(base, version=RMQ_49)
    try:
        cluster.start(brokers=1, broker_props={"aclEnable": True},
                      conf_files={"plain_acl.yml": PLAIN_ACL}, admin=ADMIN)  # fmt: skip
        anyio.run(_setup, cluster)
    except BrokerStartError as exc:
        cluster.stop(timeout=5)
        shutil.rmtree(base, ignore_errors=True)
        pytest.fail(f"4.9 ACL broker failed to start: {exc}", pytrace=False)
    try:
        yield cluster
    finally:
        cluster.stop(timeout=10)
        shutil.rmtree(base, ignore_errors=True)


async def _setup(cluster: LocalRocketMQ) -> None:
    for topic in (TOPIC, DENIED_TOPIC):
        await cluster.create_topic(topic, queues=2)
    await cluster.create_group(GROUP)


async def test_an_account_with_access_and_secret_key_produces_and_consumes(
    acl49: LocalRocketMQ,
) -> None:
    await roundtrip(acl49.namesrv_addr, TOPIC, GROUP, USER)


@pytest.mark.parametrize(
    "credentials", [Credentials(USER.access_key, "wrong-secret-123"), None], ids=["bad", "none"]
)
async def test_a_wrong_secret_or_no_credentials_is_refused(
    acl49: LocalRocketMQ, credentials: Credentials | None
) -> None:
    async with Producer("acl49-producer", acl49.namesrv_addr, credentials=credentials) as p:
        with anyio.fail_after(30), pytest.raises(AccessDeniedError):
            await p.send(Message(TOPIC, b"x"))


async def test_a_topic_without_pub_permission_is_refused(acl49: LocalRocketMQ) -> None:
    async with Producer("acl49-producer", acl49.namesrv_addr, credentials=USER) as p:
        with anyio.fail_after(30), pytest.raises(AccessDeniedError):
            await p.send(Message(DENIED_TOPIC, b"x"))
