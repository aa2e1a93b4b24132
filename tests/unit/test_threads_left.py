"""The suite's guard against threads a test leaves behind (tests/threads_left.py): a
thread in an event loop and a busy non-daemon thread are found; idle pool workers and
threads that ended are not."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time

from tests.threads_left import idle_worker, left_behind, runs_a_loop


def test_a_thread_running_an_event_loop_is_found_until_it_stops() -> None:
    before = set(threading.enumerate())
    loop = asyncio.new_event_loop()
    running = threading.Event()
    loop.call_soon(running.set)
    thread = threading.Thread(target=loop.run_forever, name="left-loop", daemon=True)
    thread.start()
    try:
        running.wait()
        assert runs_a_loop(thread)
        assert left_behind(before, grace=0) == [thread]  # daemon or not
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        loop.close()
    assert left_behind(before, grace=0) == []


def test_a_busy_non_daemon_thread_is_found_an_idle_pool_worker_is_not() -> None:
    before = set(threading.enumerate())
    release = threading.Event()
    busy = threading.Thread(target=release.wait, name="left-busy")
    busy.start()
    pool = concurrent.futures.ThreadPoolExecutor(1)
    pool.submit(int).result()  # its worker now waits for more work
    try:
        (worker,) = [t for t in threading.enumerate() if t not in before and t is not busy]
        deadline = time.monotonic() + 10
        while not idle_worker(worker):  # back to its queue once its result is handed over
            assert time.monotonic() < deadline, "the pool's worker never waited for work"
            time.sleep(0.001)
        assert not idle_worker(busy)
        assert left_behind(before, grace=0) == [busy]
    finally:
        release.set()
        busy.join()
        pool.shutdown()
    assert left_behind(before, grace=0) == []
