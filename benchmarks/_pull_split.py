"""Where a remoting pull consumer's stored -> handler time goes (issue 43, goal 4).

``consume.py --latency`` over remoting splits each steady message's stored -> handler
time at the pull that brought it, in the parts of ``_receive_split``:

* ``wait``: stored -> that pull left the client (0 when one was already out: parked at
  the broker, whose arrival notice woke it, or on its way);
* ``server``: max(stored, pull left) -> its answer read by the client (the read that
  brought it: ``ProtocolWire.data_received``): the wire's write of the pull (sent at
  the end of the pull task's loop step), the broker's long-polling wake-up, the pull
  and the network both ways;
* ``stream``: that read -> the pull task resumed and decoded the answer: the client's
  event loop (the callbacks queued before the task: other queues' answers, handler
  bursts) and the decode (a pull answers in one frame, so nothing of a stream);
* ``dispatch``: the answer decoded -> the handler (the tracker, the delivery strategy,
  the handler workers, the event loop's other work meanwhile).

``stream`` and ``dispatch`` are the consumer's own share; ``server`` is the broker's and
the network's, but for the write of the pull. Off asyncio's protocol wire (trio) the
read is not seen: ``stream`` is 0 and ``server`` includes it.

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
        from aiorocket.remoting.wire import ProtocolWire

        cls: Any = broker.BrokerClient
        wire: Any = ProtocolWire
        pull, at, sizes, ends, gaps = cls.pull, self._at, self._sizes, self._ends, self._gaps
        received = wire.data_received
        last_read = [0]  # wall µs of the latest read, any connection

        def timed_read(protocol: Any, data: bytes) -> None:
            # A pull task woken by this read runs before the loop takes any later read
            # (those callbacks queue behind its wake-up): the last read it sees is its own.
            last_read[0] = time.time_ns() // 1000
            received(protocol, data)

        async def timed_pull(client: Any, *args: Any, **kw: Any) -> Any:
            left = time.time_ns() // 1000
            queue = id(asyncio.current_task())  # one pull task per queue
            if queue in ends:
                gaps.append(left - ends[queue])
            result = await pull(client, *args, **kw)
            end = ends[queue] = time.time_ns() // 1000
            read = last_read[0] if left <= last_read[0] <= end else end
            msgs = result.messages
            if msgs:
                sizes.append(len(msgs))
            for m in msgs:
                at[id(m)] = (left, read, end)
            return result

        cls.pull = timed_pull
        wire.data_received = timed_read
