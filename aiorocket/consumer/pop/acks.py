"""Batched acks of the pop consumer: one ack request per topic for what settled together
(gRPC AckMessage with many entries; remoting BATCH_ACK_MESSAGE per broker, or one
ACK_MESSAGE per message of a FIFO source).

``add`` only queues the ack; the flusher sends what queued within ``delay`` seconds in
requests of at most ``MAX_ENTRIES`` entries, through the ``PopSource`` (whose error
contract, ``aiorocket.consumer.pop.source``, says what each failure means). Rules:

* an ack stays queued until its request has been answered: a flush that is cancelled
  mid-request (the consumer closes) puts its entries back, so ``AckBatcher.close``
  sends them (an entry the server had acked already is answered with success or an
  error: harmless);
* an ack waits for a renewal of the same message in flight, since the renewal replaces
  the receipt handle the ack must carry;
* until its ack is answered, a message stays with the renewer, kept invisible though
  settled (``PopMessage._ack_state``: ACK_QUEUED); no renewal starts while a request
  names it (ACK_SENDING), so a request always carries the current handle and a retry the
  one of the last renewal. An ack retried for longer than the invisible time (a broker
  busy for seconds) would otherwise let the message come back: a duplicate. The
  batcher lets go of a message (``forget``) once its ack is answered, refused for
  good, or handed to the close;
* an ack that failed with a retriable error (a timeout, a dropped connection,
  SYSTEM_BUSY, the Proxy unavailable) is sent again, as long as the consumer runs,
  backing off from ``FIRST_BACKOFF`` to ``MAX_BACKOFF`` seconds between requests: the
  Proxy renews an auto-renewed message until it is acked, and a broker keeps a FIFO
  queue (a lite topic) blocked behind an unacked message, so an ack given up would hold
  the message (and its group) back for hours. Other acks go on meanwhile;
* an ack the server refused for good (not retriable) is logged and counted (``failed``)
  and the message is released (``release``: made visible again at once), so it is
  delivered again now rather than held by a server that renews it;
* the close sends what is queued or waiting for a retry within its bound (a retry
  whose backoff would end past it goes ``LAST_TRY`` s before the bound instead), and
  returns the messages still unacked then, for the runtime to release: it reports only those,
  never the failures of earlier (logged when they happened).
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING

import anyio

from aiorocket._log import get_logger
from aiorocket.errors import RocketMQError

if TYPE_CHECKING:
    from aiorocket.consumer.pop.source import AckRefusals, PopSource
    from aiorocket.received import PopMessage

__all__ = [
    "ACK_QUEUED",
    "ACK_SENDING",
    "FIRST_BACKOFF",
    "MAX_BACKOFF",
    "MAX_ENTRIES",
    "AckBatcher",
    "ack_backoff",
    "until_due",
]

MAX_ENTRIES = 64
#: seconds before the first retry of a failed ack; doubled per failure up to MAX_BACKOFF
FIRST_BACKOFF = 0.1
MAX_BACKOFF = 5.0
#: seconds before the close's bound of its last try of the acks still refused (at most a
#: quarter of the bound): room for an answer of a broker that is merely slow
LAST_TRY = 1.0
#: ``PopMessage._ack_state``: the ack is queued (or waits for a retry) / in a request
ACK_QUEUED, ACK_SENDING = 1, 2

Release = Callable[["list[PopMessage]"], Awaitable[object]]


def ack_backoff(tries: int) -> float:
    """Seconds before the next request of an ack whose ``tries`` requests failed."""
    return min(MAX_BACKOFF, FIRST_BACKOFF * 2.0 ** max(tries - 1, 0))


def until_due(whens: Iterable[float]) -> float:
    """Seconds until the earliest of ``whens`` (``time.monotonic()``) is due (inf: none)."""
    return max(0.0, min(whens, default=float("inf")) - time.monotonic())


class AckBatcher:
    """Queues acks and sends them in batches per topic.

    Parameters
    ----------
    source:
        The pop session that sends the acks.
    delay:
        Seconds the flusher waits after the first queued ack, so more share a request.
    release:
        ``release(messages)``: make messages whose ack was refused for good visible
        again (the settler's release); None: left to their invisible time.
    forget:
        ``forget(message)``: let go of a message whose ack is done with (answered,
        refused for good, or left to the close): ``Renewer.forget``.
    """

    def __init__(
        self,
        source: PopSource,
        delay: float,
        release: Release | None = None,
        forget: Callable[[PopMessage], None] | None = None,
    ) -> None:
        self.source = source
        self.delay = delay
        self.release = release
        self._forget = forget
        self._pending: dict[str, list[PopMessage]] = defaultdict(list)
        #: acks waiting for their retry: (when, topic, messages)
        self._retrying: list[tuple[float, str, list[PopMessage]]] = []
        self._wake = anyio.Event()
        #: acks the server confirmed / refused for good / requests failed and retried,
        #: since the start
        self.acked = 0
        self.failed = 0
        self.retried = 0
        #: one flush at a time: the close's last flush waits for the flusher's request
        #: in flight (else it would find nothing queued, report nothing unsent, and the
        #: flusher's request would then be cancelled with the task group: acks lost)
        self._flushing = anyio.Lock()
        #: the acks of the request being sent
        self._in_flight: list[PopMessage] = []
        self.log = get_logger("consumer.acks", group=source.group)

    def add(self, msg: PopMessage) -> None:
        msg._ack_state = ACK_QUEUED
        self._pending[msg.topic].append(msg)
        self._wake.set()

    def _done(self, msgs: Iterable[PopMessage]) -> None:
        """The acks of ``msgs`` are done with: the renewer lets go of them."""
        forget = self._forget
        for m in msgs:
            m._ack_state = 0
            if forget is not None:
                forget(m)

    @property
    def pending(self) -> int:
        """Acks not sent yet: queued, waiting for a retry, or in a request."""
        return (
            sum(len(v) for v in self._pending.values())
            + sum(len(m) for _, _, m in self._retrying)
            + len(self._in_flight)
        )

    async def run(self) -> None:
        """The flusher task (owned by the consumer's task group)."""
        while True:
            with anyio.move_on_after(self._next_retry()):
                await self._wake.wait()
            self._wake = anyio.Event()
            if self.delay and self._pending:
                await anyio.sleep(self.delay)
            await self.flush()

    def _next_retry(self) -> float:
        """Seconds until the earliest retry is due (inf: none waits)."""
        return until_due(when for when, _, _ in self._retrying)

    def _requeue(self, *, all_: bool = False) -> None:
        """Queue again the retries that are due (``all_``: every one)."""
        now = time.monotonic()
        keep: list[tuple[float, str, list[PopMessage]]] = []
        for entry in self._retrying:
            when, topic, msgs = entry
            if all_ or when <= now:
                self._pending[topic].extend(msgs)
            else:
                keep.append(entry)
        self._retrying = keep

    async def flush(self, *, all_retries: bool = False) -> None:
        """Send everything queued now and the retries due, one request per topic and
        chunk (``all_retries``: every retry, due or not)."""
        async with self._flushing:
            self._requeue(all_=all_retries)
            await self._flush()

    async def send_owed(self) -> None:
        """Send every ack owed now, the retries too without waiting for their backoff:
        a release of everything the server gave this client comes next (gRPC's
        termination after a broken receive), which would free a message whose ack is
        still owed. Cut short by its caller's bound, what it did not send is queued
        again (``_flush``) and the flusher woken for it: nothing else may wake it."""
        try:
            await self.flush(all_retries=True)
        finally:
            if self._pending:
                self._wake.set()

    async def _flush(self) -> None:
        refused: list[PopMessage] = []
        try:
            while self._pending:
                topic = next(iter(self._pending))
                queued = self._pending[topic]
                chunk = queued[:MAX_ENTRIES]
                del queued[:MAX_ENTRIES]
                if not queued:
                    del self._pending[topic]
                try:
                    refusals = await self._ack(topic, chunk)
                except RocketMQError as err:
                    refusals = [(m, err) for m in chunk]  # none is known to be acked
                except BaseException:
                    # Cancelled (or worse) mid-request: nothing is known to be acked;
                    # the entries go back to the front so the close sends them.
                    for m in chunk:
                        m._ack_state = ACK_QUEUED
                    self._pending[topic][:0] = chunk
                    raise
                self.acked += len(chunk) - len(refusals)
                if refusals:
                    failed = {m for m, _ in refusals}
                    self._done(m for m in chunk if m not in failed)
                    refused += self._failed(topic, refusals)
                else:
                    self._done(chunk)
        finally:
            # Even when a later request of this flush is cut (the close's bound): the
            # refused messages are in no list the close reads, so released here or never
            # (``release`` is shielded and bounded).
            try:
                if refused and self.release is not None:
                    await self.release(refused)
            finally:
                self._done(refused)

    def _failed(self, topic: str, refusals: AckRefusals) -> list[PopMessage]:
        """Schedule the retriable refusals again; returns the others (refused for good)."""
        again = [m for m, err in refusals if err.retriable]
        final = [m for m, err in refusals if not err.retriable]
        errors = sorted({str(err) for _, err in refusals})
        if again:
            tries = 0
            for m in again:  # one more request each, counted once
                m._ack_tries += 1
                m._ack_state = ACK_QUEUED  # renewed again while it waits
                tries = max(tries, m._ack_tries)
            self.retried += len(again)
            wait = ack_backoff(tries)
            self._retrying.append((time.monotonic() + wait, topic, again))
            self.log.warning("ack_retried", topic=topic, n=len(again), tries=tries,
                             retry_in=wait, errors=errors)  # fmt: skip
        if final:
            self.failed += len(final)
            self.log.warning(
                "ack_refused", topic=topic, n=len(final), errors=errors,
                hint="the server refused the ack for good: the message is released and "
                "delivered again",
            )  # fmt: skip
        return final

    async def close(self, timeout: float) -> list[PopMessage]:
        """The last flushes (shielded, at most ``timeout`` s): what is queued, then the
        retries, until none is left or the time is up; returns the messages still
        unacked (for the runtime to release), and logs how many."""
        # A retry whose backoff would end past the bound is tried once more just before
        # it instead (LAST_TRY s): a message the application handled is acked if at all
        # possible (a busy broker may have recovered by then), not released and
        # delivered again because the backoff outgrew what was left of the close.
        last_try = time.monotonic() + timeout - min(LAST_TRY, timeout / 4)
        with anyio.move_on_after(timeout, shield=True):
            await self.flush(all_retries=True)
            while self._retrying:
                wait = self._next_retry()
                now = time.monotonic()
                if now + wait <= last_try:
                    await anyio.sleep(wait)
                    await self.flush()
                elif now < last_try:
                    await anyio.sleep(last_try - now)
                    await self.flush(all_retries=True)
                else:  # the last try was made: nothing more fits in the bound
                    break
        unacked = [m for msgs in self._pending.values() for m in msgs]
        unacked += [m for _, _, msgs in self._retrying for m in msgs]
        unacked += self._in_flight  # the flusher's, if the bound cut the wait for it
        self._done(unacked)  # released by the runtime, not renewed
        if unacked:
            self.log.warning(
                "acks_not_delivered", n=len(unacked),
                hint="those messages are released: delivered again",
            )  # fmt: skip
        return unacked

    async def _ack(self, topic: str, msgs: list[PopMessage]) -> AckRefusals:
        for m in msgs:  # first: no renewal starts while the others' are awaited
            m._ack_state = ACK_SENDING
        for m in msgs:
            await m.renewed()
        self._in_flight = msgs
        try:
            return await self.source.ack(topic, msgs)
        finally:
            self._in_flight = []
