"""An extra Apache Proxy in cluster mode beside a running local cluster.

The harness's Proxy runs in local mode (``-pm local``: Proxy and broker-a in one JVM),
which Apache RocketMQ 5.5.0 does not let serve lite consumers: its
``SyncLiteSubscription`` fails (no lite subscription service) and a lite consumer's
``ReceiveMessage`` throws NotImplementedException. A Proxy in cluster mode talks to the
brokers over remoting and serves them. ``ClusterProxy`` starts one such Proxy, of the
cluster's own version, against the cluster's NameServer, on free ports, in its own
directory; stopping it leaves the cluster untouched.

```python
with ClusterProxy(cluster) as proxy:
    consumer = Consumer("readers", proxy=proxy.grpc_addr, bind_topic="chat")
```
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

import anyio

from aiorocket.errors import RocketMQError
from aiorocket.testing import _admin, _config, _maven
from aiorocket.testing._procs import (
    Proc,
    alive,
    cpu_seconds,
    log_report,
    pick_port,
    port_free,
    spawn,
    stop_all,
)
from aiorocket.testing.broker import HEALTH_TOPIC, BrokerStartError, LocalRocketMQ, _run_blocking

__all__ = ["ClusterProxy"]

#: How long a start may take. The JVM's start is CPU-bound: on the 2-core CI machine at
#: load 15-18 it routed 18-43 s after its launch and answered a gRPC client 1-4 s later
#: (20 starts and restarts, up to 61 s in all), and at load 11-20 a 90 s bound failed 4
#: starts of 13. A Proxy that exits fails the start at once, whatever the bound.
START_TIMEOUT = 240.0


#: starts on fresh ports after a port of our choosing was taken before the JVM bound it
_BIND_ATTEMPTS = 3
#: what the Proxy's JVM logs when a port it binds is taken (it then exits)
_BIND_FAILED = "BindException"


class _PortTaken(BrokerStartError):
    """The Proxy exited: a port of its was taken (``java.net.BindException``)."""


def _pick_ports() -> tuple[int, int]:
    """Two free ports below the kernel's ephemeral range (Linux's 32768 up by default),
    where no outgoing connection is given one: a port of that range, picked free, was
    open to every connection the machine made until the JVM bound it, 20-60 s later on
    a loaded machine. Random ones, not fixed: two sessions starting a Proxy each at the
    same time must not take the same (the loser's readiness check would find the
    winner's Proxy, and lose it when that session ends). Above 30000: the private
    clusters' brokers take theirs from 20000-30000."""
    low = _ephemeral_low()
    taken: set[int] = set()
    for _ in range(200):
        port = random.randrange(30000, low) if low > 30002 else 0
        if port == 0:
            break
        if port not in taken and port_free(port):
            taken.add(port)
            if len(taken) == 2:
                grpc, remoting = taken
                return grpc, remoting
    return pick_port(0, taken), pick_port(0, taken)


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default; macOS's range starts at 49152


def _all_text(proc: Proc) -> str:
    """The Proxy's stdout and main log, as far as they were written."""
    texts = []
    for path in (Path(proc.log), Path(proc.home) / "logs" / "rocketmqlogs" / "proxy.log"):
        try:
            texts.append(path.read_text(errors="replace"))
        except OSError:
            continue
    return "\n".join(texts)


class ClusterProxy:
    """One cluster-mode Proxy process for ``cluster`` (a started ``LocalRocketMQ``)."""

    def __init__(self, cluster: LocalRocketMQ) -> None:
        self.cluster = cluster
        self.grpc_addr = ""
        self.remoting_addr = ""
        self._dir: Path | None = None
        self._proc: Proc | None = None
        self._popen: subprocess.Popen[bytes] | None = None
        #: seconds from the start until it routed, and until it answered a gRPC client
        self.ready_after: dict[str, float] = {}

    def start(self, timeout: float = START_TIMEOUT, *, ports: tuple[int, int] | None = None) -> str:
        """Start the Proxy and wait until it routes; returns its gRPC ``host:port``.
        ``ports``: its (gRPC, remoting) ports (``restart`` reuses them)."""
        for attempt in range(1, _BIND_ATTEMPTS + 1):
            try:
                return self._start_once(timeout, ports)
            except _PortTaken:
                # Ports of our choosing, taken between the pick and the JVM's bind (20-60
                # s later): a start on two others. Given ports (a restart) are the test's.
                if ports is not None or attempt == _BIND_ATTEMPTS:
                    raise
        raise AssertionError("unreachable")

    def _start_once(self, timeout: float, ports: tuple[int, int] | None) -> str:
        base = Path(tempfile.mkdtemp(prefix="aiorocket-cluster-proxy-"))
        self._dir = base
        grpc, remoting = ports or _pick_ports()
        # The harness's Proxy settings (renewal timings, route cache), minus its broker.
        cfg = json.loads(_config.proxy_json(
            self.cluster.namesrv_addr, Path(), grpc, remoting, {"proxyMode": "cluster"}
        ))  # fmt: skip
        del cfg["brokerConfigPath"]
        conf = base / "rmq-proxy.json"
        conf.write_text(json.dumps(cfg, indent=2) + "\n")
        jars = _maven.resolve(self.cluster.version)
        argv = _config.jvm_argv(
            _maven.find_java(), "proxy", jars.classpath, base, self.cluster.base_dir,
            ["-pc", str(conf), "-pm", "cluster"],
        )  # fmt: skip
        self._proc, self._popen = spawn(
            "cluster-proxy", argv, log=base / "proxy.out", home=base, ports=[grpc, remoting],
            env=_config.jvm_env(self.cluster.base_dir),
        )  # fmt: skip
        self.grpc_addr = f"127.0.0.1:{grpc}"
        self.remoting_addr = f"127.0.0.1:{remoting}"
        try:
            _run_blocking(self._await_ready, timeout)
        except BaseException:
            self.stop()
            raise
        return self.grpc_addr

    async def _await_ready(self, timeout: float) -> None:
        started = time.monotonic()
        deadline = started + timeout
        while time.monotonic() < deadline:
            self._check_alive()
            try:
                if await _admin.get_route(self.remoting_addr, HEALTH_TOPIC) is not None:
                    break
            except (RocketMQError, OSError):  # not listening yet / no route yet
                pass
            await anyio.sleep(0.3)
        else:
            raise self._start_error(f"was not ready within {timeout}s (no route)")
        self.ready_after = {"route": time.monotonic() - started}
        # Routing over remoting is not yet serving gRPC clients: a fresh Proxy on a busy
        # machine took more than a client's 3 s to answer its first settings, and the
        # first test after each start failed ("no settings from the Proxy within 3.0s").
        # Ready means a gRPC client's session got its settings.
        failures: list[str] = []
        while time.monotonic() < deadline:
            self._check_alive()
            error = await self._settings_error(max(1.0, min(10.0, deadline - time.monotonic())))
            if error is None:
                self.ready_after["settings"] = time.monotonic() - started
                return
            failures.append(error)
            await anyio.sleep(0.3)
        raise self._start_error(
            f"answered no gRPC client's settings within {timeout}s (routing after "
            f"{self.ready_after['route']:.1f}s; {len(failures)} sessions failed, the last: "
            f"{failures[-1] if failures else '-'})"
        )

    def _check_alive(self) -> None:
        if self._proc is None or not alive(self._proc):
            code = None if self._popen is None else self._popen.poll()
            error = self._start_error(f"exited (code {code})")
            if self._proc is not None and _BIND_FAILED in _all_text(self._proc):
                raise _PortTaken(str(error))
            raise error

    def _start_error(self, what: str) -> BrokerStartError:
        """The failed start's error, with the tails of the Proxy's logs (its directory
        goes with the stop that follows)."""
        if self._proc is None:
            return BrokerStartError(f"the cluster-mode Proxy {what}")
        # a starved JVM (little CPU in the time) from a stuck one (its CPU's worth)
        used = cpu_seconds(self._proc.pid)
        return BrokerStartError(f"the cluster-mode Proxy {what}; its JVM used {used:.1f} s "
                                f"of CPU\n{log_report([self._proc])}")  # fmt: skip

    async def _settings_error(self, wait: float) -> str | None:
        """None if a producer session on the gRPC port gets the Proxy's settings within
        ``wait`` seconds (the session then ends: the Proxy forgets it), else why not."""
        from aiorocket.grpc import _pb as pb
        from aiorocket.grpc._session import Session
        from aiorocket.grpc._transport import GrpcTransport

        transport = GrpcTransport(self.grpc_addr, client_id="aiorocket-harness-ready",
                                  request_timeout=wait)  # fmt: skip
        try:
            async with Session(transport, pb.ClientType.PRODUCER, pb.Publishing()):
                return None
        except (RocketMQError, OSError) as exc:
            return f"{type(exc).__name__}: {exc}"
        finally:
            transport.close()

    def stop(self) -> None:
        if self._proc is not None:
            popens = {} if self._popen is None else {self._popen.pid: self._popen}
            stop_all([self._proc], popens, timeout=3.0)  # keeps nothing worth a grace
            self._proc = self._popen = None
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def restart(self, timeout: float = START_TIMEOUT) -> str:
        """Stop the Proxy (its clients' connections drop) and start a new one on the
        same ports, as a restarted Proxy; returns once it routes again."""
        ports = (int(self.grpc_addr.rsplit(":", 1)[1]), int(self.remoting_addr.rsplit(":", 1)[1]))
        self.stop()
        return self.start(timeout, ports=ports)

    def __enter__(self) -> ClusterProxy:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
