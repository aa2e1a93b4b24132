"""scripts/test.sh's own plumbing, with every tool it runs replaced by a stub: what it
starts (the session's cluster, the other Pythons' background unit tests) is stopped
however it ends, and a failure of any part fails it.

The stubs write what they were asked to ``calls`` and their pids to ``*.pid``.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(
    shutil.which("setsid") is None or not Path("/bin/sh").exists(), reason="POSIX sh tools"
)

_OK = "#!/bin/sh\nexit 0\n"
#: .venv/bin/python: the cluster check says none runs; the broker's start (with the test
#: session's broker settings, ``-c``) and stop are recorded; pytest waits (``pytest.pid``
#: says it started) or exits with $PYTEST_RC
_PYTHON = """#!/bin/sh
here=$(dirname "$0")/../..
case "$1 $2" in
    "-c "*SESSION_BROKER_PROPS*) echo "broker start" >>"$here/calls"; exit 0 ;;
    "-c "*) exit 1 ;;
    "-m aiorocket.testing.broker") echo "broker $3" >>"$here/calls"; exit 0 ;;
    "-m pytest")
        echo "pytest" >>"$here/calls"
        [ -n "${PYTEST_RC:-}" ] && exit "$PYTEST_RC"
        echo $$ >"$here/pytest.pid"; exec sleep 60 ;;
esac
exit 0
"""
#: scripts/pyversions.sh: the background part notes its autogroup (``unit.autogroup``)
#: and waits (``unit.pid``), the rest exits with $PYVERSIONS_RC
_PYVERSIONS = """#!/bin/sh
here=$(dirname "$0")/..
echo "pyversions $1" >>"$here/calls"
case "$1" in
    unit)
        cat /proc/self/autogroup >"$here/unit.autogroup" 2>/dev/null
        [ -n "${PYTEST_RC:-}" ] && exit 0; echo $$ >"$here/unit.pid"; exec sleep 60 ;;
esac
exit "${PYVERSIONS_RC:-0}"
"""


def _tree(tmp: Path) -> Path:
    root = tmp / "repo"
    (root / "scripts").mkdir(parents=True)
    (root / ".venv" / "bin").mkdir(parents=True)
    shutil.copy(REPO / "scripts" / "test.sh", root / "scripts" / "test.sh")
    stubs = {
        "scripts/bootstrap.sh": _OK, "scripts/ensure_prometheus.sh": _OK,
        "scripts/ensure_redis.sh": _OK,
        "scripts/spark_compat.sh": _OK, "scripts/pyversions.sh": _PYVERSIONS,
        ".venv/bin/python": _PYTHON, ".venv/bin/ruff": _OK, ".venv/bin/mypy": _OK,
        ".venv/bin/lint-imports": _OK, ".venv/bin/mkdocs": _OK,
    }  # fmt: skip
    for name, text in stubs.items():
        (root / name).write_text(text)
    for path in [*(root / "scripts").iterdir(), *(root / ".venv" / "bin").iterdir()]:
        path.chmod(0o755)
    return root


def _run(root: Path, tmp: Path, **env: str) -> subprocess.Popen[bytes]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("AIOROCKET_")}
    return subprocess.Popen(
        ["/bin/sh", str(root / "scripts" / "test.sh")], cwd=root, start_new_session=True,
        env={**clean, "TMPDIR": str(tmp), **env}, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip


def _alive(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "\nState:\tZ" not in status  # a zombie nobody reaped is gone too


def _wait_for(path: Path, timeout: float = 20.0) -> int:
    deadline = time.monotonic() + timeout
    while not (path.exists() and path.read_text().strip()):
        assert time.monotonic() < deadline, f"{path.name} never written"
        time.sleep(0.05)
    return int(path.read_text())


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_run_stops_its_cluster_and_its_background_job(
    tmp_path: Path, sig: signal.Signals
) -> None:
    # Ctrl-C (SIGINT to the terminal's process group) or a cancelled CI job (SIGTERM to
    # it) while pytest runs: before, dash ran no EXIT trap, so the session's cluster was
    # never stopped, and the background unit tests (which ignore SIGINT) ran on.
    root = _tree(tmp_path)
    proc = _run(root, tmp_path)
    leftovers: list[int] = []
    try:
        _wait_for(root / "pytest.pid")
        leftovers.append(_wait_for(root / "unit.pid"))
        os.killpg(proc.pid, sig)
        assert proc.wait(timeout=20) != 0
        deadline = time.monotonic() + 5
        while _alive(leftovers[0]) and time.monotonic() < deadline:
            time.sleep(0.05)
        calls = (root / "calls").read_text().split("\n")
        assert "broker start" in calls
        assert "broker stop" in calls
        assert not _alive(leftovers[0]), "the background unit tests outlived test.sh"
        assert not list(tmp_path.glob("aiorocket-session-*"))
    finally:
        for pid in leftovers:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.mark.parametrize(
    ("pytest_rc", "pyversions_rc", "expected"), [("0", "0", 0), ("1", "0", 1), ("0", "1", 1)]
)
def test_the_status_is_each_part_s(
    tmp_path: Path, pytest_rc: str, pyversions_rc: str, expected: int
) -> None:
    root = _tree(tmp_path)
    proc = _run(root, tmp_path, PYTEST_RC=pytest_rc, PYVERSIONS_RC=pyversions_rc)
    assert proc.wait(timeout=30) == expected
    calls = (root / "calls").read_text().split("\n")
    assert calls.count("broker stop") == 1


@pytest.mark.skipif(not Path("/proc/self/autogroup").exists(), reason="no autogroups")
def test_the_background_unit_tests_are_niced_in_their_autogroup(tmp_path: Path) -> None:
    # setsid makes the job an autogroup of its own, which the kernel gives as much CPU as
    # test.sh's whole group (pytest, Spark) whatever its processes' nice: `nice -n 19`
    # alone left it at "nice 0" there, competing as an equal with the integration tests.
    root = _tree(tmp_path)
    proc = _run(root, tmp_path, PYTEST_RC="0")
    assert proc.wait(timeout=30) == 0
    assert (root / "unit.autogroup").read_text().split()[-2:] == ["nice", "19"]
