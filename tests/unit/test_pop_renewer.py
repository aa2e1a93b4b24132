"""The pop renewer's bookkeeping: settled messages are let go of at once, and batches
they leave empty do not pile up in its heap (issue 38 item 12)."""

from __future__ import annotations

import time

import anyio
import pytest

from aiorocket._log import get_logger
from aiorocket.consumer.pop.renewer import Renewer
from aiorocket.errors import RocketMQError
from aiorocket.received import PopMessage

pytestmark = pytest.mark.anyio


def _renewer(renewed: list[PopMessage]) -> Renewer:
    async def change(msg: PopMessage, seconds: float) -> None:
        renewed.append(msg)

    def never(err: RocketMQError) -> bool:
        return False

    return Renewer(change, invisible=30.0, request_timeout=1.0, on_lost=renewed.remove,
                   is_lost=never, log=get_logger("test"))  # fmt: skip


def _batch(n: int, start: int = 0) -> list[PopMessage]:
    return [PopMessage("t", b"x" * 1024, {}, 0, start + i, 0) for i in range(n)]


def _settle(renewer: Renewer, msg: PopMessage) -> None:
    msg._settled = True
    renewer.forget(msg)  # what PopQueue.on_done does


async def test_a_settled_message_is_let_go_of_and_not_renewed() -> None:
    renewed: list[PopMessage] = []
    renewer = _renewer(renewed)
    msgs = _batch(4)
    renewer.hold(msgs, time.monotonic() - 100)  # due long ago
    _settle(renewer, msgs[1])
    assert renewer.holding == 3 and renewer.held() == [msgs[0], msgs[2], msgs[3]]
    await renewer.sweep()
    assert sorted(m.queue_offset for m in renewed) == [0, 2, 3]
    assert renewer.holding == 3  # held again, due an invisible time from the sweep
    for m in msgs:
        _settle(renewer, m)
    assert (renewer.holding, renewer.held()) == (0, [])


def test_batches_left_empty_are_dropped_from_the_heap() -> None:
    """100,000 messages received in batches of one and settled (a 12 h invisible time
    would keep every batch): the heap stays small."""
    renewer = _renewer([])
    kept = _batch(1)
    renewer.hold(kept, 0.0)
    for i in range(100_000):
        (msg,) = _batch(1, start=i + 1)
        renewer.hold([msg], float(i))
        _settle(renewer, msg)
    assert renewer.holding == 1 and renewer.held() == kept
    assert len(renewer._held) <= 130


async def test_messages_being_renewed_are_still_held_for_the_close() -> None:
    """A sweep takes the due messages out of the heap while it renews them: the close,
    which releases ``held()``, must still see them (before, they were missed, and came
    back only after their invisible time)."""
    gate = anyio.Event()
    started = anyio.Event()

    async def change(msg: PopMessage, seconds: float) -> None:
        started.set()
        await gate.wait()

    def never(err: RocketMQError) -> bool:
        return False

    renewer = Renewer(change, invisible=30.0, request_timeout=1.0, on_lost=lambda m: None,
                      is_lost=never, log=get_logger("test"))  # fmt: skip
    msgs = _batch(2)
    renewer.hold(msgs, time.monotonic() - 100)
    async with anyio.create_task_group() as tg:
        tg.start_soon(renewer.sweep)
        await started.wait()
        assert sorted(m.queue_offset for m in renewer.held()) == [0, 1]
        gate.set()
    assert sorted(m.queue_offset for m in renewer.held()) == [0, 1]
