"""A gRPC session's release state (``aiorocket.grpc._release_hold``), without a Proxy:
the moves its table allows, what each phase asks of the session, and the ``ready``
event the hold hands back at its end."""

from __future__ import annotations

import anyio
import pytest

from aiorocket.grpc._release_hold import Phase, ReleaseHold, ReleaseStateError

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _asks(hold: ReleaseHold) -> tuple[bool, bool, bool]:
    return hold.awaiting, hold.holds_receives, hold.quiets_heartbeats


def test_a_release_waits_holds_terminates_and_ends() -> None:
    """AWAITING: the settings' answer takes the hold; HELD: receives and heartbeats
    wait; TERMINATED: settings answered count again, heartbeats still wait; IDLE."""
    hold = ReleaseHold()
    assert hold.phase is Phase.IDLE and _asks(hold) == (False, False, False)
    hold.begin()
    assert _asks(hold) == (True, False, False)
    assert hold.hold(None) is True
    assert _asks(hold) == (False, True, True)
    assert hold.hold(None) is False  # held already: nothing changes
    hold.terminated()
    assert _asks(hold) == (False, False, True)
    assert hold.end() is None
    assert hold.phase is Phase.IDLE and _asks(hold) == (False, False, False)


async def test_the_end_hands_back_the_event_the_hold_put_in_place() -> None:
    hold = ReleaseHold()
    replaced = anyio.Event()
    hold.hold(replaced)  # (a release whose settings were there: no wait)
    assert hold.hold(anyio.Event()) is False  # the first one's stays
    assert hold.end() is replaced
    assert hold.end() is None  # ended: nothing to hand back


@pytest.mark.parametrize(
    ("setup", "move"),
    [
        ([], "terminated"),  # no termination without the hold
        (["begin"], "begin"),  # one release at a time
        (["begin", "hold"], "begin"),
        (["hold", "terminated"], "hold"),  # after the termination, no new hold
        (["hold", "terminated"], "terminated"),
    ],
)
def test_a_move_the_table_does_not_list_raises(setup: list[str], move: str) -> None:
    hold = ReleaseHold()
    for step in setup:
        if step == "hold":
            hold.hold(None)
        else:
            getattr(hold, step)()
    before = hold.phase
    with pytest.raises(ReleaseStateError):
        hold.hold(None) if move == "hold" else getattr(hold, move)()
    assert hold.phase is before


def test_a_release_given_up_while_awaiting_ends_idle() -> None:
    hold = ReleaseHold()
    hold.begin()
    assert hold.end() is None and hold.phase is Phase.IDLE


def test_admitted_receives_are_counted_until_written() -> None:
    hold = ReleaseHold()
    hold.admit()
    hold.admit()
    hold.written()
    assert hold.unwritten == 1
