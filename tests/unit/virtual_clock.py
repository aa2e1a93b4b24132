"""Both backends on a virtual clock, for tests whose every peer runs in their loop.

asyncio on the simulator's ``VirtualTimeLoop`` and trio on ``MockClock(autojump_threshold=0)``:
the clock jumps to the next timer whenever every task waits (after the I/O already on
a loopback socket is read), so the timeouts, delays and guards a test sets are exact
whatever the machine's load, and a starved run cannot outlast one of them.
"""

from __future__ import annotations

import pytest
from trio.testing import MockClock

from aiorocket.testing.sim.vloop import VirtualTimeLoop

__all__ = ["ON_VIRTUAL_CLOCKS"]

ON_VIRTUAL_CLOCKS = pytest.mark.parametrize("anyio_backend", [
    pytest.param(("asyncio", {"loop_factory": VirtualTimeLoop}), id="asyncio-virtual"),
    pytest.param(("trio", {"clock": MockClock(autojump_threshold=0)}), id="trio-virtual"),
])  # fmt: skip
