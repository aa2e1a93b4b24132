"""The local RocketMQ used by the integration tests really works, and cleans up after itself."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from aiorocket.client.results import SendResult
from aiorocket.message import Message
from aiorocket.producer import Producer, TransactionState
from aiorocket.protocol.codes import RequestCode, ResponseCode
from aiorocket.testing import _admin, _procs
from aiorocket.testing._procs import (
    Proc,
    alive,
    cpu_seconds,
    port_free,
    proc_start_time,
    spawn,
    stop_all,
)
from aiorocket.testing.broker import HEALTH_TOPIC, LocalRocketMQ

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "aiorocket.testing.broker"]


@pytest.mark.anyio
async def test_topic_route_lists_every_broker(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    topic = unique_name("route")
    route = await rocketmq.create_topic(topic, queues=4)
    assert _admin.route_queues(route) == {"broker-a": (4, 4), "broker-b": (4, 4)}
    assert _admin.route_brokers(route) == rocketmq.broker_addrs
    assert len(rocketmq.broker_addrs) == 2
    assert all(q["perm"] == 6 for q in route["queueDatas"])


@pytest.mark.anyio
async def test_topic_on_selected_broker_with_message_type(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    topic = unique_name("fifo")
    route = await rocketmq.create_topic(topic, queues=2, brokers=["broker-b"], message_type="FIFO")
    assert _admin.route_queues(route) == {"broker-b": (2, 2)}
    resp = await _admin.request(rocketmq.broker_addrs["broker-b"], 351, {"topic": topic})
    assert resp.code == ResponseCode.SUCCESS  # GET_TOPIC_CONFIG
    assert json.loads(resp.body)["attributes"] == {"message.type": "FIFO"}
    assert await rocketmq.route(unique_name("missing")) is None


@pytest.mark.anyio
async def test_create_group(rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]) -> None:
    group = unique_name("group")
    before = await rocketmq.group_config(group)  # None, or auto-created with defaults
    assert before is None or before["consumeMessageOrderly"] is False
    await rocketmq.create_group(group, orderly=True, retry_max_times=3)
    for name in rocketmq.broker_addrs:
        config = await rocketmq.group_config(group, name)
        assert config is not None
        assert config["groupName"] == group
        assert config["consumeMessageOrderly"] is True
        assert config["retryMaxTimes"] == 3


@pytest.mark.anyio
async def test_every_endpoint_answers_on_loopback(rocketmq: LocalRocketMQ) -> None:
    for addr in [rocketmq.namesrv_addr, rocketmq.proxy_remoting]:
        resp = await _admin.request(
            addr, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": HEALTH_TOPIC}
        )
        assert resp.code == ResponseCode.SUCCESS, (addr, resp.remark)
    for addr in [*rocketmq.broker_addrs.values(), rocketmq.proxy_grpc]:
        assert addr.startswith("127.0.0.1:")
        stream = await anyio.connect_tcp("127.0.0.1", int(addr.rpartition(":")[2]))
        await stream.aclose()
    assert await rocketmq.check_health()


def test_state_file_and_status_cli(rocketmq: LocalRocketMQ) -> None:
    state = json.loads((rocketmq.base_dir / "state.json").read_text())
    assert state["status"] == "ready"
    assert state["version"].startswith("5.")
    assert state["brokers"] == rocketmq.broker_addrs
    assert state["namesrv_addr"] == rocketmq.namesrv_addr
    assert {p["name"] for p in state["processes"]} == {"namesrv", "broker-a+proxy", "broker-b"}
    for proc in rocketmq.processes:
        assert alive(proc), proc
        assert not any(port_free(port) for port in proc.ports), proc  # all listening
    out = subprocess.run(
        [*CLI, "status", "--json", "--dir", str(rocketmq.base_dir)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["processes"] == state["processes"]


def test_topic_cli_creates_a_topic_on_every_broker(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    topic = unique_name("cli")
    out = subprocess.run(
        [*CLI, "topic", topic, "--queues", "3", "--dir", str(rocketmq.base_dir)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    route = anyio.run(rocketmq.route, topic)
    assert _admin.route_queues(route) == {b: (3, 3) for b in rocketmq.broker_addrs}


def test_group_cli_creates_a_group_on_every_broker(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    group = unique_name("cli")
    out = subprocess.run(
        [*CLI, "group", group, "--dir", str(rocketmq.base_dir)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    for broker in rocketmq.broker_addrs:
        config = anyio.run(rocketmq.group_config, group, broker)
        assert config is not None and config["groupName"] == group


def test_start_again_is_a_noop(rocketmq: LocalRocketMQ) -> None:
    pids = [p.pid for p in rocketmq.processes]
    again = LocalRocketMQ(rocketmq.base_dir)
    assert again.start(brokers=2) is False
    assert [p.pid for p in again.processes] == pids


def test_status_and_stop_without_cluster(tmp_path: Path) -> None:
    status = subprocess.run([*CLI, "status", "--dir", str(tmp_path)], capture_output=True,
                            text=True, timeout=60, check=False)  # fmt: skip
    assert status.returncode == 1 and "not running" in status.stdout
    stop = subprocess.run([*CLI, "stop", "--dir", str(tmp_path)], capture_output=True,
                          text=True, timeout=60, check=False)  # fmt: skip
    assert stop.returncode == 0


_STUBBORN = textwrap.dedent("""
    import signal, subprocess, sys, time
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    print("ready", flush=True)
    time.sleep(600)
""")


def _group_members(pgid: int, wait: float = 0.0) -> list[int]:
    """Live (non-zombie) processes in process group ``pgid``, polling up to ``wait`` s for none."""
    deadline = time.monotonic() + wait
    while True:
        out = subprocess.run(["ps", "-o", "pid=,stat=", "-g", str(pgid)],
                             capture_output=True, text=True, check=False)  # fmt: skip
        pids = [int(p) for p, st in (ln.split() for ln in out.stdout.splitlines()) if "Z" not in st]
        if not pids or time.monotonic() >= deadline:
            return pids
        time.sleep(0.05)


def test_a_spawned_process_writes_relative_paths_into_its_home(tmp_path: Path) -> None:
    """A JVM's stray relative writes (the Proxy's ACL store ``null/users``) land in its
    own directory, never in the caller's working tree."""
    home = tmp_path / "home"
    home.mkdir()
    writer = [sys.executable, "-c", "open('stray.txt', 'w').write('x')"]
    _, popen = spawn(
        "writer", writer, log=tmp_path / "writer.out", home=home, ports=[], env=dict(os.environ)
    )
    assert popen.wait(timeout=30) == 0
    assert (home / "stray.txt").read_text() == "x"


class _StopClock:
    """``_procs``' clock in ``stop``: its sleeps are real, but its time is the sum of
    them, so the grace it keeps before SIGKILL is counted whatever the machine's load.
    Every signal it sends is recorded with that time."""

    def __init__(self) -> None:
        self.now = 0.0
        self.signals: list[tuple[str, int, float]] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)
        self.now += seconds

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


def test_stop_kills_every_recorded_process_group(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pid bookkeeping of stop: SIGTERM, SIGKILL after the grace, children, pid reuse.
    The grace is counted on ``_StopClock``: SIGKILL goes 1 s after SIGTERM as asked
    (not at the 20 s default, nor later), not a wall-clock bound on the whole stop."""
    env = dict(os.environ)
    sleeper = [sys.executable, "-c", "import time; time.sleep(600)"]
    polite, polite_pop = spawn(
        "polite", sleeper, log=tmp_path / "polite.out", home=tmp_path, ports=[], env=env
    )
    stubborn, stubborn_pop = spawn(
        "stubborn", [sys.executable, "-c", _STUBBORN], log=tmp_path / "stubborn.out",
        home=tmp_path, ports=[], env=env,
    )  # fmt: skip
    deadline = time.monotonic() + 20
    while "ready" not in (tmp_path / "stubborn.out").read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(_group_members(stubborn.pid)) == 2  # the stubborn one and its child
    # Same pid, other start time: a recycled pid must never be signalled.
    impostor = Proc("impostor", os.getpid(), (proc_start_time(os.getpid()) or 0) + 1, "", "")
    assert not alive(impostor)
    # Via the state file, as `stop` from another process would see it.
    state = {
        "status": "ready",
        "processes": [polite.to_json(), stubborn.to_json(), impostor.to_json()],
    }
    (tmp_path / "state.json").write_text(json.dumps(state))
    cluster = LocalRocketMQ(tmp_path)
    clock = _StopClock()
    signal_one = _procs._signal

    def record(proc: Proc, sig: int) -> None:
        clock.signals.append((proc.name, sig, clock.now))
        signal_one(proc, sig)

    monkeypatch.setattr(_procs, "time", clock)
    monkeypatch.setattr(_procs, "_signal", record)
    killed = cluster.stop(timeout=1.0)
    monkeypatch.undo()
    assert killed == ["stubborn"]
    # SIGTERM to both at once; SIGKILL to the one left at the first poll past the grace
    terms = [(name, at) for name, sig, at in clock.signals if sig == signal.SIGTERM]
    kills = [(name, at) for name, sig, at in clock.signals if sig == signal.SIGKILL]
    assert sorted(terms) == [("polite", 0.0), ("stubborn", 0.0)]
    assert len(kills) == 1 and kills[0][0] == "stubborn" and 1.0 <= kills[0][1] < 1.15, kills
    for pop in (polite_pop, stubborn_pop):
        pop.wait(timeout=5)
    assert polite_pop.returncode == -signal.SIGTERM
    assert stubborn_pop.returncode == -signal.SIGKILL
    assert _group_members(stubborn.pid, wait=5.0) == []  # the child went with its group
    assert not alive(polite) and not alive(stubborn)
    assert json.loads((tmp_path / "state.json").read_text())["status"] == "stopped"
    assert stop_all([polite, stubborn], timeout=0.1) == []  # idempotent


@pytest.mark.skipif(
    os.environ.get("AIOROCKET_TEST_THROWAWAY") != "1",
    reason="starts and stops a second real cluster (~45 s); set AIOROCKET_TEST_THROWAWAY=1",
)
def test_demo_starts_and_stops_its_own_cluster(rocketmq: LocalRocketMQ, tmp_path: Path) -> None:
    """The README's first command on a machine where no broker runs: ``scripts/demo.sh``
    starts a cluster (2 brokers, the default everywhere), runs the demo against it and
    stops it again: no JVM and no port is left behind."""
    base = tmp_path / "rmq"
    env = {**os.environ, "AIOROCKET_BROKER_DIR": str(base)}
    env.pop("AIOROCKET_KEEP_BROKER", None)
    demo = subprocess.run(
        ["sh", str(REPO / "scripts" / "demo.sh"), "--count", "500"],
        env=env, capture_output=True, text=True, timeout=400, check=False,
    )  # fmt: skip
    assert demo.returncode == 0, demo.stdout + demo.stderr
    assert "produced 500 messages in" in demo.stdout and "consumed 500 messages in" in demo.stdout
    assert "stopping the local RocketMQ the demo started" in demo.stdout
    cluster = LocalRocketMQ(base)
    assert cluster.load() and cluster.state["status"] == "stopped"
    assert len(cluster.broker_addrs) == 2
    assert set(cluster.broker_addrs.values()).isdisjoint(rocketmq.broker_addrs.values())
    procs = cluster.processes
    assert len(procs) == 3 and not any(alive(p) for p in procs)
    assert all(port_free(port) for p in procs for port in p.ports)


@pytest.mark.anyio
async def test_brokers_stay_idle_after_transactions(
    rocketmq: LocalRocketMQ, unique_name: Callable[[str], str]
) -> None:
    """RocketMQ 5.5.0 spins a core for good once a transaction op batch has been idle
    for ``transactionOpBatchInterval`` (3 s by default); the test cluster's broker config
    avoids that state (every benchmark run after the test suite depended on it)."""
    if not sys.platform.startswith("linux"):
        pytest.skip("reads thread CPU times from Linux /proc")

    topic = unique_name("txidle")
    await rocketmq.create_topic(topic, queues=2, message_type="TRANSACTION")

    async def commit(msg: Message, result: SendResult) -> TransactionState:
        return TransactionState.COMMIT

    async with Producer(unique_name("pg"), rocketmq.namesrv_addr) as producer:
        results = [
            await producer.send_in_transaction(Message(topic, b"t"), commit) for _ in range(4)
        ]
    assert {r.send_result.queue.broker_name for r in results} == set(rocketmq.broker_addrs)
    await anyio.sleep(3.5)  # the idle time after which an unpatched 5.5.0 broker spins
    brokers = [p for p in rocketmq.processes if p.name.startswith("broker")]
    before = {p.pid: cpu_seconds(p.pid, "TransactionalOp") for p in brokers}
    await anyio.sleep(2.0)
    used = {pid: cpu_seconds(pid, "TransactionalOp") - t for pid, t in before.items()}
    assert max(used.values()) < 0.5, used  # a spinning thread takes ~2 s of 2 s


@pytest.mark.anyio
async def test_brokers_do_not_flush_the_timer_wheel_every_second(rocketmq: LocalRocketMQ) -> None:
    """With the default ``timerFlushIntervalMs`` (1 s) each broker's TimerFlushService
    compares its 38.7 MB timer wheel byte by byte every second: 20-110 ms of one core per
    second, idle or not, which was the main source of the benchmark's latency tail."""
    if not sys.platform.startswith("linux"):
        pytest.skip("reads thread CPU times from Linux /proc")
    brokers = [p for p in rocketmq.processes if p.name.startswith("broker")]
    thread = "TimerFlushServi"  # /proc truncates thread names to 15 characters
    windows = []
    for _ in range(2):  # the long interval's own flush can fall into one window, not both
        before = {p.pid: cpu_seconds(p.pid, thread) for p in brokers}
        assert all(t > 0 for t in before.values()), before  # found: its first flush ran
        await anyio.sleep(4.0)
        windows.append(max(cpu_seconds(pid, thread) - t for pid, t in before.items()))
    assert min(windows) < 0.04, windows  # once a second: >= 0.08 in 4 s
