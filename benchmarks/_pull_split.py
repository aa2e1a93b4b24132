"""Where a remoting pull consumer's stored -> handler time goes (issue 43, goal 4).

``consume.py --latency`` over remoting splits each steady message's stored -> handler
time at the pull that brought it, in the parts of ``_receive_split``:

* ``wait``: stored -> that pull left the client (0 when one was already out: parked at
  the broker, whose arrival notice woke it, or on its way);
* ``server``: max(stored, pull left) -> its answer decoded at the client: the broker's
  long-polling wake-up, the pull, the network, the read and the decode;
* ``stream``: 0 (a pull answers in one frame, decoded whole);
* ``dispatch``: the answer -> the handler (the tracker, the delivery strategy, the
  handler workers, the event loop's other work meanwhile).

The summary's ``gap`` is a queue's turnaround, from a pull's answer to the queue's next
pull leaving (the tracker, the hand-off, the loop). It times ``BrokerClient.pull`` from
the outside (a benchmark's business only): two clock reads per pull and one dict entry
per message, keyed by the message object (alive until its handler ran). Clocks: the
broker's store time (ms) and this host's wall clock.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from _receive_split import ReceiveSplit


class PullSplit(ReceiveSplit):
    """``ReceiveSplit`` for the remoting pull: ``sample`` takes ``id(msg)``."""

    def install(self) -> None:
        from aiorocket.client import broker

        cls: Any = broker.BrokerClient
        pull, at, sizes, ends, gaps = cls.pull, self._at, self._sizes, self._ends, self._gaps

        async def timed_pull(client: Any, *args: Any, **kw: Any) -> Any:
            left = time.time_ns() // 1000
            queue = id(asyncio.current_task())  # one pull task per queue
            if queue in ends:
                gaps.append(left - ends[queue])
            result = await pull(client, *args, **kw)
            end = ends[queue] = time.time_ns() // 1000
            msgs = result.messages
            if msgs:
                sizes.append(len(msgs))
            for m in msgs:
                at[id(m)] = (left, end, end)
            return result

        cls.pull = timed_pull
