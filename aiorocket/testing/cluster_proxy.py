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
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

import anyio

from aiorocket.errors import RocketMQError
from aiorocket.testing import _admin, _config, _maven
from aiorocket.testing._procs import Proc, alive, pick_port, spawn, stop_all
from aiorocket.testing.broker import HEALTH_TOPIC, BrokerStartError, LocalRocketMQ, _run_blocking

__all__ = ["ClusterProxy"]


class ClusterProxy:
    """One cluster-mode Proxy process for ``cluster`` (a started ``LocalRocketMQ``)."""

    def __init__(self, cluster: LocalRocketMQ) -> None:
        self.cluster = cluster
        self.grpc_addr = ""
        self.remoting_addr = ""
        self._dir: Path | None = None
        self._proc: Proc | None = None
        self._popen: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 90.0, *, ports: tuple[int, int] | None = None) -> str:
        """Start the Proxy and wait until it routes; returns its gRPC ``host:port``.
        ``ports``: its (gRPC, remoting) ports (``restart`` reuses them)."""
        base = Path(tempfile.mkdtemp(prefix="aiorocket-cluster-proxy-"))
        self._dir = base
        taken: set[int] = set()
        # Ports of the kernel's choosing: two sessions starting one each at the same time
        # must not both take a fixed one (the loser's readiness check would find the
        # winner's Proxy, and lose it when that session ends).
        grpc, remoting = ports or (pick_port(0, taken), pick_port(0, taken))
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
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc is None or not alive(self._proc):
                raise BrokerStartError(f"the cluster-mode Proxy exited; see {self._dir}")
            try:
                if await _admin.get_route(self.remoting_addr, HEALTH_TOPIC) is not None:
                    break
            except (RocketMQError, OSError):  # not listening yet / no route yet
                pass
            await anyio.sleep(0.3)
        else:
            raise BrokerStartError(f"the cluster-mode Proxy was not ready within {timeout}s")
        # Routing over remoting is not yet serving gRPC clients: a fresh Proxy on a busy
        # machine took more than a client's 3 s to answer its first settings, and the
        # first test after each start failed ("no settings from the Proxy within 3.0s").
        # Ready means a gRPC client's session got its settings.
        while time.monotonic() < deadline:
            if self._proc is None or not alive(self._proc):
                raise BrokerStartError(f"the cluster-mode Proxy exited; see {self._dir}")
            if await self._answers_settings(max(1.0, min(10.0, deadline - time.monotonic()))):
                return
            await anyio.sleep(0.3)
        raise BrokerStartError(
            f"the cluster-mode Proxy answered no gRPC client's settings within {timeout}s"
        )

    async def _answers_settings(self, wait: float) -> bool:
        """Whether a producer session on the gRPC port gets the Proxy's settings within
        ``wait`` seconds (the session then ends: the Proxy forgets it)."""
        from aiorocket.grpc import _pb as pb
        from aiorocket.grpc._session import Session
        from aiorocket.grpc._transport import GrpcTransport

        transport = GrpcTransport(self.grpc_addr, client_id="aiorocket-harness-ready",
                                  request_timeout=wait)  # fmt: skip
        try:
            async with Session(transport, pb.ClientType.PRODUCER, pb.Publishing()):
                return True
        except (RocketMQError, OSError):
            return False

    def stop(self) -> None:
        if self._proc is not None:
            popens = {} if self._popen is None else {self._popen.pid: self._popen}
            stop_all([self._proc], popens, timeout=3.0)  # keeps nothing worth a grace
            self._proc = self._popen = None
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def restart(self, timeout: float = 90.0) -> str:
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
