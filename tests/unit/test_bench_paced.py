"""benchmarks/aio_children.py ``paced``: the common paced producer of compare.py's e2e
case sends auto-batched messages as the Java harness does (``send(msg, callback)``):
one loop of ``start_send`` with a callback, no task a message (issue 43, goal 4)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import anyio
import anyio.abc
import anyio.lowlevel
import pytest

from aiorocket.errors import RequestTimeoutError

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture
def children(monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    monkeypatch.syspath_prepend(str(BENCH))
    import _common
    import aio_children

    # READY freezes the heap (``settle_heap``): not in the test process
    monkeypatch.setattr(_common, "settle_heap", lambda: None)
    yield aio_children
    sys.modules.pop("aio_children", None)


class _FakeProducer:
    """Answers each ``start_send`` in the loop's next pass (its callback); ``send`` is
    the path of a task per message."""

    batcher = None
    fail_at: int | None = None
    last: _FakeProducer

    def __init__(self, *args: Any, **settings: Any) -> None:
        self.settings = settings
        self.started = 0
        self.answered = 0
        self.sent = 0
        _FakeProducer.last = self

    async def __aenter__(self) -> _FakeProducer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    async def start_send(
        self, tg: anyio.abc.TaskGroup, msg: object, *, on_result: Any = None
    ) -> None:
        self.started += 1
        # a real start_send yields (a slot, the batcher): the failing task then runs
        # soon after its start, whatever the pacing's sleeps overran by under load
        await anyio.lowlevel.checkpoint()
        if self.started == self.fail_at:

            async def fail() -> None:
                raise RequestTimeoutError("no answer")

            tg.start_soon(fail)
            return
        tg.start_soon(self._answer, on_result)  # answered after start_send returned

    async def _answer(self, on_result: Any) -> None:
        self.answered += 1
        on_result(object())

    async def send(self, msg: object) -> object:
        self.sent += 1
        return object()


def _result(out: str) -> dict[str, Any]:
    line = next(x for x in out.splitlines() if x.startswith("RESULT "))
    return dict(json.loads(line[len("RESULT ") :]))


def test_the_auto_batched_paced_producer_sends_by_callback_without_tasks(
    children: ModuleType, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(children, "Producer", _FakeProducer)
    monkeypatch.setattr(children, "WARM_SECONDS", 0.0)
    anyio.run(children.paced, "ns", "t", 300, 64, 200_000, True, 16)
    r = _result(capsys.readouterr().out)
    fake = _FakeProducer.last
    assert fake.started == 300 and fake.sent == 0  # one start_send a message, no send
    # the bound on unanswered sends is the producer's slots (Java: a semaphore's permits)
    assert fake.settings == {"auto_batch": True, "max_in_flight": 16}
    assert r["count"] == 300 and r["failed"] == 0 and r["senders"] == 16
    assert r["send_p99_ms"] >= 0


def test_a_failed_send_ends_the_paced_run_and_the_rest_count_as_failed(
    children: ModuleType, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    class Failing(_FakeProducer):
        fail_at = 100

    monkeypatch.setattr(children, "Producer", Failing)
    anyio.run(children.paced, "ns", "t", 3000, 64, 20_000, True, 16)
    r = _result(capsys.readouterr().out)
    # the 100th failed; the group ended at the loop's next checkpoint: what was not
    # answered by then (the failed one, those started after it, those never started)
    # counts as failed
    fake = Failing.last
    assert 100 <= fake.started < 3000 and fake.answered <= fake.started - 1
    assert r["count"] == 3000 and r["failed"] == 3000 - fake.answered
