"""The client runs on Windows and macOS: nothing Linux- or POSIX-only outside the harness.

aiorocket/testing (the local broker harness) is allowed POSIX (and on Linux /proc; on
macOS it asks ps); it must still import everywhere.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from aiorocket.testing import _procs

PACKAGE = Path(__file__).resolve().parents[2] / "aiorocket"
POSIX_MODULES = {"fcntl", "resource", "termios", "pwd", "grp", "posix", "pty", "tty"}
POSIX_OS_CALLS = {"getuid", "geteuid", "getgid", "getegid", "killpg", "fork", "setsid",
                  "sysconf", "getpgid", "setpgrp", "uname"}  # fmt: skip


def client_sources() -> list[Path]:
    return [p for p in PACKAGE.rglob("*.py") if "testing" not in p.relative_to(PACKAGE).parts]


def test_no_posix_only_calls_outside_the_harness() -> None:
    found = []
    for path in client_sources():
        for node in ast.walk(ast.parse(path.read_text())):
            where = f"{path.relative_to(PACKAGE.parent)}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.Import):
                found += [f"{where} import {a.name}" for a in node.names
                          if a.name.split(".")[0] in POSIX_MODULES]  # fmt: skip
            elif isinstance(node, ast.ImportFrom) and (node.module or "") in POSIX_MODULES:
                found.append(f"{where} from {node.module}")
            elif (isinstance(node, ast.Attribute) and node.attr in POSIX_OS_CALLS
                  and isinstance(node.value, ast.Name) and node.value.id == "os"):  # fmt: skip
                found.append(f"{where} os.{node.attr}")
            elif (isinstance(node, ast.Constant) and isinstance(node.value, str)
                  and node.value.startswith("/proc")):  # fmt: skip
                found.append(f"{where} {node.value!r}")
    assert client_sources() and not found, found


BLOCKED = textwrap.dedent(
    """
    import json, os, sys, pkgutil, importlib
    # Third-party libraries branch on sys.platform themselves (numpy, under pyarrow, calls
    # os.uname() at import on Linux only), and so does the standard library's asyncio
    # from Python 3.13 (selector_events reads os.sysconf at import, on POSIX only): load
    # them before the Windows-like os below.
    for name in ("asyncio", "numpy", "pyarrow"):
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    for name in {modules!r}:
        sys.modules[name] = None  # "import fcntl" now fails as on Windows
    for name in {calls!r}:
        if hasattr(os, name):
            delattr(os, name)
    import anyio
    import aiorocket
    names = [m.name for m in pkgutil.walk_packages(aiorocket.__path__, "aiorocket.")]
    failed = {{}}
    for name in names:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name not in ("pyspark", "pyarrow", "grpclib", "betterproto"):
                failed[name] = repr(exc)
        except Exception as exc:
            failed[name] = repr(exc)

    async def clients():
        from aiorocket.consumer import Consumer, PullConsumer
        from aiorocket.producer import Producer
        for cls in (Consumer, PullConsumer, Producer):
            cls("g", "127.0.0.1:9876")
        from aiorocket.testing.broker import default_base_dir
        default_base_dir()

    anyio.run(clients)
    print(json.dumps({{"modules": len(names), "failed": failed}}))
    """
)


def test_every_module_imports_without_posix_only_modules() -> None:
    modules = sorted(POSIX_MODULES - {"posix"})  # (the standard library's os needs it)
    code = BLOCKED.format(modules=modules, calls=sorted(POSIX_OS_CALLS))
    env = {**os.environ, "USERNAME": "tester"}  # what getpass.getuser() reads on Windows
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.splitlines()[-1])
    assert result["modules"] > 40 and result["failed"] == {}, result


def test_process_start_time_from_ps_where_there_is_no_proc(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_procs, "_HAVE_PROC", False)
    own = _procs.proc_start_time(os.getpid())
    assert own is not None and abs(own - time.time()) < 24 * 3600
    assert _procs.proc_start_time(os.getpid()) == own  # stable: pid reuse shows as a change
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # exited, not reaped: a zombie
    assert _procs.proc_start_time(child.pid) is None
    child.wait()
    assert _procs.proc_start_time(child.pid) is None  # gone
