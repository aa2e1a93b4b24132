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

``stream`` and ``dispatch`` are wall time: on a machine shared with the brokers they
include the time the consumer's process waited for a core. The split also reads the
consumer thread's CPU clock at the read, at the decode's end and at the handler, so that
what the consumer itself ran meanwhile is apart (``own_cpu``: stream + dispatch in CPU
time, the callbacks of every queue and the handler calls ahead of the message), and
counts the handler calls between a message's answer decoded and its own (``ahead``: a
pull's messages run one behind another, behind what earlier reads queued). Wall minus
CPU is the machine's share. One CPU clock read per message (a system call, ~0.5 µs).

The summary's ``gap`` is a queue's turnaround, from a pull's answer to the queue's next
pull leaving (the tracker, the hand-off, the loop). ``share``: stream + dispatch of
each message (wall), the consumer's share as goal 4 of issue 43 names it.
``wait_client``: the part of a message's ``wait`` after its queue's previous answer was
read (that answer's decode, the turnaround and the next pull's write: the client's); the
rest of ``wait`` is that answer's way back (the broker, the network, the OS). It times
``BrokerClient.pull`` from the outside (a benchmark's business only): two clock reads
per pull and one dict entry per message, keyed by the message object (alive until its
handler ran). Clocks: the broker's store time (ms) and this host's wall clock.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from _receive_split import ReceiveSplit


class PullSplit(ReceiveSplit):
    """``ReceiveSplit`` for the remoting pull: ``sample`` takes ``id(msg)``."""

    def __init__(self) -> None:
        super().__init__()
        #: message id -> the thread's CPU ns at its answer's read and decode end, the
        #: handler calls counted by then, and when its queue's previous answer was read
        #: (wall µs; 0: none)
        self._cpu_at: dict[object, tuple[int, int, int, int]] = {}
        self._handled = 0
        #: per steady sample, in the order of ``_total``: CPU µs of stream + dispatch,
        #: and the handler calls ahead of it since its answer was decoded
        self._own_cpu: list[int] = []
        self._ahead: list[int] = []
        #: per steady sample: the part of its ``wait`` after its queue's previous answer
        #: was read (that answer's decode and the turnaround: the client's), µs
        self._wait_client: list[int] = []

    def sample(self, message_id: object, stored_us: int, now_us: int, steady: bool) -> None:
        cpu = self._cpu_at.pop(message_id, None)
        handled = self._handled = self._handled + 1
        times = self._at.get(message_id)
        if cpu is not None and steady and times is not None:
            self._own_cpu.append((time.thread_time_ns() - cpu[0]) // 1000)
            self._ahead.append(handled - 1 - cpu[2])
            left = times[0]  # its pull left; stored before: it waited for that
            self._wait_client.append(max(0, left - max(stored_us, cpu[3])))
        super().sample(message_id, stored_us, now_us, steady)

    def summary(self) -> dict[str, float]:
        out = super().summary()
        own, ahead, total = self._own_cpu, self._ahead, self._total
        if not out or len(own) != len(total):
            return out
        # the consumer's share per message, wall time (goal 4: "< 3 ms"): stream +
        # dispatch of one message, whose p99 the parts' own p99s (of different
        # messages) do not give; own_cpu is its CPU time
        share = [a + b for a, b in zip(self._parts["stream"], self._parts["dispatch"],
                                       strict=True)]  # fmt: skip
        for name, xs, unit in (("share", share, 1000), ("own_cpu", own, 1000),
                               ("ahead", ahead, 1),
                               ("wait_client", self._wait_client, 1000)):  # fmt: skip
            s = sorted(xs)
            out[f"{name}_p50" + ("_ms" if unit > 1 else "")] = s[len(s) // 2] / unit
            out[f"{name}_p99" + ("_ms" if unit > 1 else "")] = (
                s[min(len(s) - 1, round(0.99 * len(s)) - 1)] / unit
            )
        # the slowest 1% by stored -> handler, as the parts' tail_ figures
        slowest = sorted(range(len(total)), key=total.__getitem__, reverse=True)
        tail = slowest[: max(1, len(total) // 100)]
        out["tail_own_cpu_ms"] = sum(own[i] for i in tail) / len(tail) / 1000
        out["tail_ahead"] = sum(ahead[i] for i in tail) / len(tail)
        waited = self._wait_client
        out["tail_wait_client_ms"] = sum(waited[i] for i in tail) / len(tail) / 1000
        return out

    def install(self) -> None:
        from aiorocket.client import broker
        from aiorocket.remoting.wire import ProtocolWire

        cls: Any = broker.BrokerClient
        wire: Any = ProtocolWire
        pull, at, sizes, ends, gaps = cls.pull, self._at, self._sizes, self._ends, self._gaps
        reads: dict[int, int] = {}  # per queue (its pull task): its last answer's read
        cpu_at, cpu_clock = self._cpu_at, time.thread_time_ns
        received = wire.data_received
        last_read = [0]  # wall µs of the latest read, any connection
        last_read_cpu = [0]  # the thread's CPU ns then

        def timed_read(protocol: Any, data: bytes) -> None:
            # A pull task woken by this read runs before the loop takes any later read
            # (those callbacks queue behind its wake-up): the last read it sees is its own.
            last_read[0] = time.time_ns() // 1000
            last_read_cpu[0] = cpu_clock()
            received(protocol, data)

        async def timed_pull(client: Any, *args: Any, **kw: Any) -> Any:
            left = time.time_ns() // 1000
            queue = id(asyncio.current_task())  # one pull task per queue
            before = reads.get(queue, 0)
            if queue in ends:
                gaps.append(left - ends[queue])
            result = await pull(client, *args, **kw)
            end = ends[queue] = time.time_ns() // 1000
            cpu_end = cpu_clock()
            seen = left <= last_read[0] <= end
            read = last_read[0] if seen else end
            cpu_read = last_read_cpu[0] if seen else cpu_end
            reads[queue] = read
            msgs = result.messages
            if msgs:
                sizes.append(len(msgs))
            handled = self._handled
            for m in msgs:
                at[id(m)] = (left, read, end)
                cpu_at[id(m)] = (cpu_read, cpu_end, handled, before)
            return result

        cls.pull = timed_pull
        wire.data_received = timed_read
