"""pytest fixtures for testing a service that uses aiorocket (registered as the ``pytest11``
entry point ``aiorocket``: active in every pytest run, inert unless a test uses them).

* ``rocketmq_cluster`` (session): a [`LocalRocketMQ`][aiorocket.testing.broker.LocalRocketMQ];
  the one recorded in ``$AIOROCKET_BROKER_DIR`` (or the default directory) if it runs
  and is healthy (left running), else a private 2-broker cluster started in a temporary
  directory and stopped at the end of the session (Java 17+ and Maven needed; the
  test is skipped without them);
* ``rocketmq_namesrv``: its NameServer address (also exported as
  ``AIOROCKET_NAMESRV_ADDR`` for the test, so clients built without one find it);
* ``rocketmq_topic``: a fresh topic (8 queues on each broker) per test;
* ``rocketmq_group``: a fresh group name per test;
* ``rocketmq_fake_server``:
``FakeRemotingServer`` (aiorocket.testing.fake_remoting),
  the scriptable remoting server for fault tests (``async with
  rocketmq_fake_server(handler) as server: ... server.address``).

The fixtures are synchronous, so they work the same under pytest-asyncio (any
``asyncio_mode``), anyio's pytest plugin and trio; they may be requested by async
tests and fixtures.
"""

from __future__ import annotations

import re
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:  # imported lazily: a pytest run that uses none of this pays nothing
    from aiorocket.testing.broker import LocalRocketMQ
    from aiorocket.testing.fake_remoting import FakeRemotingServer


def _name(request: pytest.FixtureRequest, prefix: str) -> str:
    stem = re.sub(r"[^A-Za-z0-9_-]+", "_", request.node.name).strip("_")[:48]
    return f"{prefix}_{stem}_{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="session")
def rocketmq_cluster() -> Iterator[LocalRocketMQ]:
    """A running local RocketMQ for the session (see the module's docstring)."""
    from aiorocket.testing.broker import (
        BrokerSetupError,
        LocalRocketMQ,
        MissingToolError,
    )

    existing = LocalRocketMQ.attach()
    if existing is not None:
        yield existing
        return
    base = Path(tempfile.mkdtemp(prefix="aiorocket-pytest-"))
    cluster = LocalRocketMQ(base)
    try:
        cluster.start(brokers=2)
    except (MissingToolError, BrokerSetupError) as exc:
        shutil.rmtree(base, ignore_errors=True)
        pytest.skip(f"no local RocketMQ: {exc}")
    try:
        yield cluster
    finally:
        cluster.stop(timeout=5.0)
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def rocketmq_namesrv(
    rocketmq_cluster: LocalRocketMQ, monkeypatch: pytest.MonkeyPatch
) -> str:
    """The cluster's NameServer address, also set as ``$AIOROCKET_NAMESRV_ADDR``."""
    monkeypatch.setenv("AIOROCKET_NAMESRV_ADDR", rocketmq_cluster.namesrv_addr)
    return rocketmq_cluster.namesrv_addr


@pytest.fixture
def rocketmq_topic(
    rocketmq_cluster: LocalRocketMQ, rocketmq_namesrv: str, request: pytest.FixtureRequest
) -> str:
    """A topic created for this test (8 queues on each broker)."""
    from aiorocket.testing.broker import _run_blocking

    topic = _name(request, "topic")
    _run_blocking(rocketmq_cluster.create_topic, topic)
    return topic


@pytest.fixture
def rocketmq_group(request: pytest.FixtureRequest) -> str:
    """A consumer group name no other test uses."""
    return _name(request, "group")


@pytest.fixture
def rocketmq_fake_server() -> type[FakeRemotingServer]:
    """The scriptable fake remoting server (a class: ``async with it(handler)``)."""
    from aiorocket.testing.fake_remoting import FakeRemotingServer

    return FakeRemotingServer


__all__ = [
    "rocketmq_cluster",
    "rocketmq_fake_server",
    "rocketmq_group",
    "rocketmq_namesrv",
    "rocketmq_topic",
]
