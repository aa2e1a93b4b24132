"""Ports, JVM processes and their bookkeeping for the local RocketMQ (Linux/POSIX)."""

from __future__ import annotations

import contextlib
import errno
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Proc:
    """One JVM we started: enough to find it again (and only it) from another process."""

    name: str
    pid: int
    start_time: int | None  # /proc/<pid>/stat field 22: guards against pid reuse
    log: str
    home: str
    ports: list[int] = field(default_factory=list)
    #: the command line, to start it again on the same store and ports
    argv: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Proc:
        return cls(
            name=str(data["name"]),
            pid=int(data["pid"]),
            start_time=data.get("start_time"),
            log=str(data.get("log", "")),
            home=str(data.get("home", "")),
            ports=[int(p) for p in data.get("ports", [])],
            argv=[str(a) for a in data.get("argv", [])],
        )


def port_free(port: int) -> bool:
    """True if nothing listens on ``port`` (any local address; IPv4 and dual-stack IPv6)."""
    if not 0 < port < 65536:
        return False
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        # Like the JVM's servers: TIME_WAIT leftovers must not make a port look busy.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("0.0.0.0", port))
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                return False
            raise
    return True


def pick_port(preferred: int, taken: set[int]) -> int:
    """``preferred`` if free, else a free port chosen by the kernel."""
    if preferred not in taken and port_free(preferred):
        taken.add(preferred)
        return preferred
    for _ in range(50):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port not in taken:
            taken.add(port)
            return port
    raise OSError("no free TCP port found")


def pick_broker_port(preferred: int, taken: set[int]) -> int:
    """A broker listenPort p with p-2 (fast channel) and p+1 (HA) free as well."""

    def ok(p: int) -> bool:
        trio = (p - 2, p, p + 1)
        return not taken.intersection(trio) and all(port_free(x) for x in trio)

    candidates = [preferred] + [random.randrange(20000, 30000) for _ in range(200)]
    for p in candidates:
        if ok(p):
            taken.update((p - 2, p, p + 1))
            return p
    raise OSError("no free broker port triplet (p-2, p, p+1) found")


def _stat_fields(path: Path) -> list[str] | None:
    """The fields of a /proc ``stat`` file after the command name (state first)."""
    try:
        raw = path.read_text()
    except OSError:
        return None
    return raw[raw.rindex(")") + 2 :].split()


def proc_start_time(pid: int) -> int | None:
    """Start time of a live, non-zombie process, else None: clock ticks since boot from
    Linux's /proc, or (macOS and other systems without /proc) epoch seconds from ps."""
    if not _HAVE_PROC:
        return _ps_start_time(pid)
    fields = _stat_fields(Path(f"/proc/{pid}/stat"))
    if fields is None or fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


_HAVE_PROC = Path("/proc/self/stat").exists()


def _ps_start_time(pid: int) -> int | None:
    try:
        out = subprocess.run(
            ["ps", "-o", "stat=", "-o", "lstart=", "-p", str(pid)],
            capture_output=True, text=True, timeout=10, env={**os.environ, "LC_ALL": "C"},
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    state, _, started = out.stdout.strip().partition(" ")
    if out.returncode != 0 or not started or state.startswith("Z"):
        return None
    try:  # e.g. "Mon Nov 23 20:55:58 2026"
        return int(time.mktime(time.strptime(" ".join(started.split()), "%a %b %d %H:%M:%S %Y")))
    except ValueError:
        return None


def cpu_seconds(pid: int, thread_name: str | None = None) -> float:
    """CPU time (user + system) of process ``pid`` so far, or of its threads named
    ``thread_name`` (Linux /proc; 0 for a process that is gone)."""
    if thread_name is None:
        stats = [Path(f"/proc/{pid}/stat")]
    else:
        stats = []
        try:
            tasks = list(Path(f"/proc/{pid}/task").iterdir())
        except OSError:
            tasks = []  # the process is gone
        for task in tasks:
            try:
                if (task / "comm").read_text().strip() == thread_name:
                    stats.append(task / "stat")
            except OSError:
                continue  # the thread ended meanwhile
    ticks = 0
    for stat in stats:
        fields = _stat_fields(stat)
        if fields is not None:
            ticks += int(fields[11]) + int(fields[12])  # utime, stime
    return ticks / os.sysconf("SC_CLK_TCK")


def alive(proc: Proc) -> bool:
    st = proc_start_time(proc.pid)
    return st is not None and (proc.start_time is None or st == proc.start_time)


def spawn(name: str, argv: Sequence[str], *, log: Path, home: Path, ports: Iterable[int],
          env: dict[str, str]) -> tuple[Proc, subprocess.Popen[bytes]]:  # fmt: skip
    """Start ``argv`` in its own session/process group, output appended to ``log``, with
    ``home`` as its working directory: whatever the process writes to relative paths (the
    Proxy's ACL store ``null/users`` when its ``authConfigPath`` is unset) stays there,
    not in the caller's directory."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        popen = subprocess.Popen(
            list(argv),
            cwd=home,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,  # own process group: no terminal signals, killpg works
            close_fds=True,
        )
    info = Proc(
        name, popen.pid, proc_start_time(popen.pid), str(log), str(home), list(ports), list(argv)
    )
    return info, popen


def send_signal(proc: Proc, sig: int) -> None:
    """Signal ``proc`` (and its process group) if it is still the process we started."""
    _signal(proc, sig)


def _signal(proc: Proc, sig: int) -> None:
    if not alive(proc):
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)  # pgid == pid: we started it with start_new_session
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(proc.pid, sig)


def stop_all(
    procs: Sequence[Proc],
    popens: dict[int, subprocess.Popen[bytes]] | None = None,
    timeout: float = 20.0,
) -> list[str]:
    """SIGTERM every process (group) at once, SIGKILL what is left after ``timeout``.

    Returns the names of processes that had to be killed. Reaps our own children.
    """
    popens = popens or {}
    live = [p for p in procs if alive(p)]
    for p in live:
        _signal(p, signal.SIGTERM)
    killed: list[str] = []
    deadline = time.monotonic() + timeout
    while True:
        for pop in popens.values():
            pop.poll()  # reap, so our children do not linger as zombies
        live = [p for p in live if alive(p)]
        if not live:
            break
        if time.monotonic() >= deadline:
            for p in live:
                _signal(p, signal.SIGKILL)
                killed.append(p.name)
            end = time.monotonic() + 10.0
            while any(alive(p) for p in live) and time.monotonic() < end:
                for pop in popens.values():
                    pop.poll()
                time.sleep(0.05)
            break
        time.sleep(0.1)
    for pop in popens.values():
        with contextlib.suppress(subprocess.TimeoutExpired):
            pop.wait(timeout=1.0)
    return killed


def tail(path: str | Path, lines: int = 25) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - 64 * 1024))
            data = fh.read().decode("utf-8", errors="replace")
    except OSError as exc:
        return f"<cannot read {path}: {exc}>"
    return "\n".join(data.splitlines()[-lines:])


def log_report(procs: Iterable[Proc]) -> str:
    """Tails of each process's stdout/stderr file and of its main RocketMQ log."""
    from aiorocket.testing._config import MAIN_LOG

    parts = []
    for p in procs:
        parts.append(f"--- {p.log} (tail) ---\n{tail(p.log)}")
        kind = "namesrv" if p.name.startswith("namesrv") else "broker"
        kind = "proxy" if "proxy" in p.name else kind
        main_log = Path(p.home) / "logs" / "rocketmqlogs" / MAIN_LOG[kind]
        if main_log.exists():
            parts.append(f"--- {main_log} (tail) ---\n{tail(main_log, 15)}")
    return "\n".join(parts)


def warn_if_disk_full(path: Path, threshold: float = 85.0) -> float:
    """Warn on stderr when the disk holding ``path`` nears RocketMQ's write refusal (90 %)."""
    usage = shutil.disk_usage(path)
    used = 100.0 * (usage.total - usage.free) / usage.total
    if used > threshold:
        print(
            f"[aiorocket.testing] WARNING: disk holding {path} is {used:.0f}% full; RocketMQ "
            "refuses writes (SERVICE_NOT_AVAILABLE) above 90%",
            file=sys.stderr,
        )
    return used
