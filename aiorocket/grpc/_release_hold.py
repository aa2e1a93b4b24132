"""Where a session's release of held messages stands (``Session.release_held``): one
value, its moves in one table, no I/O.

A release ends the Proxy's hold on what it gave this client (NotifyClientTermination),
which also drops the client's settings: a receive that reached the Proxy between the
termination and the settings sent again would be refused (5.5.0: ``"settings" is
null``), and a heartbeat of the heartbeat loop there would be refused too. So:

* ``IDLE``: no release under way;
* ``AWAITING``: a release waits for the Proxy to have the settings (they must be there
  to be sent again after the termination); their answer takes the hold in the same
  step, so no receive woken by them goes first;
* ``HELD``: the termination is still to go: receives wait, and settings answered
  meanwhile (a new stream's) do not let them go; no heartbeat of the loop;
* ``TERMINATED``: the termination went; settings answered now count (they came after
  it), but the release has not registered again yet: still no heartbeat of the loop.

``end`` goes back to ``IDLE`` from any of them (the release's end, or one given up).
``unwritten`` counts the receives let go while the Proxy had the settings whose
requests are not written yet (``Session.admit``): the termination waits for them.
A move the table does not list raises ``ReleaseStateError`` (a bug, never the Proxy's).
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import anyio

__all__ = ["Phase", "ReleaseHold", "ReleaseStateError"]


class Phase(enum.Enum):
    IDLE = "idle"
    AWAITING = "awaiting"
    HELD = "held"
    TERMINATED = "terminated"


class ReleaseStateError(RuntimeError):
    """A move the release's table does not allow from where it stands."""


#: (where it stands, the move) -> where it goes
_MOVES: dict[tuple[Phase, str], Phase] = {
    (Phase.IDLE, "begin"): Phase.AWAITING,
    (Phase.IDLE, "hold"): Phase.HELD,
    (Phase.AWAITING, "hold"): Phase.HELD,
    (Phase.HELD, "terminated"): Phase.TERMINATED,
    **{(phase, "end"): Phase.IDLE for phase in Phase},
}


class ReleaseHold:
    """A session's release state (see the module doc)."""

    __slots__ = ("_ready", "phase", "unwritten")

    def __init__(self) -> None:
        self.phase = Phase.IDLE
        #: the unset ``ready`` event the hold put in place of a set one (None: the
        #: settings were not there, their stream's event stays): set again at the end
        self._ready: anyio.Event | None = None
        #: receives admitted and not written yet (``Session.admit``)
        self.unwritten = 0

    def _move(self, move: str) -> None:
        to = _MOVES.get((self.phase, move))
        if to is None:
            raise ReleaseStateError(f"release: {move!r} from {self.phase.name}")
        self.phase = to

    # -- what the session asks -------------------------------------------------------

    @property
    def awaiting(self) -> bool:
        """A release waits for the settings: their answer takes the hold."""
        return self.phase is Phase.AWAITING

    @property
    def holds_receives(self) -> bool:
        """The termination is still to go: settings answered do not let receives go."""
        return self.phase is Phase.HELD

    @property
    def quiets_heartbeats(self) -> bool:
        """From the hold until the release registered again: no heartbeat of the loop."""
        return self.phase is Phase.HELD or self.phase is Phase.TERMINATED

    # -- moves ---------------------------------------------------------------------

    def begin(self) -> None:
        """A release starts waiting for the settings."""
        self._move("begin")

    def hold(self, replaced: anyio.Event | None) -> bool:
        """Take the hold; ``replaced``: the unset ``ready`` event put in place of a set
        one (None: not set). False, and nothing changed, when held already."""
        if self.phase is Phase.HELD:
            return False
        self._move("hold")
        self._ready = replaced
        return True

    def terminated(self) -> None:
        """The termination went (or failed): settings answered from now on count."""
        self._move("terminated")

    def end(self) -> anyio.Event | None:
        """The release's end, or given up: back to ``IDLE``; returns the event ``hold``
        put in place (None: none), for the session to set when it is still current."""
        self._move("end")
        ready, self._ready = self._ready, None
        return ready

    def admit(self) -> None:
        self.unwritten += 1

    def written(self) -> None:
        self.unwritten -= 1
