"""Programs run as ``python -c CODE`` / ``python FILE`` would run them, each in a process
of its own, forked from one that imported the usual packages once (a fork server).

The examples' and the docs' tests run ~60 short programs: each fresh interpreter spent
about a second of CPU importing aiorocket, anyio and their dependencies before doing its
own work. A child here starts with those modules imported and nothing else run: its
``__main__``, ``sys.argv``, ``sys.path[0]``, working directory and environment are the
program's own, it exits the way an interpreter does (uncaught exception: traceback and
status 1; ``SystemExit``; atexit handlers and non-daemon threads joined), and its output
goes to its own files. The server imports no block's code and starts no thread, so a
child inherits only the imports. Programs that start a JVM (Spark) gain nothing here and
keep their own interpreter.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

#: Imported once by the server. Each is imported by most of the programs (the rest cost
#: nothing to have imported): nothing here may start a thread at import.
PRELOAD = (
    "anyio",
    "anyio._backends._asyncio",
    "aiorocket",
    "aiorocket.producer",
    "aiorocket.consumer",
    "aiorocket.admin",
)

_SERVER = r"""
def serve():
    import builtins, json, os, runpy, sys, threading, types
    for name in json.loads(sys.argv[1]):
        try:
            __import__(name)
        except ImportError:
            pass  # an extra that is not installed: the programs that need it say so
    if threading.active_count() != 1:
        raise SystemExit("a preloaded module started a thread: forking it is unsafe")
    requests, answers = sys.stdin, sys.stdout
    for line in requests:
        req = json.loads(line)
        answers.flush()
        pid = os.fork()
        if pid == 0:
            os.setpgid(0, 0)  # a timed-out program is killed with whatever it started
            os.chdir(req["cwd"])
            os.environ.clear()
            os.environ.update(req["env"])
            for fd, path, flags in ((0, os.devnull, os.O_RDONLY),
                                    (1, req["stdout"], os.O_WRONLY),
                                    (2, req["stderr"], os.O_WRONLY)):
                opened = os.open(path, flags)
                os.dup2(opened, fd)
                os.close(opened)
            sys.stdin = open(0, closefd=False)
            sys.argv = req["argv"]
            if req["path"] is None:  # python -c CODE
                sys.path[0] = ""
                main = types.ModuleType("__main__")
                main.__builtins__ = builtins
                sys.modules["__main__"] = main
                exec(compile(sys.argv.pop(1), "<string>", "exec"), main.__dict__)
            else:  # python FILE
                sys.path[0] = os.path.dirname(os.path.abspath(req["path"]))
                runpy.run_path(req.pop("path"), run_name="__main__")
            raise SystemExit(0)  # the interpreter's own exit: atexit, threads joined
        answers.write(f"{pid}\n")
        answers.flush()
        _, status = os.waitpid(pid, 0)
        answers.write(f"{os.waitstatus_to_exitcode(status)}\n")
        answers.flush()


serve()
"""


class ForkServer:
    """One server process; :meth:`run` one program at a time."""

    def __init__(self, env: dict[str, str]) -> None:
        self._proc = subprocess.Popen(
            [sys.executable, "-c", _SERVER, json.dumps(PRELOAD)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True,
        )  # fmt: skip

    def run(
        self, argv: list[str], *, env: dict[str, str], cwd: Path, timeout: float
    ) -> subprocess.CompletedProcess[str]:
        """``argv`` as ``[python, "-c", code]`` or ``[python, path, *args]`` (the
        interpreter is the server's): the program's status and its output."""
        assert self._proc.stdin is not None and self._proc.stdout is not None
        path = None if argv[1] == "-c" else argv[1]
        with tempfile.TemporaryDirectory(prefix="aiorocket-forked-") as tmp:
            out, err = Path(tmp) / "stdout", Path(tmp) / "stderr"
            out.touch()
            err.touch()
            request = {"argv": argv[1:], "path": path, "cwd": str(cwd), "env": env,
                       "stdout": str(out), "stderr": str(err)}  # fmt: skip
            self._proc.stdin.write(json.dumps(request) + "\n")
            self._proc.stdin.flush()
            pid = int(self._proc.stdout.readline())
            timer = _Killer(pid, timeout)
            try:
                line = self._proc.stdout.readline()
            finally:
                timer.cancel()
            if not line:
                raise RuntimeError("the fork server ended")
            if timer.fired:
                raise subprocess.TimeoutExpired(argv, timeout, out.read_text(), err.read_text())
            return subprocess.CompletedProcess(argv, int(line), out.read_text(), err.read_text())

    def close(self) -> None:
        if self._proc.stdin is not None:
            self._proc.stdin.close()
        self._proc.wait(timeout=30)


class _Killer:
    """Kills program ``pid``'s process group after ``timeout`` seconds."""

    def __init__(self, pid: int, timeout: float) -> None:
        self.fired = False
        self._pid = pid
        self._timer = threading.Timer(timeout, self._kill)
        self._timer.daemon = True
        self._timer.start()

    def _kill(self) -> None:
        self.fired = True
        with contextlib.suppress(ProcessLookupError):  # it ended meanwhile
            os.killpg(self._pid, signal.SIGKILL)

    def cancel(self) -> None:
        self._timer.cancel()
        self._timer.join()
