"""The pop renewer's bookkeeping: settled messages are let go of at once, and batches
they leave empty do not pile up in its heap (issue 38 item 12)."""

from __future__ import annotations

import time

import anyio
import pytest
import trio
from trio.testing import MockClock

from aiorocket._log import get_logger
from aiorocket.client.pop import ACK_MESSAGE
from aiorocket.consumer.pop.acks import AckBatcher
from aiorocket.consumer.pop.renewer import Renewer
from aiorocket.consumer.pop.source import AckRefusals
from aiorocket.errors import RocketMQError, error_for_response
from aiorocket.protocol.codes import ResponseCode
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


class _BusyAcks:
    """A source whose acks are answered SYSTEM_BUSY for ``busy`` seconds, each renewal
    giving the message a new handle (as a remoting ChangeInvisibleTime does); it checks
    the message never became visible before its ack, and that no ack request and
    renewal of it overlap."""

    group = "g"

    def __init__(self, busy: float, invisible: float) -> None:
        self.busy_until = time.monotonic() + busy
        self.invisible = invisible
        self.visible_at = time.monotonic() + invisible
        self.expired: list[float] = []
        self.overlaps = 0
        self.renewals: list[str] = []
        self.acked: list[str] = []
        self._renewing = self._acking = False

    def _check(self) -> None:
        if time.monotonic() > self.visible_at:
            self.expired.append(time.monotonic())

    async def ack(self, topic: str, msgs: list[PopMessage]) -> AckRefusals:
        self._check()
        self.overlaps += self._renewing
        self._acking = True
        await anyio.sleep(0.05)
        self._acking = False
        if time.monotonic() < self.busy_until:
            err = error_for_response(ResponseCode.SYSTEM_BUSY, "[PCBUSY] busy", ACK_MESSAGE)
            return [(m, err) for m in msgs]
        self.acked += [m.receipt_handle for m in msgs]
        return []

    async def change_invisible(self, msg: PopMessage, seconds: float) -> None:
        self._check()
        self.overlaps += self._acking
        self._renewing = True
        await anyio.sleep(0.05)
        self._renewing = False
        msg.receipt_handle = f"rh{len(self.renewals) + 1}"
        self.renewals.append(msg.receipt_handle)
        self.visible_at = time.monotonic() + seconds


@pytest.mark.parametrize("anyio_backend", [
    pytest.param(("trio", {"clock": MockClock(autojump_threshold=0)}), id="trio-virtual"),
])  # fmt: skip
async def test_a_message_whose_ack_is_retried_stays_invisible_until_acked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 38 (c), simulator pop_remoting seed 66: the broker answers the ack busy for
    three invisible times. The renewer keeps renewing the settled message while its ack
    waits for a retry (never while an ack request is out), and the ack that goes through
    names the last renewal's handle; then the renewer lets go of it. Before, the renewer
    forgot the message when it was settled: its invisible time ended while the ack was
    retried, and the broker delivered it again."""
    monkeypatch.setattr(time, "monotonic", trio.lowlevel.current_clock().current_time)
    invisible = 10.0
    source = _BusyAcks(busy=3 * invisible, invisible=invisible)
    renewer = Renewer(source.change_invisible, invisible=invisible, request_timeout=3.0,
                      on_lost=lambda m: None, is_lost=lambda err: False,
                      log=get_logger("test"))  # fmt: skip
    acks = AckBatcher(source, delay=0.01, forget=renewer.forget)  # type: ignore[arg-type]
    (msg,) = _batch(1)
    msg.receipt_handle = "rh0"
    renewer.hold([msg], time.monotonic())
    async with anyio.create_task_group() as tg:
        tg.start_soon(renewer.run)
        tg.start_soon(acks.run)
        await anyio.sleep(1.0)  # handled within a second
        msg._settled = True
        acks.add(msg)
        renewer.forget(msg)  # what PopQueue.on_done does
        with anyio.fail_after(10 * invisible):
            while not source.acked:  # noqa: ASYNC110  (virtual time)
                await anyio.sleep(0.5)
        await anyio.sleep(2 * invisible)
        tg.cancel_scope.cancel()
    assert source.expired == [] and source.overlaps == 0
    assert len(source.renewals) >= 3
    assert source.acked == [source.renewals[-1]]
    assert renewer.holding == 0


@pytest.mark.parametrize("anyio_backend", [
    pytest.param(("trio", {"clock": MockClock(autojump_threshold=0)}), id="trio-virtual"),
])  # fmt: skip
async def test_a_renewal_hanging_on_one_broker_does_not_hold_back_the_others(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Simulator pop_remoting seed 196 (issue 40, half-open connections): two messages
    due together, one of a broker whose connection went silent (its renewal hangs until
    the request timeout, 3 s), one of a healthy broker whose first renewal is refused
    SYSTEM_BUSY. The healthy one is tried again at the next sweep (a tick later), not
    after the silent broker's timeout. Before, a sweep awaited all its renewals and
    pushed back the failed ones only at its end: the retries came 3 s late, the margin
    (5 s) ran out under two more refusals, and the message was delivered again while
    in hand."""
    monkeypatch.setattr(time, "monotonic", trio.lowlevel.current_clock().current_time)
    calls: list[tuple[int, float]] = []

    async def change(msg: PopMessage, seconds: float) -> None:
        calls.append((msg.queue_offset, time.monotonic()))
        if msg.queue_offset == 0:
            await anyio.sleep(3.0)  # the silent broker, until the request timeout
            raise error_for_response(ResponseCode.SYSTEM_ERROR, "timed out")
        if len([c for c in calls if c[0] == 1]) == 1:
            raise error_for_response(ResponseCode.SYSTEM_BUSY, "[PCBUSY] busy")

    renewer = Renewer(change, invisible=10.0, request_timeout=3.0, on_lost=lambda m: None,
                      is_lost=lambda err: False, log=get_logger("test"))  # fmt: skip
    start = time.monotonic()
    msgs = _batch(2)
    for m in msgs:
        m._message_id = f"id{m.queue_offset}"  # named in the renew_failed warning
    renewer.hold(msgs, start - 5.0)  # due at the first sweep (margin 5 s)
    async with anyio.create_task_group() as tg:
        tg.start_soon(renewer.run)
        await anyio.sleep(2.5)
        tg.cancel_scope.cancel()
    healthy = [at - start for offset, at in calls if offset == 1]
    assert len(healthy) == 2 and healthy[1] - healthy[0] <= 1.5, healthy
