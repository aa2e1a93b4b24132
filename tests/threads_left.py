"""Threads a test leaves behind: a thread running an event loop, or a busy non-daemon thread.

A non-daemon thread that never ends keeps the interpreter from exiting: on 2026-11-29 a
3.10 unit run printed its summary and then hung at shutdown for 49 minutes (a thread in
epoll_wait, the main thread joining it) until it was killed; CI would have waited for
its 90-minute limit. A loop running in a thread a test started outlives the test whatever
its daemon flag, with sockets and tasks nobody stops. So (registered by tests/conftest.py):

- each test that leaves such a thread gets an error at its teardown naming the thread;
- a session that still has a busy non-daemon thread at its end says which test started
  it, fails, and exits instead of hanging in the interpreter's shutdown;
- the session's summary says how long the checks took in all, waits for threads to end
  included, and the test whose check took longest: what the guard costs a run (on
  2026-11-29, 0.11 s for the first 516 unit tests).

Not counted: idle pool workers (a ThreadPoolExecutor's or AnyIO's, waiting for work: their
pools stop them), the Spark connector's process-wide runtime thread
(aiorocket.spark._runtime), which is meant to live as long as the process, and threads
handed to :func:`outlives_its_test` by an owner that stops them later (a cluster started
ahead of the tests that use it, tests/integration/helpers.py).
"""

from __future__ import annotations

import itertools
import os
import sys
import threading
import time
import weakref
from collections.abc import Generator, Iterable
from types import FrameType
from typing import Any

import pytest

#: how long, in all, a check waits for new non-daemon threads to end on their own: the
#: bound of a join (a thread's end is the event waited for), not a sleep
GRACE = 5.0

_LOOP_FRAMES = frozenset({"run_forever", "run_until_complete", "_run_once"})


def _frames(thread: threading.Thread) -> list[FrameType]:
    """``thread``'s Python frames, innermost first."""
    frame = sys._current_frames().get(thread.ident or -1)
    out = []
    while frame is not None:
        out.append(frame)
        frame = frame.f_back
    return out


def runs_a_loop(thread: threading.Thread) -> bool:
    """Whether ``thread`` is inside an event loop: an asyncio one (its frames) or trio's, or
    a loop run as the thread's target (uvloop's ``run_forever`` has no Python frame)."""
    for frame in _frames(thread):
        code = frame.f_code
        if code.co_name in _LOOP_FRAMES and "asyncio" in code.co_filename:
            return True
        if code.co_name == "run" and code.co_filename.endswith(os.path.join("_core", "_run.py")):
            return True
    target = getattr(thread, "_target", None)
    return getattr(target, "__name__", None) == "run_forever"


def idle_worker(thread: threading.Thread) -> bool:
    """Whether ``thread`` is a pool's worker waiting for work (its pool ends it): a
    ThreadPoolExecutor's (blocked in its C SimpleQueue: ``_worker`` is its innermost
    Python frame) or AnyIO's (in ``queue.Queue.get``, called by its ``run``)."""
    frames = _frames(thread)
    if not frames:
        return False
    code = frames[0].f_code
    in_pool = code.co_filename.endswith(os.path.join("futures", "thread.py"))
    if code.co_name == "_worker" and in_pool:
        return True
    for inner, outer in itertools.pairwise(frames):
        if inner.f_code.co_name == "get" and inner.f_code.co_filename.endswith("queue.py"):
            return outer.f_code.co_name == "run" and "anyio" in outer.f_code.co_filename
    return False


_OUTLIVING: weakref.WeakSet[threading.Thread] = weakref.WeakSet()


def outlives_its_test(thread: threading.Thread) -> None:
    """``thread`` is meant to run past the test that starts it: its owner stops it."""
    _OUTLIVING.add(thread)


def _owned() -> set[threading.Thread]:
    """Threads meant to outlive any test (see the module's docstring)."""
    owned = set(_OUTLIVING)
    runtime = getattr(sys.modules.get("aiorocket.spark._runtime"), "_runtime", None)
    thread = getattr(runtime, "thread", None)
    if isinstance(thread, threading.Thread):
        owned.add(thread)
    return owned


def describe(thread: threading.Thread) -> str:
    what = "runs an event loop" if runs_a_loop(thread) else "still runs"
    return f"{thread.name!r} ({what}, daemon={thread.daemon})"


def left_behind(before: Iterable[threading.Thread], grace: float = GRACE) -> list[threading.Thread]:
    """The threads started since ``before`` was taken that are a hazard: each one in an
    event loop, and each non-daemon one still busy after up to ``grace`` seconds of
    joins (idle pool workers and :func:`_owned` threads aside)."""
    known = set(before) | _owned() | {threading.current_thread()}
    deadline = time.monotonic() + grace
    out = []
    for thread in threading.enumerate():
        if thread in known:
            continue
        if not thread.daemon and not runs_a_loop(thread) and not idle_worker(thread):
            thread.join(max(0.0, deadline - time.monotonic()))
        if not thread.is_alive():
            continue
        if runs_a_loop(thread) or not (thread.daemon or idle_worker(thread)):
            out.append(thread)
    return out


class ThreadsLeft:
    """The pytest plugin (see the module's docstring)."""

    def __init__(self) -> None:
        self._before: set[threading.Thread] = set()
        #: each thread some test left behind, and that test
        self._started_by: dict[threading.Thread, str] = {}
        self._exit_status: int | None = None
        #: seconds the teardown checks took in all, and the longest one's test and seconds
        self._spent = 0.0
        self._longest: tuple[str, float] = ("", 0.0)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        self._before = set(threading.enumerate())

    @pytest.hookimpl(wrapper=True, trylast=True)
    def pytest_runtest_teardown(self, item: pytest.Item) -> Generator[None, Any, Any]:
        result = yield  # every fixture of the test torn down
        new = [t for t in threading.enumerate() if t not in self._before]
        for thread in new:
            self._started_by.setdefault(thread, item.nodeid)
        started = time.monotonic()
        found = left_behind(self._before)
        took = time.monotonic() - started
        self._spent += took
        if took > self._longest[1]:
            self._longest = (item.nodeid, took)
        self._before = set(threading.enumerate())  # reported once, by its own test
        if found:
            found_text = "; ".join(describe(t) for t in found)
            pytest.fail(f"the test left threads behind: {found_text}", pytrace=False)
        return result

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        nodeid, took = self._longest
        longest = f"; the longest {took:.2f} s, {nodeid}" if nodeid else ""
        terminalreporter.write_line(
            f"threads-left guard: {self._spent:.1f} s in its teardown checks{longest}"
        )

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        busy = [
            t for t in threading.enumerate()
            if t is not threading.main_thread() and not t.daemon and not idle_worker(t)
        ]  # fmt: skip
        found = left_behind(set(threading.enumerate()) - set(busy))
        if not found:
            return
        lines = [f"{describe(t)}, left by {self._started_by.get(t, 'no test')}" for t in found]
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_sep("!", "threads left running (the interpreter would wait for them)")
            for line in lines:
                reporter.write_line(line)
        self._exit_status = int(session.exitstatus) or int(pytest.ExitCode.TESTS_FAILED)
        session.exitstatus = self._exit_status

    @pytest.hookimpl(trylast=True)
    def pytest_unconfigure(self, config: pytest.Config) -> None:
        if self._exit_status is None:
            return
        # The interpreter's shutdown joins every non-daemon thread: these never end.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(self._exit_status)
