"""The network delaying what a client writes to the simulated Proxy: ``arrival_delay``.

A real network does not hand a request to the server the instant the client wrote it:
a connection still opening (a SYN retransmitted), a stalled socket buffer (a peer's
receive window shut, a congested path) hold the bytes for a while, then deliver them.
What it keeps is the order of ONE connection (TCP: an HTTP/2 connection's requests
arrive in the order written); two connections are independent, so a request written
later on one may arrive before one written earlier on the other.

Drawn for a workload's ``_late`` variant (``nemesis.LATE``: the base workload's run of
the same seed, these faults added), from a stream of its own
(``f"{workload}:{seed}:arrival_delay"``), in seven runs out of ten: the n-th connection
the Proxy accepts (counted over the run, restarts and second consumers included) has
the bytes its client writes from ``after`` seconds after it opened until ``seconds``
later held, then delivered in order (``after`` 0: a slow open, its first requests
arrive late). The Proxy's answers are not delayed. A close
by the client (FIN) arrives after the bytes held before it; a reset drops them, as the
server's kernel discards what it had not read. The history gets ``arrival_held``
(connection, until) when the first bytes of a window are held.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from typing import TYPE_CHECKING

from aiorocket.testing.sim.nemesis import LATE_WORKLOADS, Fault

if TYPE_CHECKING:
    from aiorocket.testing.sim.history import History

__all__ = ["ArrivalDelays", "draw_arrival_delay"]


def draw_arrival_delay(seed: int, workload: str) -> list[Fault]:
    """The ``arrival_delay`` faults of run ``seed`` (module docstring)."""
    if workload not in LATE_WORKLOADS:
        return []
    rng = random.Random(f"{workload}:{seed}:arrival_delay")
    if rng.random() >= 0.7:
        return []
    out = []
    for _ in range(rng.randint(1, 2)):
        connection = rng.randrange(6)
        after = 0.0 if rng.random() < 0.5 else round(rng.uniform(0.0, 2.0), 2)
        # mostly within the keepalive's bound (a PING held too), at times past it
        seconds = round(rng.uniform(0.02, 1.5), 3) if rng.random() < 0.85 else 3.0
        out.append(Fault("arrival_delay", {"connection": connection, "after": after,
                                           "seconds": seconds}))  # fmt: skip
    return out


class ArrivalDelays:
    """The run's ``arrival_delay`` faults, applied to the connections a server accepts
    (``wrap`` its protocol factory)."""

    def __init__(self, faults: list[Fault], history: History) -> None:
        self._spans: dict[int, list[tuple[float, float]]] = {}
        for f in faults:
            span = (float(f.args["after"]), float(f.args["seconds"]))
            self._spans.setdefault(int(f.args["connection"]), []).append(span)
        self._history = history
        #: connections accepted so far (over every start: the Proxy's restarts)
        self.accepted = 0
        #: the connections open now, whether or not a call of theirs was read yet
        self._open: set[_Late] = set()

    def __bool__(self) -> bool:
        return bool(self._spans)

    def wrap(self, factory: Callable[[], asyncio.Protocol]) -> Callable[[], asyncio.Protocol]:
        """A server's protocol factory whose connections get their delays."""
        if not self._spans:
            return factory

        def delayed() -> asyncio.Protocol:
            index = self.accepted
            self.accepted += 1
            return _Late(factory(), index, self._spans.get(index, []), self._history, self._open)

        return delayed

    def transports(self) -> list[asyncio.BaseTransport]:
        """Every connection open now: one whose calls are all held still counts (a
        restart, a reset, a silence strikes it too; the server knows none of its calls)."""
        return [late.transport for late in self._open if late.transport is not None]


class _Late(asyncio.Protocol):
    """A server protocol whose incoming bytes go through the connection's delays."""

    def __init__(self, inner: asyncio.Protocol, index: int, spans: list[tuple[float, float]],
                 history: History, open_: set[_Late]) -> None:  # fmt: skip
        self._inner = inner
        self._open = open_
        self._index = index
        self._spans = spans
        self._history = history
        self._windows: list[tuple[float, float]] = []
        #: what arrived and waits, in order: ("data", bytes) or ("eof", None)
        self._queue: list[tuple[str, bytes | None]] = []
        self._flush: asyncio.TimerHandle | None = None
        self.transport: asyncio.BaseTransport | None = None
        self._noted: set[tuple[float, float]] = set()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        self._open.add(self)
        now = asyncio.get_running_loop().time()
        self._windows = [(now + after, now + after + seconds) for after, seconds in self._spans]
        self._inner.connection_made(transport)

    def _held_until(self) -> float | None:
        now = asyncio.get_running_loop().time()
        for start, end in self._windows:
            if start <= now < end:
                if (start, end) not in self._noted:
                    self._noted.add((start, end))
                    self._history.add("arrival_held", "", connection=self._index, until=end)
                return end
        return None

    def _hold(self, item: tuple[str, bytes | None], until: float | None) -> None:
        self._queue.append(item)
        if until is not None and (self._flush is None or self._flush.when() < until):
            if self._flush is not None:
                self._flush.cancel()
            self._flush = asyncio.get_running_loop().call_at(until, self._deliver)

    def _deliver(self) -> None:
        self._flush = None
        reading = getattr(self.transport, "is_reading", None)
        if reading is not None and not reading():  # silenced (``half_open``): never read
            return
        queue, self._queue = self._queue, []
        for kind, data in queue:
            if kind == "data":
                assert data is not None
                self._inner.data_received(data)
            elif not self._inner.eof_received() and self.transport is not None:
                self.transport.close()  # as the transport does when eof_received is falsy

    def data_received(self, data: bytes) -> None:
        until = self._held_until()
        if until is not None or self._queue:  # after what waits: one connection's order
            self._hold(("data", data), until)
        else:
            self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        if self._queue:  # the FIN after the bytes before it
            self._hold(("eof", None), None)
            return True
        return self._inner.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        # (a reset: the server's kernel drops what the server had not read)
        if self._flush is not None:
            self._flush.cancel()
            self._flush = None
        self._queue.clear()
        self._open.discard(self)
        self._inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self._inner.pause_writing()

    def resume_writing(self) -> None:
        self._inner.resume_writing()
