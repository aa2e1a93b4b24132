"""Half-open connections (issue 40's nemesis), for every simulated remoting broker
(``pull``, ``remoting``, ``lite``): at a drawn time every connection open to one broker
goes silent without closing, as after a NAT entry evicted or a partition without a
reset. The broker neither reads nor answers on them; a new connection works.

The history gets ``half_open`` (the broker, the connections silenced, ``within``: the
bound the client has to notice, when the workload's differs from ``Bounds.reconnect``)
and ``reconnected`` once a request comes on a new connection: the checker's
``reconnects_after_half_open`` judges the gap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import anyio

from aiorocket.testing.fake_remoting import FakeRemotingServer, ServerSession

if TYPE_CHECKING:
    from aiorocket.protocol.command import RemotingCommand
    from aiorocket.testing.sim.history import History
    from aiorocket.testing.sim.nemesis import Schedule

__all__ = ["Deliveries", "Silence", "answer_pop", "pop_half_open_info", "pop_reconnect_bound",
           "run_half_open"]  # fmt: skip


class Silence:
    """The half-open state of one broker's connections."""

    def __init__(self, name: str, server: FakeRemotingServer, history: History) -> None:
        self.name = name
        self.server = server
        self.history = history
        #: ids of the connections silenced (None: no silence waits for a new connection)
        self._silent: set[int] | None = None

    def start(self, **info: Any) -> None:
        """Every connection open now goes silent, open."""
        stalled = list(self.server.sessions)
        for session in stalled:
            session.stall()
        self._silent = {id(s) for s in stalled}
        self.history.add("half_open", "", broker=self.name, connections=len(stalled), **info)

    def seen(self, session: ServerSession) -> None:
        """A request came on ``session``: on a new one, the client reconnected."""
        if self._silent is not None and id(session) not in self._silent:
            self._silent = None
            self.history.add("reconnected", "", broker=self.name)


def pop_reconnect_bound(settings: dict[str, Any]) -> float:
    """A POP (or lite) client's bound to a request on a new connection after a silence:
    it notices when a pop on the silent one times out (its timeout: the long poll, the
    request timeout and 5 s, as ``RemotingSource.receive`` sets it), or when another
    request there times out first and drops the connection under the pop; one receive
    backoff (10 s at most) comes before that pop (a silence inside a backoff) or after it
    (a pop dropped before it waited a request timeout), not both: a pop lost with its
    connection after a request timeout or more ends the backoff
    (``RemotingSource.new_connection``); 2 s to spare."""
    from aiorocket.testing.sim.compat import receive_backoff_cap

    pop_timeout = settings["long_poll_timeout"] + settings["request_timeout"] + 5
    return float(pop_timeout + receive_backoff_cap() + 2)


def pop_half_open_info(settings: dict[str, Any]) -> dict[str, float]:
    """What a POP workload's ``half_open`` events carry for the checker: ``within``
    (``pop_reconnect_bound``), whether or not the silence falls in a receive backoff."""
    return {"within": pop_reconnect_bound(settings)}


#: the history's entries of a pop's messages, added once its answer is written
Deliveries = list[tuple[str, dict[str, Any]]]


async def answer_pop(session: ServerSession, answer: RemotingCommand, history: History,
                     deliveries: Deliveries) -> None:  # fmt: skip
    """Write a pop's ``answer``, then name its messages in the history: ``delivered``, or
    ``lost_on_wire`` when the answer never reached the client: its connection was
    silenced (a pop parked before the silence and answered after it), or the client had
    hung up (a long poll the close cut, woken by a message before the broker saw the
    connection close: 5.5.0's PopLiteLongPollingService.wakeUp checks that the channel
    is active, then pops and writes on another thread, and a failed write is only
    logged). Either way the broker holds the messages invisible, the client never sees
    them, and they come back when their invisible time ends (``none_lost`` judges that).
    Named after the write: nothing runs between the two, so the client cannot have
    handled them yet."""
    kind = "delivered" if await session.send(answer) else "lost_on_wire"
    for key, info in deliveries:
        history.add(kind, key, **info)


async def run_half_open(schedule: Schedule, silences: dict[str, Silence], **info: Any) -> None:
    """Silence the brokers at the schedule's ``half_open`` times (``info`` goes into
    each ``half_open`` event)."""
    for f in sorted(schedule.of("half_open"), key=lambda f: f.args["at"]):
        await anyio.sleep(max(0.0, f.args["at"] - anyio.current_time()))
        silences[f.args["broker"]].start(**info)
