"""Shared fixtures: anyio backends, and the real local RocketMQ for integration tests.

``rocketmq`` (session) reuses a healthy cluster with >= 2 brokers recorded in
``$AIOROCKET_BROKER_DIR`` / ``/tmp/aiorocket-broker-<uid>`` (e.g. one started with
``python -m aiorocket.testing.broker start --brokers 2``) and leaves it running;
otherwise it starts a private 2-broker cluster in a temporary directory and stops it
at the end of the session. Without Java/Maven the integration tests are skipped, or
fail under ``CI=true`` / ``AIOROCKET_REQUIRE_BROKER=1``.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import HealthCheck, settings

from aiorocket.testing._maven import RMQ_49, RMQ_53
from aiorocket.testing.broker import (
    BrokerSetupError,
    BrokerStartError,
    LocalRocketMQ,
    MissingToolError,
    default_base_dir,
)

if TYPE_CHECKING:  # grpclib-free: the Proxy is a JVM; imported where it is started
    from aiorocket.testing.cluster_proxy import ClusterProxy
    from tests.forked import ForkServer

# Shared, loaded machines: a per-example deadline only produces flaky failures.
settings.register_profile("aiorocket", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("aiorocket")

PRIVATE_PREFIX = f"aiorocket-test-broker-{os.getuid()}-"


def pytest_configure(config: pytest.Config) -> None:
    # A test that leaves a thread in an event loop, or a non-daemon thread running, fails
    # (tests/threads_left.py) instead of holding the run at the interpreter's exit.
    from tests.threads_left import ThreadsLeft

    config.pluginmanager.register(ThreadsLeft(), "aiorocket-threads-left")


@pytest.fixture(params=[pytest.param("asyncio", id="asyncio"), pytest.param("trio", id="trio")])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _broker_required() -> bool:
    ci = os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")
    return ci or os.environ.get("AIOROCKET_REQUIRE_BROKER", "").strip() == "1"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _reap_stale_private_instances() -> None:
    """Stop clusters left behind by test sessions that died (e.g. SIGKILLed pytest)."""
    for base in Path(tempfile.gettempdir()).glob(PRIVATE_PREFIX + "*"):
        try:
            owner = int(json.loads((base / "state.json").read_text()).get("owner_pid", 0))
        except (OSError, ValueError, TypeError):
            owner = 0
        if owner and _pid_alive(owner):
            continue  # another live session's cluster
        with contextlib.suppress(Exception):
            LocalRocketMQ(base).stop(timeout=5.0)
        shutil.rmtree(base, ignore_errors=True)


#: The broker settings of a cluster started for a test session (scripts/test.sh's, or the
#: private one of ``rocketmq``): half messages nobody ended are checked back every 10 s
#: (default 30 s), so each check-back test, and each batch of the Spark sink's
#: exactly-once through a Proxy, waits seconds less; 45 checks before one is discarded
#: (default 15) keep the broker's patience with a dead producer at 7.5 minutes. A
#: cluster started otherwise (``python -m aiorocket.testing.broker start``: development,
#: benchmarks) keeps the defaults; the tests pass on both.
SESSION_BROKER_PROPS = {"transactionCheckInterval": 10_000, "transactionCheckMax": 45}


@pytest.fixture(scope="session")
def rocketmq() -> Iterator[LocalRocketMQ]:
    """A running 2-broker local RocketMQ (sync fixture: independent of anyio_backend)."""
    existing = LocalRocketMQ.attach()
    if existing is not None and len(existing.broker_addrs) >= 2:
        yield existing  # somebody else's cluster: do not stop it
        return
    yield from _private_cluster(None, brokers=2, broker_props=SESSION_BROKER_PROPS)


def _private_cluster(version: str | None, **start: Any) -> Iterator[LocalRocketMQ]:
    """A cluster started in a temporary directory for the session (``version``: the
    default release when None), stopped at its end; skipped (failed under CI) when it
    cannot be provisioned."""
    what = "local RocketMQ" + (f" {version}" if version else "")
    _reap_stale_private_instances()
    base = Path(tempfile.mkdtemp(prefix=PRIVATE_PREFIX))
    cluster = LocalRocketMQ(base, version=version)
    try:
        cluster.start(**start)
    except BrokerStartError as exc:
        shutil.rmtree(base, ignore_errors=True)
        pytest.fail(f"{what} failed to start: {exc}", pytrace=False)
    except (MissingToolError, BrokerSetupError) as exc:
        shutil.rmtree(base, ignore_errors=True)
        if _broker_required():
            pytest.fail(f"{what} cannot be provisioned under CI: {exc}", pytrace=False)
        pytest.skip(f"!!! {what.upper()} INTEGRATION TESTS SKIPPED: {exc}")
    try:
        yield cluster
    finally:
        cluster.stop(timeout=5.0)  # the store is thrown away: no need for a long grace
        shutil.rmtree(base, ignore_errors=True)


#: Half messages are checked back every 60 s on 4.9 (30 s on 5.x) by default: the
#: check-back tests of the versioned sets run in seconds instead.
VERSIONED_BROKER_PROPS = {"transactionCheckInterval": 3_000, "transactionTimeOut": 2_000}


#: The versioned fixtures, and the private clusters they started (stopped after the last
#: test that uses them: their JVMs need not idle through the rest of the suite).
VERSIONED_FIXTURES = ("rocketmq49", "rocketmq53")
_versioned_started: dict[str, LocalRocketMQ] = {}
_versioned_last_user: dict[str, str] = {}


def _versioned_cluster(name: str, version: str, brokers: int) -> Iterator[LocalRocketMQ]:
    """A cluster of RocketMQ ``version`` for the session, beside the default one: the one
    ``python -m aiorocket.testing.broker start --version V`` left running (kept running),
    else a private one started on first use and stopped after the last test using it."""
    existing = LocalRocketMQ.attach(default_base_dir(version))
    if existing is not None and len(existing.broker_addrs) == brokers:
        yield existing
        return
    for cluster in _private_cluster(
        version, brokers=brokers, timeout=180.0, broker_props=VERSIONED_BROKER_PROPS
    ):
        _versioned_started[name] = cluster
        try:
            yield cluster
        finally:
            _versioned_started.pop(name, None)


#: the first collected test of a directory -> the PRESTART modules in it (helpers.py,
#: EarlyCluster): their clusters start as that test sets up.
_prestart_at: dict[str, list[Any]] = {}


def pytest_collection_finish(session: pytest.Session) -> None:
    first_in: dict[Path, str] = {}
    seen: set[str] = set()
    for item in session.items:
        for name in VERSIONED_FIXTURES:
            if name in getattr(item, "fixturenames", ()):
                _versioned_last_user[name] = item.nodeid
        first = first_in.setdefault(item.path.parent, item.nodeid)
        module = getattr(item, "module", None)
        if hasattr(module, "PRESTART") and module.__name__ not in seen:
            seen.add(module.__name__)
            _prestart_at.setdefault(first, []).append(module)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    from tests.integration.helpers import EARLY, EarlyCluster

    for module in _prestart_at.pop(item.nodeid, ()):
        prefix, start = module.PRESTART
        EARLY[module.__name__] = EarlyCluster(prefix, **start)
        # One its module never used (a run stopped before it) goes with the session.
        item.config.add_cleanup(lambda m=module.__name__: _close_unused(m))


def _close_unused(module: str) -> None:
    from tests.integration.helpers import EARLY

    early = EARLY.pop(module, None)
    if early is not None:
        early.close()


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item) -> None:
    for name, nodeid in _versioned_last_user.items():
        cluster = _versioned_started.get(name) if item.nodeid == nodeid else None
        if cluster is not None:
            cluster.stop(timeout=5.0)  # the fixture's own end removes its directory


@pytest.fixture(scope="session")
def rocketmq49() -> Iterator[LocalRocketMQ]:
    """A RocketMQ 4.9.x cluster (no Proxy) for the ``broker49`` tests: 2 brokers, as the
    default suite's tests it reuses expect (a 4.9 broker is a light JVM: ~7 s to start)."""
    yield from _versioned_cluster("rocketmq49", RMQ_49, 2)


@pytest.fixture(scope="session")
def rocketmq53() -> Iterator[LocalRocketMQ]:
    """A RocketMQ 5.3.x cluster (1 broker with its local-mode Proxy) for ``broker53``."""
    yield from _versioned_cluster("rocketmq53", RMQ_53, 1)


@pytest.fixture(scope="session")
def cluster_proxy(rocketmq: LocalRocketMQ) -> Iterator[ClusterProxy]:
    """One cluster-mode Proxy for the session beside the cluster
    (aiorocket.testing.cluster_proxy). Its JVM takes 15-45 s to start on the CI machine:
    the lite tests and the Proxy-restart test share it (a restart keeps its ports)."""
    from aiorocket.testing.cluster_proxy import ClusterProxy

    with ClusterProxy(rocketmq) as proxy:
        yield proxy


@pytest.fixture(scope="module")
def forks(rocketmq: LocalRocketMQ) -> Iterator[ForkServer]:
    """Interpreters forked with aiorocket imported, for a module's example programs and
    doc blocks (tests/forked.py; ``snippets.run_python``)."""
    from tests.forked import ForkServer
    from tests.snippets import env_for

    server = ForkServer(env_for(rocketmq))
    yield server
    server.close()


@pytest.fixture(scope="session")
def lite_proxy(cluster_proxy: ClusterProxy) -> str:
    """The gRPC address of a Proxy that serves lite consumers: the cluster's own Proxy
    runs in local mode, which RocketMQ 5.5.0 does not let serve them."""
    return cluster_proxy.grpc_addr


@pytest.fixture
def unique_name(request: pytest.FixtureRequest) -> Callable[[str], str]:
    """``unique_name("orders")`` -> a fresh topic/group name derived from the test name."""
    stem = re.sub(r"[^A-Za-z0-9_-]+", "_", request.node.name).strip("_")[:60]

    def make(prefix: str = "t") -> str:
        return f"{prefix}_{stem}_{uuid.uuid4().hex[:8]}"

    return make


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A redis-server of the session's own on a free loopback port (RedisDedupStore's
    tests; scripts/ensure_redis.sh installs the Debian package)."""
    redis = pytest.importorskip("redis")
    server = shutil.which("redis-server")
    assert server, "no redis-server: apt-get install redis-server (scripts/test.sh does)"
    port = _free_port()
    workdir = tmp_path_factory.mktemp("redis")
    proc = subprocess.Popen(
        [server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--dir", str(workdir)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        client = redis.Redis(port=port)
        deadline = time.monotonic() + 20
        while True:  # until it answers (it starts in milliseconds; the machine is loaded)
            try:
                client.ping()
                break
            except redis.ConnectionError:
                assert proc.poll() is None, "redis-server exited"
                assert time.monotonic() < deadline, "redis-server did not answer"
                time.sleep(0.05)
        client.close()
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        proc.wait(10)
