"""Client message ids (UNIQ_KEY): unique, well formed, safe against clock steps and threads."""

from __future__ import annotations

import itertools
import os
import re
import sys
import threading
import time

import pytest

from aiorocket import _unique_id
from aiorocket._unique_id import create_unique_id

_UNIQ = re.compile(r"[0-9A-F]{32}")


def test_unique_ids_are_unique_and_well_formed() -> None:
    ids = [create_unique_id() for _ in range(100_000)]
    assert len(set(ids)) == len(ids)
    assert all(_UNIQ.fullmatch(i) for i in ids)
    assert len({i[:20] for i in ids}) == 1  # IP + pid + random part is fixed per process
    assert ids[0][8:12] == f"{os.getpid() & 0xFFFF:04X}"
    # The time part is milliseconds since the start of the local month.
    lt = time.localtime()
    month_start = time.mktime((lt.tm_year, lt.tm_mon, 1, 0, 0, 0, 0, 0, -1))
    span_ms = int(ids[-1][20:28], 16)
    assert abs((time.time() - month_start) * 1000 - span_ms) < 60_000


def test_unique_ids_survive_a_frozen_or_backward_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    # restored after the test: the frozen clock's head is 5 s ahead of the real one
    monkeypatch.setattr(_unique_id, "_uid_state", _unique_id._uid_state)
    frozen = time.time_ns() + 5_000_000_000
    monkeypatch.setattr(time, "time_ns", lambda: frozen)
    ids = [create_unique_id() for _ in range(70_000)]  # more than the 16-bit sequence
    monkeypatch.setattr(time, "time_ns", lambda: frozen - 10_000_000_000)
    ids += [create_unique_id() for _ in range(1_000)]
    assert len(set(ids)) == len(ids)
    assert ids[65_536][28:] == "0000"
    assert int(ids[65_536][20:28], 16) == int(ids[0][20:28], 16) + 1


def test_month_bounds_roll_over_the_year() -> None:
    mid_december = time.mktime((2025, 12, 15, 12, 0, 0, 0, 0, -1))
    start, end = _unique_id._month_bounds(int(mid_december * 1000))
    assert time.localtime(start / 1000)[:6] == (2025, 12, 1, 0, 0, 0)
    assert time.localtime(end / 1000)[:6] == (2026, 1, 1, 0, 0, 0)


def test_unique_ids_are_unique_across_threads() -> None:
    results: list[list[str]] = [[] for _ in range(4)]

    def work(out: list[str]) -> None:
        out.extend(create_unique_id() for _ in range(20_000))

    threads = [threading.Thread(target=work, args=(r,)) for r in results]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    all_ids = [i for r in results for i in r]
    assert len(set(all_ids)) == len(all_ids) == 80_000


def test_unique_ids_are_unique_across_threads_switching_milliseconds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Threads switched every few bytecodes while the clock moves on every few ids: the
    lock-free common case races the threads starting new milliseconds (and full
    sequences: the clock stands still for up to 70,000 calls), and no id repeats."""
    monkeypatch.setattr(_unique_id, "_uid_state", _unique_id._uid_state)
    base = time.time_ns() + 60_000_000_000  # a minute ahead: every head is new
    calls = itertools.count()

    def clock() -> int:
        # 10 ms steps every 7 calls, and a still stretch of 70,000 calls once
        i = next(calls)
        if 100_000 <= i < 170_000:
            return base + 10**9
        return base + (i // 7) * 10_000_000

    monkeypatch.setattr(time, "time_ns", clock)
    results: list[list[str]] = [[] for _ in range(4)]

    def work(out: list[str]) -> None:
        out.extend(create_unique_id() for _ in range(60_000))

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=work, args=(r,)) for r in results]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(old)
    all_ids = [i for r in results for i in r]
    assert len(set(all_ids)) == len(all_ids) == 240_000
    assert all(_UNIQ.fullmatch(i) for i in all_ids)
    for r in results:  # each thread's time parts never go backwards
        times = [int(i[20:28], 16) for i in r]
        assert times == sorted(times)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_a_forked_child_makes_ids_of_its_own() -> None:
    """After a fork, parent and child make ids at once: none is the other's (before, the
    child kept the parent's prefix and millisecond state, so both made the same ids in
    the same millisecond)."""
    create_unique_id()  # the parent's prefix and state are set before the fork
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its ids to the parent, then out without pytest's exit
        try:
            os.write(write, ",".join(create_unique_id() for _ in range(2000)).encode())
        finally:
            os._exit(0)
    os.close(write)
    parent_ids = {create_unique_id() for _ in range(2000)}
    with os.fdopen(read, "rb") as pipe:
        child_ids = set(pipe.read().decode().split(","))
    os.waitpid(pid, 0)
    assert len(child_ids) == 2000
    assert not parent_ids & child_ids
    # the child's prefix is its own (pid and random bytes), so no millisecond collides
    assert {i[:20] for i in child_ids}.isdisjoint({i[:20] for i in parent_ids})
