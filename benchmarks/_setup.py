"""compare.py's setup: the Java build, the official client's venv, topics and offsets."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
import uuid

import _common as c
import anyio

from aiorocket.testing._procs import cpu_seconds
from aiorocket.testing.broker import LocalRocketMQ

JAVA_DIR = os.path.join(c.HERE, "java")
#: the Java 5.x gRPC client's program (rocketmq-client-java, through the Proxy)
JAVA_GRPC_DIR = os.path.join(c.HERE, "java-grpc")
OFFICIAL_VENV = os.path.join(c.HERE, ".venv-official")
OFFICIAL_PY = os.path.join(OFFICIAL_VENV, "bin", "python")
#: the official client logs to ~/logs/rocketmq_python: keep that inside its venv
OFFICIAL_ENV = {"HOME": os.path.join(OFFICIAL_VENV, "home")}


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def build_java(version: str) -> list[str] | None:
    """The remoting client's program: ``mvn -q package`` once per broker version; the java
    command line, or None."""
    return _build(JAVA_DIR, "java-bench-1.jar", "bench.Bench", [f"-Drmq.version={version}"])


def build_java_grpc() -> list[str] | None:
    """The gRPC client's program (rocketmq-client-java, the version in its pom.xml)."""
    return _build(JAVA_GRPC_DIR, "java-grpc-bench-1.jar", "bench.GrpcBench", [])


def _build(directory: str, jar_name: str, main: str, props: list[str]) -> list[str] | None:
    from shutil import which

    if not (which("java") and which("mvn")):
        c.log("java/mvn not found: skipping the Java client")
        return None
    target = os.path.join(directory, "target")
    stamp, cp_file = os.path.join(target, "rmq.version"), os.path.join(target, "classpath.txt")
    jar = os.path.join(target, jar_name)
    # Rebuilt when the client version or the program's sources change.
    sources = [os.path.join(directory, "pom.xml")]
    for root, _dirs, files in os.walk(os.path.join(directory, "src")):
        sources += [os.path.join(root, f) for f in sorted(files)]
    digest = hashlib.sha256(b"".join(_read(f).encode() for f in sorted(sources))).hexdigest()
    version_stamp = f"{' '.join(props)} {digest}"
    if not (os.path.exists(jar) and _read(stamp) == version_stamp):
        c.log(f"building {jar_name} ({' '.join(props) or 'pom.xml versions'}) with Maven")
        argv = ["mvn", "-q", "-B", *props, "package"]
        r = subprocess.run(argv, cwd=directory, capture_output=True, text=True)
        if r.returncode != 0:
            c.log("Maven build failed, skipping Java:\n" + (r.stdout + r.stderr)[-2000:])
            return None
        with open(stamp, "w") as f:
            f.write(version_stamp)
    cp = jar + ":" + _read(cp_file).strip()
    home = os.path.join(target, "home")  # the client's logs go to ${user.home}/logs
    return ["java", f"-Duser.home={home}", "-Xms256m", "-Xmx1g", "-cp", cp, main]


def cluster_cpu(cl: LocalRocketMQ) -> dict[str, float]:
    """CPU seconds used so far by each cluster process (Linux /proc)."""
    return {p.name: cpu_seconds(p.pid) for p in cl.processes}


def ensure_official() -> bool:
    """The official client in its own venv (its grpcio/protobuf pins stay out of ours)."""
    if os.path.exists(OFFICIAL_PY):
        return True
    c.log(f"installing rocketmq-python-client into {OFFICIAL_VENV}")
    try:
        subprocess.run([sys.executable, "-m", "venv", OFFICIAL_VENV], check=True)
        pip = [OFFICIAL_PY, "-m", "pip", "install", "-q", "rocketmq-python-client"]
        subprocess.run(pip, check=True)
    except (subprocess.CalledProcessError, OSError) as exc:
        c.log(f"could not install the official client ({exc}): skipping it")
        return False
    return True


def new_topic(cl: LocalRocketMQ, prefix: str, broker: str | None) -> str:
    """A fresh topic of 8 queues on ``broker`` (None: on every broker)."""
    topic = f"{prefix}_{uuid.uuid4().hex[:8]}"
    brokers = None if broker is None else [broker]
    anyio.run(lambda: cl.create_topic(topic, queues=8, brokers=brokers))
    return topic


def prefill(cl: LocalRocketMQ, topic: str, count: int, size: int) -> None:
    c.log(f"pre-filling {topic} with {count:,} x {size} B")
    with c.progress_bar("pre-fill", count) as progress:
        s = anyio.run(lambda: c.prefill(cl.namesrv_addr, topic, count, size, progress=progress))
    c.log(f"  done in {s:.1f}s ({count / s:,.0f} msgs/s)")


QUIET_PCT = 25.0  # % of a core: above this a cluster process is not idle


def cluster_idle_cpu(
    cl: LocalRocketMQ, seconds: float = 2.0, *, warn: bool = True
) -> dict[str, float]:
    """CPU % of each cluster process over ``seconds`` before measuring (Linux /proc).

    A broker that is busy while nobody uses it (e.g. RocketMQ 5.5.0's transaction op
    spin on a cluster not started with this project's config) would skew every figure.
    """

    procs = cl.processes
    before = {p.name: cpu_seconds(p.pid) for p in procs}
    time.sleep(seconds)
    busy = {p.name: round((cpu_seconds(p.pid) - before[p.name]) / seconds * 100, 1) for p in procs}
    if not warn:
        return busy
    for name, pct in busy.items():
        if pct > QUIET_PCT:
            c.log(f"WARNING: {name} uses {pct}% CPU while idle: figures will suffer")
    return busy


def wait_cluster_quiet(cl: LocalRocketMQ, timeout: float = 20.0) -> dict[str, float]:
    """Wait (up to ``timeout``) until the brokers have digested the previous case.

    A case right after a heavy one (flushing, GC, page cache) would otherwise pay for it.
    """
    deadline = time.monotonic() + timeout
    while True:
        busy = cluster_idle_cpu(cl, 1.0, warn=False)
        if max(busy.values(), default=0.0) <= QUIET_PCT or time.monotonic() > deadline:
            return busy
