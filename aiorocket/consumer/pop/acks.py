"""Batched acks of the pop consumer: one ack request per topic for what settled together
(gRPC AckMessage with many entries; remoting BATCH_ACK_MESSAGE per broker).

``add`` only queues the ack; the flusher sends what queued within ``delay`` seconds in
requests of at most ``MAX_ENTRIES`` entries, through the ``PopSource``. Rules:

* an ack stays queued until its request has been answered: a flush that is cancelled
  mid-request (the consumer closes) puts its entries back, so ``AckBatcher.close``
  sends them (an entry the server had acked already is answered with an error: harmless);
* an ack waits for a renewal of the same message in flight, since the renewal replaces
  the receipt handle the ack must carry;
* an ack whose request failed with a retriable error (a timeout, the Proxy unavailable)
  is sent again, up to ``ACK_TRIES`` times, a second apart at most: the Proxy renews an
  auto-renewed message until it is acked, so a lost ack would hold it back until this
  client goes away. One refused for good (an entry's error, or out of tries) is logged
  and counted: the message is delivered again (at least once). The close reports how
  many acks it could not deliver, never silently.
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

import anyio

from aiorocket._log import get_logger
from aiorocket.errors import RocketMQError

if TYPE_CHECKING:
    from aiorocket.consumer.pop.source import PopSource
    from aiorocket.received import PopMessage

__all__ = ["ACK_TRIES", "MAX_ENTRIES", "AckBatcher"]

MAX_ENTRIES = 64
#: requests an ack may take when they fail with a retriable error
ACK_TRIES = 3


class AckBatcher:
    """Queues acks and sends them in batches per topic.

    Parameters
    ----------
    source:
        The pop session that sends the acks.
    delay:
        Seconds the flusher waits after the first queued ack, so more share a request.
    """

    def __init__(self, source: PopSource, delay: float) -> None:
        self.source = source
        self.delay = delay
        self._pending: dict[str, list[PopMessage]] = defaultdict(list)
        self._wake = anyio.Event()
        #: acks the server confirmed / that failed (request or entry), since the start
        self.acked = 0
        self.failed = 0
        #: one flush at a time: the close's last flush waits for the flusher's request
        #: in flight (else it would find nothing queued, report nothing unsent, and the
        #: flusher's request would then be cancelled with the task group: acks lost)
        self._flushing = anyio.Lock()
        #: acks in the request being sent
        self._in_flight = 0
        self.log = get_logger("consumer.acks", group=source.group)

    def add(self, msg: PopMessage) -> None:
        self._pending[msg.topic].append(msg)
        self._wake.set()

    @property
    def pending(self) -> int:
        return sum(len(v) for v in self._pending.values())

    async def run(self) -> None:
        """The flusher task (owned by the consumer's task group)."""
        while True:
            await self._wake.wait()
            self._wake = anyio.Event()
            if self.delay:
                await anyio.sleep(self.delay)
            await self.flush()

    async def flush(self) -> None:
        """Send everything queued now, one request per topic and chunk."""
        async with self._flushing:
            await self._flush()

    async def _flush(self) -> None:
        while self._pending:
            topic = next(iter(self._pending))
            queued = self._pending[topic]
            chunk = queued[:MAX_ENTRIES]
            del queued[:MAX_ENTRIES]
            if not queued:
                del self._pending[topic]
            try:
                await self._ack(topic, chunk)
            except RocketMQError as err:
                again = [m for m in chunk if err.retriable and _tried(m) < ACK_TRIES]
                self.failed += len(chunk) - len(again)
                self.log.warning("ack_failed", topic=topic, n=len(chunk), error=str(err),
                                 retried=len(again))  # fmt: skip
                if again:
                    self._pending[topic].extend(again)
                    await anyio.sleep(min(1.0, 0.1 * _tried(again[0])))
            except BaseException:
                # Cancelled (or worse) mid-request: nothing is known to be acked; the
                # entries go back to the front so the close sends them.
                self._pending[topic][:0] = chunk
                raise

    async def close(self, timeout: float) -> int:
        """The last flush (shielded, at most ``timeout`` s); returns the acks not sent."""
        with anyio.move_on_after(timeout, shield=True):
            await self.flush()
        unsent = self.pending + self._in_flight + self.failed
        if unsent:
            self.log.warning(
                "acks_not_delivered", n=unsent,
                hint="those messages are delivered again after their invisible duration",
            )  # fmt: skip
        return unsent

    async def _ack(self, topic: str, msgs: list[PopMessage]) -> None:
        for m in msgs:
            await m.renewed()
        self._in_flight = len(msgs)
        try:
            ok = await self.source.ack(topic, msgs)
        finally:
            self._in_flight = 0
        self.acked += ok
        self.failed += len(msgs) - ok


def _tried(msg: PopMessage) -> int:
    """Count one more request for ``msg``'s ack; the requests so far."""
    msg._ack_tries += 1
    return msg._ack_tries
