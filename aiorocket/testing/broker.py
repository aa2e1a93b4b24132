"""A real, throw-away Apache RocketMQ on loopback for tests, benchmarks and the demo.

NameServer + broker ``broker-a`` with the 5.x Proxy in local mode (one JVM:
``ProxyStartup -pm local``) + optional plain brokers ``broker-b``, ... in the same cluster,
all from the Maven Central jars (see [`aiorocket.testing._maven`][]). The newest 5.x by
default; ``--version`` / ``LocalRocketMQ(version=...)`` / ``$AIOROCKET_RMQ_VERSION`` pick
another release, e.g. 5.3.3 or 4.9.7 (a 4.x cluster has plain brokers only: no Proxy).

```sh
python -m aiorocket.testing.broker start [--brokers 2] [--dir DIR] [--timeout S] [--version V]
python -m aiorocket.testing.broker status [--json | --env]
python -m aiorocket.testing.broker topic NAME... [--queues 8] [--type FIFO]
python -m aiorocket.testing.broker group NAME...
python -m aiorocket.testing.broker stop [--timeout S]
python -m aiorocket.testing.broker resolve [--refresh]   # only fetch the jars
```

The home directory (``$AIOROCKET_BROKER_DIR``, default ``/tmp/aiorocket-broker-<uid>``, or
``/tmp/aiorocket-broker-<uid>-<version>`` for a version asked for by name, so that it runs
beside the default cluster on ports of its own) holds the configs, logs, stores and
``state.json`` (pids, ports, addresses, version), so ``status``/``stop`` work from any
process. Standard ports are used when free.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import getpass
import json
import os
import shutil
import signal
import string
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import anyio
import anyio.to_thread
import sniffio

from aiorocket.errors import RocketMQError
from aiorocket.security import Credentials, tls_context
from aiorocket.testing import _admin, _config, _maven
from aiorocket.testing._config import CLUSTER
from aiorocket.testing._maven import BrokerSetupError, MissingToolError
from aiorocket.testing._procs import (
    Proc,
    alive,
    log_report,
    pick_broker_port,
    pick_port,
    send_signal,
    spawn,
    stop_all,
    warn_if_disk_full,
)

__all__ = ["BrokerSetupError", "BrokerStartError", "LocalRocketMQ", "MissingToolError", "main"]

HEALTH_TOPIC = "AIOROCKET_HEALTH"
STATE_FILE = "state.json"
MARKER = ".aiorocket-broker"
#: brokers of a cluster started without saying how many (CLI, library, tests, demo).
DEFAULT_BROKERS = 2
T = TypeVar("T")


def _in_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
        return True
    except RuntimeError:
        pass
    try:
        sniffio.current_async_library()
        return True
    except sniffio.AsyncLibraryNotFoundError:
        return False


def _run_blocking(func: Callable[..., Awaitable[T]], *args: Any) -> T:
    """``anyio.run(func, *args)``, also when called (synchronously) from code running in
    an event loop, e.g. a test under pytest-asyncio: ``anyio.run`` would fail there with
    "Already running asyncio in this thread", so the call gets a thread of its own."""
    if not _in_event_loop():
        return anyio.run(func, *args)
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="aiorocket-broker") as pool:
        return pool.submit(anyio.run, func, *args).result()


STD_NAMESRV, STD_PROXY_REMOTING, STD_PROXY_GRPC, STD_BROKER = 9876, 8080, 8081, 10911


class BrokerStartError(BrokerSetupError):
    """The local RocketMQ did not come up; the message carries the relevant log tails."""


def user_tag() -> str:
    """Who runs the harness, for per-user paths in the shared temporary directory."""
    getuid = getattr(os, "getuid", None)  # POSIX only
    return str(getuid()) if getuid is not None else getpass.getuser()


def default_base_dir(version: str | None = None) -> Path:
    """The default cluster's home, or that of ``version`` beside it."""
    if version is not None:
        return Path(tempfile.gettempdir()) / f"aiorocket-broker-{user_tag()}-{version}"
    env = os.environ.get("AIOROCKET_BROKER_DIR")
    return Path(env) if env else Path(tempfile.gettempdir()) / f"aiorocket-broker-{user_tag()}"


def broker_name(index: int) -> str:
    return f"broker-{string.ascii_lowercase[index]}"


class LocalRocketMQ:
    """Handle on one local cluster, started here or found through its state file.

    ``version`` pins the RocketMQ release ``start`` runs (default: ``$AIOROCKET_RMQ_VERSION``
    or the newest 5.x that resolves); without ``base_dir`` a pinned version gets a home
    of its own (``default_base_dir(version)``)."""

    def __init__(
        self, base_dir: str | os.PathLike[str] | None = None, *, version: str | None = None
    ) -> None:
        self.base_dir = Path(base_dir) if base_dir is not None else default_base_dir(version)
        self.requested_version = version
        self.state: dict[str, Any] = {}
        self._popens: dict[int, subprocess.Popen[bytes]] = {}

    # -- endpoints ---------------------------------------------------------------------
    @property
    def namesrv_addr(self) -> str:
        """The first NameServer (the only one unless started with ``namesrvs=2``)."""
        return str(self.state["namesrv_addr"])

    @property
    def namesrv_addrs(self) -> list[str]:
        """Every NameServer; the brokers register with each."""
        return [str(a) for a in self.state.get("namesrv_addrs", [self.namesrv_addr])]

    @property
    def broker_addrs(self) -> dict[str, str]:
        return dict(self.state.get("brokers", {}))

    @property
    def proxy_grpc(self) -> str:
        return str(self.state["proxy_grpc"])

    @property
    def proxy_remoting(self) -> str:
        return str(self.state["proxy_remoting"])

    @property
    def version(self) -> str:
        return str(self.state["version"])

    @property
    def major(self) -> int:
        """The major release (4 or 5): a 4.x cluster has no Proxy."""
        return _maven.major(self.version)

    @property
    def has_proxy(self) -> bool:
        return "proxy_remoting" in self.state

    @property
    def cluster(self) -> str:
        return str(self.state.get("cluster", CLUSTER))

    @property
    def processes(self) -> list[Proc]:
        return [Proc.from_json(p) for p in self.state.get("processes", [])]

    # -- state -------------------------------------------------------------------------
    def load(self) -> bool:
        """Read the state file; False if there is none."""
        try:
            self.state = json.loads((self.base_dir / STATE_FILE).read_text())
        except (OSError, ValueError):
            self.state = {}
        self._register_security()
        return bool(self.state)

    def _register_security(self) -> None:
        """The harness's own requests to a cluster with ACL/TLS on are signed/encrypted."""
        sec = self.state.get("security")
        if not sec:
            return
        admin = Credentials(sec["access_key"], sec["secret_key"]) if sec.get("access_key") else None
        ctx = tls_context(verify=False) if sec.get("tls") else None
        proxy = [self.state["proxy_remoting"]] if "proxy_remoting" in self.state else []
        addrs = [*self.namesrv_addrs, *self.broker_addrs.values(), *proxy]
        _admin.register_security(addrs, admin, ctx)

    def _save(self) -> None:
        tmp = (self.base_dir / STATE_FILE).with_suffix(".tmp")
        tmp.write_text(json.dumps(self.state, indent=2) + "\n")
        tmp.replace(self.base_dir / STATE_FILE)

    def running(self) -> bool:
        """Every recorded process is alive (same pid *and* start time)."""
        procs = self.processes
        return bool(procs) and all(alive(p) for p in procs)

    @classmethod
    def attach(cls, base_dir: str | os.PathLike[str] | None = None) -> LocalRocketMQ | None:
        """The cluster recorded in ``base_dir`` if it runs and is healthy, else None."""
        inst = cls(base_dir)
        if inst.load() and inst.running() and inst.healthy():
            return inst
        return None

    @classmethod
    async def aattach(cls, base_dir: str | os.PathLike[str] | None = None) -> LocalRocketMQ | None:
        """``attach`` for async code (the checks run in a worker thread)."""
        return await anyio.to_thread.run_sync(cls.attach, base_dir)

    def healthy(self, timeout: float = 5.0) -> bool:
        """Sync health check; from async code too (then it runs in a thread of its own)."""
        return _run_blocking(self.check_health, timeout)

    async def check_health(self, timeout: float = 5.0) -> bool:
        if self.state.get("status") != "ready" or not self.running():
            return False
        try:
            with anyio.fail_after(timeout):
                route = await _admin.get_route(self.namesrv_addr, HEALTH_TOPIC)
                if set(_admin.route_brokers(route)) != set(self.broker_addrs):
                    return False
                proxy = [self.state[k] for k in ("proxy_grpc", "proxy_remoting") if k in self.state]
                for addr in [*self.broker_addrs.values(), *proxy]:
                    host, _, port = addr.rpartition(":")
                    stream = await anyio.connect_tcp(host, int(port))
                    await stream.aclose()
        except (OSError, TimeoutError, RocketMQError):
            return False
        return True

    # -- start / stop ------------------------------------------------------------------
    def start(
        self,
        brokers: int = DEFAULT_BROKERS,
        *,
        timeout: float = 300.0,
        version: str | None = None,
        namesrvs: int = 1,
        proxy: bool = True,
        broker_props: dict[str, object] | None = None,
        jvm_props: dict[str, str] | None = None,
        conf_files: dict[str, str] | None = None,
        admin: Credentials | None = None,
        tls: bool = False,
        proxy_props: dict[str, object] | None = None,
    ) -> bool:
        """Start the cluster and wait until it is ready; False if it was already running.

        Starting is serialised per user (port choice), so concurrent test sessions can
        each start their own instance in their own directory.

        The rest is for throw-away clusters of fault and security tests: ``namesrvs=2``
        starts a second NameServer (``namesrv-2``) the brokers register with too; ``proxy=False``
        runs broker-a without the Proxy (a lighter JVM); ``broker_props`` are added to each
        broker.conf (e.g. ``authenticationEnabled``) and ``proxy_props`` to rmq-proxy.json
        (the Proxy's own settings), ``jvm_props`` are system properties
        of every JVM (e.g. ``tls.server.mode``), ``conf_files`` are written to
        ``<dir>/conf`` (ROCKETMQ_HOME/conf: ``plain_acl.yml``); ``admin`` signs the
        harness's own requests and ``tls`` makes them use TLS (unverified). ``version``
        overrides the constructor's; a 4.x release runs without the Proxy whatever
        ``proxy`` says.
        """
        if not 1 <= brokers <= 8:
            raise ValueError("brokers must be between 1 and 8")
        if sys.platform == "win32":
            raise MissingToolError("the local RocketMQ harness runs on Linux and macOS only")
        lock = Path(tempfile.gettempdir()) / f"aiorocket-broker-{user_tag()}.start.lock"
        with _maven._locked(lock):
            if self.load():
                if self.running() and self.healthy():
                    if len(self.broker_addrs) != brokers:
                        raise BrokerStartError(
                            f"a cluster with {len(self.broker_addrs)} broker(s) already runs in "
                            f"{self.base_dir}; stop it first "
                            "(python -m aiorocket.testing.broker stop)"
                        )
                    return False
                stop_all(self.processes, timeout=10.0)  # leftovers of a broken instance
            java = _maven.find_java()
            jars = _maven.resolve(version or self.requested_version)
            major = _maven.major(jars.version)
            proxy = proxy and major >= 5  # the Proxy came with 5.0
            self._fresh_dir()
            files = {**_config.logback_files(major), **(conf_files or {})}
            for fname, text in files.items():
                (self.base_dir / "conf" / fname).write_text(text)
            started = time.monotonic()
            try:
                self._launch(java, jars, brokers, namesrvs, proxy, broker_props or {},
                             jvm_props or {}, proxy_props or {})  # fmt: skip
                if admin is not None or tls:
                    self.state["security"] = {
                        "access_key": admin.access_key if admin else None,
                        "secret_key": admin.secret_key if admin else None,
                        "tls": tls,
                    }
                    self._register_security()
                    self._save()
                _run_blocking(self._await_ready, timeout)
            except BaseException:
                self.stop(timeout=5.0)
                raise
            self.state["status"] = "ready"
            self.state["ready_seconds"] = round(time.monotonic() - started, 2)
            self._save()
            return True

    async def astart(self, brokers: int = DEFAULT_BROKERS, *, timeout: float = 300.0) -> bool:
        return await anyio.to_thread.run_sync(lambda: self.start(brokers, timeout=timeout))

    def stop(self, timeout: float = 20.0, *, remove_store: bool = True) -> list[str]:
        """SIGTERM every process (SIGKILL after ``timeout``); returns the names killed hard."""
        if not self.state:
            self.load()
        killed = stop_all(self.processes, self._popens, timeout=timeout)
        self._popens.clear()
        if self.state:
            self.state["status"] = "stopped"
            with contextlib.suppress(OSError):
                self._save()
        if remove_store:
            for p in self.base_dir.glob("*/store"):
                shutil.rmtree(p, ignore_errors=True)
        return killed

    async def astop(self, timeout: float = 20.0) -> list[str]:
        return await anyio.to_thread.run_sync(lambda: self.stop(timeout))

    def _fresh_dir(self) -> None:
        base = self.base_dir
        if base.exists() and any(base.iterdir()) and not (base / MARKER).exists():
            raise BrokerStartError(
                f"{base} is not empty and was not made by aiorocket; refusing to wipe it"
            )
        shutil.rmtree(base, ignore_errors=True)
        (base / "conf").mkdir(parents=True)
        (base / MARKER).write_text("aiorocket local RocketMQ home; wiped on start\n")
        warn_if_disk_full(base)

    def _launch(self, java: str, jars: _maven.Jars, brokers: int, namesrvs: int, proxy: bool,
                broker_props: dict[str, object], jvm_props: dict[str, str],
                proxy_props: dict[str, object]) -> None:  # fmt: skip
        base, taken, major = self.base_dir, set[int](), _maven.major(jars.version)
        ns_ports = [pick_port(STD_NAMESRV + 10 * i, taken) for i in range(namesrvs)]
        ns_port = ns_ports[0]
        ports = [pick_broker_port(STD_BROKER + 10 * i, taken) for i in range(brokers)]
        grpc, remoting = pick_port(STD_PROXY_GRPC, taken), pick_port(STD_PROXY_REMOTING, taken)
        self._jvm_props = jvm_props
        ns_addrs = [f"127.0.0.1:{p}" for p in ns_ports]
        ns, ns_all = ns_addrs[0], ";".join(ns_addrs)
        names = [broker_name(i) for i in range(brokers)]
        self.state = {
            "status": "starting", "version": jars.version, "base_dir": str(base),
            "lib_dir": str(jars.lib_dir), "cluster": CLUSTER, "namesrv_addr": ns,
            "namesrv_addrs": ns_addrs,
            "brokers": {n: f"127.0.0.1:{p}" for n, p in zip(names, ports, strict=True)},
            "broker_ports": {n: {"listen": p, "fast": p - 2, "ha": p + 1}
                             for n, p in zip(names, ports, strict=True)},
            "proxy_grpc": f"127.0.0.1:{grpc}", "proxy_remoting": f"127.0.0.1:{remoting}",
            "proxy_broker": names[0], "processes": [], "started_at": time.time(),
            "owner_pid": os.getpid(),
        }  # fmt: skip
        if not proxy:
            for key in ("proxy_grpc", "proxy_remoting", "proxy_broker"):
                del self.state[key]
        conf = base / "conf"
        (conf / "namesrv.conf").write_text(_config.namesrv_conf(ns_port))
        confs = [conf / ("broker.conf" if i == 0 else f"{n}.conf") for i, n in enumerate(names)]
        for name, port, path in zip(names, ports, confs, strict=True):
            path.write_text(
                _config.broker_conf(
                    name, port, ns_all, base / name / "store", extra=broker_props, major=major
                )
            )
        self._spawn(java, jars, "namesrv", "namesrv", ["-c", str(conf / "namesrv.conf")], [ns_port])
        for i, port in enumerate(ns_ports[1:], start=2):
            path = conf / f"namesrv-{i}.conf"
            path.write_text(_config.namesrv_conf(port))
            self._spawn(java, jars, "namesrv", f"namesrv-{i}", ["-c", str(path)], [port])
        plain = list(zip(names, ports, confs, strict=True))
        if proxy:
            (conf / "rmq-proxy.json").write_text(
                _config.proxy_json(ns_all, confs[0], grpc, remoting, proxy_props)
            )
            proxy_args = ["-pc", str(conf / "rmq-proxy.json"), "-pm", "local", "-n", ns_all]
            self._spawn(java, jars, "proxy", names[0], proxy_args, [ports[0], grpc, remoting])
            plain = plain[1:]
        for name, port, path in plain:
            self._spawn(java, jars, "broker", name, ["-c", str(path)], [port])

    def _spawn(self, java: str, jars: _maven.Jars, kind: str, name: str, args: list[str],
               ports: list[int]) -> None:  # fmt: skip
        home = self.base_dir / name
        home.mkdir(parents=True, exist_ok=True)
        argv = _config.jvm_argv(
            java, kind, jars.classpath, home, self.base_dir, args,
            getattr(self, "_jvm_props", None), major=_maven.major(jars.version),
        )  # fmt: skip
        label = f"{name}+proxy" if kind == "proxy" else name
        log = self.base_dir / "logs" / f"{label}.out"
        env = _config.jvm_env(self.base_dir)
        info, popen = spawn(label, argv, log=log, home=home, ports=ports, env=env)
        self._popens[popen.pid] = popen
        self.state["processes"].append(info.to_json())
        self._save()  # record pids at once: `stop` works even if start is interrupted

    async def _await_ready(self, timeout: float) -> None:
        try:
            with anyio.fail_after(timeout):
                for proc in self.processes:
                    for port in proc.ports:
                        await self._wait_port(proc, port)
                names = list(self.broker_addrs)
                for addr in self.broker_addrs.values():
                    await self._retry(lambda a=addr: _admin.create_topic_on(
                        a, HEALTH_TOPIC, read_queues=1, write_queues=1))  # fmt: skip
                await _admin.wait_route(
                    self.namesrv_addr, HEALTH_TOPIC, _admin.expected_queues(names, 1, 1), timeout
                )
                if "proxy_remoting" in self.state:
                    await self._retry(self._proxy_route)
        except TimeoutError:
            raise BrokerStartError(
                f"local RocketMQ not ready within {timeout}s\n" + log_report(self.processes)
            ) from None

    async def _proxy_route(self) -> None:
        if await _admin.get_route(self.proxy_remoting, HEALTH_TOPIC) is None:
            raise _admin.AdminError("proxy has no route yet")

    async def _wait_port(self, proc: Proc, port: int) -> None:
        while True:
            self._check_alive(proc)
            with contextlib.suppress(OSError):
                await (await anyio.connect_tcp("127.0.0.1", port)).aclose()
                return
            await anyio.sleep(0.2)

    async def _retry(self, fn: Any) -> Any:
        while True:
            for proc in self.processes:
                self._check_alive(proc)
            try:
                return await fn()
            except (RocketMQError, OSError):
                await anyio.sleep(0.3)

    def _check_alive(self, proc: Proc) -> None:
        popen = self._popens.get(proc.pid)
        code = popen.poll() if popen is not None else (None if alive(proc) else "?")
        if code is not None:
            raise BrokerStartError(f"{proc.name} exited (code {code}) during start-up\n"
                                   + log_report([proc]))  # fmt: skip

    # -- per-process control (fault tests) ------------------------------------------------
    def process(self, name: str) -> Proc:
        """The process ``name``: "namesrv", or a broker name ("broker-a" also finds
        "broker-a+proxy")."""
        for proc in self.processes:
            if proc.name in (name, f"{name}+proxy"):
                return proc
        raise ValueError(f"no process {name!r}; have {[p.name for p in self.processes]}")

    def kill(self, name: str, sig: int = signal.SIGKILL, timeout: float = 10.0) -> None:
        """Send ``sig`` (SIGKILL by default) to one process; for a fatal signal, wait
        until it is gone (reaped, its ports closed)."""
        proc = self.process(name)
        send_signal(proc, sig)
        if sig in (signal.SIGKILL, signal.SIGTERM):
            deadline = time.monotonic() + timeout
            while alive(proc) and time.monotonic() < deadline:
                popen = self._popens.get(proc.pid)
                if popen is not None:
                    popen.poll()
                time.sleep(0.05)
            if alive(proc):
                raise BrokerStartError(f"{proc.name} (pid {proc.pid}) survived signal {sig}")

    def pause(self, name: str) -> None:
        """SIGSTOP: the process keeps its sockets open and answers nothing."""
        send_signal(self.process(name), signal.SIGSTOP)

    def resume(self, name: str) -> None:
        """SIGCONT after ``pause``."""
        send_signal(self.process(name), signal.SIGCONT)

    async def restart(self, name: str, timeout: float = 120.0) -> None:
        """Start process ``name`` again (SIGKILLed first if it still runs) with the same
        command line: same config, store and ports. Returns once it listens again and,
        for a broker, once the NameServer routes to it."""
        proc = self.process(name)
        if alive(proc):
            await anyio.to_thread.run_sync(lambda: self.kill(name))
        if not proc.argv:
            raise BrokerStartError(f"{proc.name} was started without a recorded command line")
        env = _config.jvm_env(self.base_dir)
        info, popen = spawn(proc.name, proc.argv, log=Path(proc.log), home=Path(proc.home),
                            ports=proc.ports, env=env)  # fmt: skip
        self._popens[popen.pid] = popen
        self.state["processes"] = [
            info.to_json() if p["name"] == proc.name else p for p in self.state["processes"]
        ]
        self._save()
        try:
            with anyio.fail_after(timeout):
                for port in info.ports:
                    await self._wait_port(info, port)
                if not proc.name.startswith("namesrv"):
                    broker = proc.name.removesuffix("+proxy")
                    await _admin.wait_route(
                        self.namesrv_addr, HEALTH_TOPIC, {broker: (1, 1)}, timeout
                    )
        except TimeoutError:
            raise BrokerStartError(
                f"{proc.name} not back within {timeout}s\n" + log_report([info])
            ) from None

    # -- admin -------------------------------------------------------------------------
    def _select(self, brokers: Iterable[str] | None) -> dict[str, str]:
        addrs = self.broker_addrs
        wanted = list(addrs) if brokers is None else list(brokers)
        unknown = set(wanted) - set(addrs)
        if unknown or not wanted:
            raise ValueError(f"unknown broker(s) {sorted(unknown)}; have {sorted(addrs)}")
        return {b: addrs[b] for b in wanted}

    async def route(self, topic: str) -> dict[str, Any] | None:
        return await _admin.get_route(self.namesrv_addr, topic)

    async def create_topic(
        self,
        topic: str,
        queues: int = 8,
        brokers: Iterable[str] | None = None,
        *,
        message_type: str | None = None,
        attributes: str | None = None,
        perm: int = _admin.PERM_READ_WRITE,
        order: bool = False,
        timeout: float = 30.0,
    ) -> dict[str, Any]:
        """Create ``topic`` with ``queues`` queues on each (selected) master broker and wait
        until the NameServer's route shows them. ``message_type`` (NORMAL, FIFO, DELAY,
        TRANSACTION) becomes the attribute ``+message.type=...``. Returns the route."""
        targets = self._select(brokers)
        attrs = [
            a for a in (attributes, f"+message.type={message_type}" if message_type else None) if a
        ]
        for addr in targets.values():
            await _admin.create_topic_on(
                addr, topic, read_queues=queues, write_queues=queues, perm=perm, order=order,
                attributes=",".join(attrs) or None,
            )  # fmt: skip
        expected = _admin.expected_queues(targets, queues, queues)
        return await _admin.wait_route(self.namesrv_addr, topic, expected, timeout)

    async def delete_topic(self, topic: str, brokers: Iterable[str] | None = None) -> None:
        """Delete ``topic`` on each (selected) broker and on the NameServer."""
        await _admin.delete_topic(self.namesrv_addr, self._select(brokers).values(), topic)

    async def create_group(
        self,
        group: str,
        *,
        orderly: bool = False,
        retry_max_times: int = 16,
        broadcast: bool = True,
        brokers: Iterable[str] | None = None,
    ) -> dict[str, Any]:
        """Create/update subscription group ``group`` on each (selected) broker."""
        config = _admin.group_config(
            group, orderly=orderly, retry_max_times=retry_max_times, broadcast=broadcast
        )
        for addr in self._select(brokers).values():
            await _admin.create_group_on(addr, config)
        return config

    async def set_group_offsets(self, topic: str, group: str, offset: int) -> None:
        """Create ``group`` and store ``offset`` for it on every queue of ``topic``. A 5.x
        Proxy (pop) starts a group without a stored offset at each queue's end; a test
        that sends before its consumer's first receive gives the group a start first."""
        from aiorocket.client.instance import ClientInstance  # the harness's own client

        await self.create_group(group)
        async with ClientInstance(self.namesrv_addr) as client:
            route = await client.namesrv.get_route(topic)
            for mq in route.read_queues():
                addr = route.master_addr(mq.broker_name)
                assert addr is not None
                await client.broker.update_consumer_offset(addr, group, mq, offset)

    async def group_config(self, group: str, broker: str | None = None) -> dict[str, Any] | None:
        name = broker or next(iter(self.broker_addrs))
        return await _admin.get_group_on(self.broker_addrs[name], group)

    # -- presentation ------------------------------------------------------------------
    def describe(self) -> str:
        s, lines = self.state, []
        lines.append(f"Apache RocketMQ {s.get('version')} ({s.get('status')}) in {self.base_dir}")
        lines.append(f"  namesrv          {s.get('namesrv_addr')}")
        for name, addr in self.broker_addrs.items():
            extra = "  (+ proxy, local mode)" if name == s.get("proxy_broker") else ""
            lines.append(f"  {name:<16} {addr}{extra}")
        if self.has_proxy:
            lines.append(f"  proxy gRPC       {s.get('proxy_grpc')}")
            lines.append(f"  proxy remoting   {s.get('proxy_remoting')}")
        else:
            lines.append("  proxy            none (RocketMQ 4.x has no Proxy)")
        pids = ", ".join(f"{p.name}={p.pid}" for p in self.processes)
        lines.append(f"  pids             {pids}")
        lines.append(f"  logs             {self.base_dir / 'logs'}")
        return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """The ``start|stop|status|resolve`` command line (see the module docstring)."""
    from aiorocket.testing._cli import run

    return run(argv)


if __name__ == "__main__":
    sys.exit(main())
