"""The pull duration metrics record leaves out the long poll's wait for traffic (issue 42,
newcomer item 6): a pull held until a message arrived counts from its store time."""

from __future__ import annotations

from aiorocket.client.results import PullResult, PullStatus
from aiorocket.consumer.puller import _pull_time
from aiorocket.message import MessageExt

SENT_MS = 1_800_000_000_000.0


def _answer(stored_ms: int) -> PullResult:
    msg = MessageExt("t", b"x", {}, 0, 0, 0, store_timestamp=stored_ms)
    return PullResult(PullStatus.FOUND, next_begin_offset=1, min_offset=0, max_offset=1,
                      messages=[msg])  # fmt: skip


def test_a_held_pull_counts_from_the_message_s_store_time() -> None:
    # held 2.45 s, the message stored 2.4 s after the request: 50 ms of latency
    assert abs(_pull_time(2.45, SENT_MS, _answer(int(SENT_MS) + 2400)) - 0.05) < 1e-9


def test_a_pull_that_found_a_backlog_counts_whole() -> None:
    assert _pull_time(0.02, SENT_MS, _answer(int(SENT_MS) - 5000)) == 0.02


def test_a_skewed_clock_stays_within_the_measured_time() -> None:
    assert _pull_time(0.1, SENT_MS, _answer(int(SENT_MS) + 60_000)) == 0.0
    assert _pull_time(0.1, SENT_MS, PullResult(PullStatus.FOUND, 1, 0, 1)) == 0.1
