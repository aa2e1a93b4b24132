"""Request-reply in the fault simulator (issue 44; aiorocket.testing.sim.reply_workload,
docs/simulator.md): fixed seeds pass, and the checker's request-reply invariants catch
each violation planted in the client (so they cannot pass vacuously)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest

from aiorocket.producer.reply import Replies
from aiorocket.protocol.command import RemotingCommand
from aiorocket.testing.sim import History, check, run

#: each about a quarter of a second (virtual time): refused requests, lost, late and
#: doubled pushes, slow repliers, cancelled requests and stray replies among them
SEEDS = range(0, 12)


@pytest.mark.parametrize("seed", SEEDS)
def test_request_reply_seed(seed: int) -> None:
    report = run(seed, "request_reply")
    assert report.ok, str(report)


def _broken(report: Any) -> set[str]:
    return {v.invariant for v in report.violations}


def test_a_reply_handed_to_another_request_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """Planted: each push goes to the newest waiting request, whatever its correlation id."""

    async def misdeliver(self: Replies, conn: Any, cmd: RemotingCommand) -> RemotingCommand:
        waiting = [w for w in self._waiting.values() if w.reply is None]
        if waiting:
            from aiorocket.producer.reply import parse_reply

            waiting[-1].reply = parse_reply(cmd)
            waiting[-1].event.set()
        return RemotingCommand.response_to(cmd)

    monkeypatch.setattr(Replies, "on_push", misdeliver)
    assert any("reply_is_its_own" in _broken(run(s, "request_reply")) for s in SEEDS)


def test_a_reply_ignored_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """Planted: every push dropped, the requests time out with their replies pushed."""

    async def drop(self: Replies, conn: Any, cmd: RemotingCommand) -> RemotingCommand:
        return RemotingCommand.response_to(cmd)

    monkeypatch.setattr(Replies, "on_push", drop)
    report = run(1, "request_reply")
    assert "reply_not_missed" in _broken(report), str(report)


def test_a_waiter_left_behind_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """Planted: a request's waiter kept after the request returned."""

    @contextlib.contextmanager
    def keep(self: Replies, correlation_id: str) -> Iterator[Any]:
        from aiorocket.producer.reply import _Waiter

        waiter = self._waiting[correlation_id] = _Waiter()
        yield waiter

    monkeypatch.setattr(Replies, "expect", keep)
    report = run(1, "request_reply")
    assert "no_waiter_left" in _broken(report), str(report)


def test_a_request_past_its_bound_or_untyped_is_caught() -> None:
    clock = iter([0.0, 0.0, 0.0, 4.0, 0.0, 0.5])
    history = History(lambda: next(clock))
    history.add("request_start", "q-0", timeout=3.0)
    history.add("request_start", "q-1", timeout=3.0)
    history.add("request_start", "q-2", timeout=3.0)
    history.add("request_failed", "q-0", typed=True, error="ReplyTimeoutError()", timed_out=True)
    history.add("request_hung", "q-1", timeout=3.0)
    history.add("request_failed", "q-2", typed=False, error="KeyError()", timed_out=False)
    found = {(v.invariant, v.key) for v in check(history)}
    assert {("request_within_bound", k) for k in ("q-0", "q-1", "q-2")} <= found
