"""The simulated Proxy's consumer thread pool falling behind: ``pool_busy``.

5.5.0's ``GrpcMessagingApplication`` hands each call to a pool by its kind:
ReceiveMessage, AckMessage and ChangeInvisibleDuration to the consumer pool
(``consumerThreadPoolExecutor``), Heartbeat, NotifyClientTermination and the
Telemetry commands to the client-manager pool (``clientManagerThreadPoolExecutor``).
Each pool takes its queue in order, the two apart: a receive read before a
termination waits in a busy consumer pool while the termination runs, and reads the
client's settings (``ReceiveMessageActivity``) after the termination dropped them.

Drawn for a workload's ``_late`` variant (``nemesis.LATE``), from a stream of its own
(``f"{workload}:{seed}:pool_busy"``), in six runs out of ten: the consumer pool is busy
for ``seconds`` from the arrival of the ``from_receive``-th ReceiveMessage call (counted
over the run): every receive, ack and change read meanwhile waits for the end, then
runs in the order read. The history gets ``pool_busy`` (until) when a busy spell begins.
"""

from __future__ import annotations

import asyncio
import random
from typing import TYPE_CHECKING

from aiorocket.testing.sim.nemesis import LATE_WORKLOADS, Fault

if TYPE_CHECKING:
    from aiorocket.testing.sim.history import History

__all__ = ["ConsumerPool", "draw_pool_busy"]


def draw_pool_busy(seed: int, workload: str) -> list[Fault]:
    """The ``pool_busy`` faults of run ``seed`` (module docstring)."""
    if workload not in LATE_WORKLOADS:
        return []
    rng = random.Random(f"{workload}:{seed}:pool_busy")
    if rng.random() >= 0.6:
        return []
    return [Fault("pool_busy", {"from_receive": rng.randrange(16),
                                "seconds": round(rng.uniform(0.02, 1.0), 3)})
            for _ in range(rng.randint(1, 2))]  # fmt: skip


class ConsumerPool:
    """The consumer pool's busy spells (module docstring): ``arrived`` at every call
    it runs, then ``await turn()``."""

    def __init__(self, faults: list[Fault], history: History) -> None:
        self._spells: dict[int, float] = {}
        for f in faults:
            self._spells[int(f.args["from_receive"])] = float(f.args["seconds"])
        self._history = history
        self.receives = 0
        #: set when the current spell ends (None: not busy)
        self._free: asyncio.Event | None = None
        self._until = 0.0
        self._timer: asyncio.TimerHandle | None = None

    def __bool__(self) -> bool:
        return bool(self._spells)

    def arrived(self, *, receive: bool) -> None:
        """A call of the consumer pool was read (a receive counts towards a spell)."""
        if not receive:
            return
        index = self.receives
        self.receives += 1
        seconds = self._spells.get(index)
        if seconds is None:
            return
        loop = asyncio.get_running_loop()
        until = loop.time() + seconds
        if self._free is None:
            self._free = asyncio.Event()
        elif until <= self._until:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._until = until
        self._timer = loop.call_at(until, self._end)
        self._history.add("pool_busy", "", pool="consumer", until=until)

    def _end(self) -> None:
        free, self._free, self._timer = self._free, None, None
        if free is not None:
            free.set()  # its waiters run in the order they came (``Event`` wakes so)

    async def turn(self) -> None:
        """Until the pool runs this call: at once, or at the end of a busy spell."""
        if self._free is not None:
            await self._free.wait()
