"""A lite consumer's lite subscriptions (RocketMQ 5.5, RIP-83), shared by both transports.

A lite consumer is bound to one parent topic of message type LITE (its group's
``lite.bind.topic``) and subscribes to any number of its lite topics at run time. The
server (each broker of the parent topic over remoting, the Proxy over gRPC) keeps the
subscriptions per client: a ``PopSource`` sends them (``PopSource.sync_lite``) and
pops only the subscribed lite topics' messages.

What is kept here, the same for both transports: the set of lite topics, the checks
before anything is sent (name, quota), and the order of the updates: one change at a
time, so a PARTIAL_REMOVE never overtakes the PARTIAL_ADD of the same topic; the set
changes only once every server took the change. The runtime re-sends the whole set
every ``RESYNC_INTERVAL`` (COMPLETE_ADD), as the Java client does: a server that
restarted or dropped this client's subscriptions (its check of idle clients) gets them
back. A source that knows when its server dropped them asks for the resync at once
(``resync_soon``): the 5.5.0 Proxy drops a client's lite subscriptions when its session
stream is cut (a broken connection, a Proxy restart, a reconnect), and may do so only
after the client's resync on its new connection: the gRPC source then asks for the
resync again a few times shortly after (``RESYNC_AFTER_RECONNECT``).
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Collection, Sequence
from dataclasses import dataclass
from typing import ClassVar, Protocol

import anyio

from aiorocket._log import Logger
from aiorocket._validate import LITE_TOPIC_MAX_LENGTH, check_lite_topic
from aiorocket.errors import ConfigError, LiteQuotaExceededError, RocketMQError

__all__ = ["RESYNC_AFTER_RECONNECT", "RESYNC_INTERVAL", "RESYNC_RETRY", "LiteAction",
           "LiteOffset", "LiteSubscriptions"]  # fmt: skip

#: seconds between two COMPLETE_ADD of the whole set (the Java client: 30 s)
RESYNC_INTERVAL = 30.0
#: seconds before the first retry of a failed resync (then doubling, up to the interval)
RESYNC_RETRY = 1.0
#: seconds after a reconnect at which the gRPC source's whole set is sent again (besides
#: at once). The 5.5.0 Proxy drops a client's lite subscriptions when it handles the END
#: of its old Telemetry stream (ClientActivity.handleGrpcCancel ->
#: GrpcClientSettingsManager.offlineClientLiteSubscription: a COMPLETE_REMOVE by client
#: id, sent to the brokers asynchronously with a 2 s timeout), and nothing orders that
#: after the new stream's settings and our COMPLETE_ADD: on a cold or loaded Proxy the
#: removal lands after our resync, and the consumer would be served nothing until the
#: next periodic one (30 s). Measured: the brokers lost them 0.04-0.32 s after a cold
#: Proxy saw the old connection end (tests/integration/test_lite_grpc.py, loaded
#: machine), so 1 s covers the usual lag, 3 s the request's 2 s timeout on top, 7 s a
#: badly loaded Proxy; each is one COMPLETE_ADD per reconnect.
RESYNC_AFTER_RECONNECT = (1.0, 3.0, 7.0)


class LiteAction(enum.Enum):
    """What a lite subscription update does (the broker's LiteSubscriptionAction; the
    gRPC transport maps it to the proto's enum)."""

    #: add these lite topics
    PARTIAL_ADD = "PARTIAL_ADD"
    #: remove these lite topics
    PARTIAL_REMOVE = "PARTIAL_REMOVE"
    #: the client's subscriptions are exactly these
    COMPLETE_ADD = "COMPLETE_ADD"
    #: the client has none any more
    COMPLETE_REMOVE = "COMPLETE_REMOVE"


@dataclass(frozen=True, slots=True)
class LiteOffset:
    """Where a new lite subscription starts reading its lite topic (the official
    clients' ``OffsetOption``). Without one, the broker starts where the group left the
    lite topic; for one the group never read, the 5.5.0 broker starts at its first
    message still in memory, else at its end.

    ``LiteOffset.LAST`` (where the group left it), ``LiteOffset.EARLIEST``,
    ``LiteOffset.LATEST``, ``LiteOffset.at(offset)``, ``LiteOffset.tail(n)`` (``n``
    messages before the group's committed offset; nothing for a lite topic the group
    never read) and ``LiteOffset.since(timestamp_ms)`` (ignored by the 5.5.0 broker).
    """

    #: POLICY, OFFSET, TAIL_N or TIMESTAMP (the broker's OffsetOption.Type)
    kind: str
    value: int

    LAST: ClassVar[LiteOffset]
    EARLIEST: ClassVar[LiteOffset]
    LATEST: ClassVar[LiteOffset]

    def __post_init__(self) -> None:
        if self.kind not in ("POLICY", "OFFSET", "TAIL_N", "TIMESTAMP"):
            raise ConfigError(f"unknown lite offset kind {self.kind!r}")
        if type(self.value) is not int or self.value < 0:
            raise ConfigError(f"a lite offset's value must be an int >= 0, not {self.value!r}")

    @classmethod
    def at(cls, offset: int) -> LiteOffset:
        """From this offset of the lite topic's queue."""
        return cls("OFFSET", offset)

    @classmethod
    def tail(cls, n: int) -> LiteOffset:
        """``n`` messages before the group's committed offset of the lite topic."""
        return cls("TAIL_N", n)

    @classmethod
    def since(cls, timestamp_ms: int) -> LiteOffset:
        """The messages stored from this time (epoch milliseconds; the 5.5.0 broker
        ignores it)."""
        return cls("TIMESTAMP", timestamp_ms)


# The broker's policy values (OffsetOption.POLICY_LAST/MIN/MAX_VALUE).
LiteOffset.LAST = LiteOffset("POLICY", 0)
LiteOffset.EARLIEST = LiteOffset("POLICY", 1)
LiteOffset.LATEST = LiteOffset("POLICY", 2)


class Sync(Protocol):
    """Sends one update to every server: ``LiteSource.sync_lite``."""

    def __call__(
        self, action: LiteAction, lite_topics: Collection[str], *, offset: LiteOffset | None = None
    ) -> Awaitable[None]: ...


class LiteSubscriptions:
    """The lite topics one lite consumer is subscribed to.

    Parameters
    ----------
    bind_topic:
        The parent topic (as the server names it: within the namespace on remoting).
    log:
        The consumer's logger.
    """

    def __init__(self, bind_topic: str, log: Logger) -> None:
        self.bind_topic = bind_topic
        self.log = log
        self._topics: set[str] = set()
        #: the server's per-client quota where it told us (gRPC settings), else None
        self.quota: int | None = None
        #: the longest lite topic the server takes (gRPC settings: max_lite_topic_size)
        self.max_length = LITE_TOPIC_MAX_LENGTH
        self._sync: Sync | None = None
        self._lock = anyio.Lock()
        #: start offsets of subscriptions made before the start, sent after its resync
        self._offsets: dict[str, LiteOffset] = {}
        #: lite topics whose PARTIAL_ADD is being sent: whether a notice dropped them
        self._adding: dict[str, bool] = {}
        #: set by ``resync_soon``: ``run`` resyncs now instead of at its interval
        self._soon = anyio.Event()
        #: the seconds after it at which ``resync_soon`` asked for the resync again
        self._again: tuple[float, ...] = ()

    @property
    def topics(self) -> frozenset[str]:
        return frozenset(self._topics)

    @property
    def attached(self) -> bool:
        """A running source sends the changes (else they wait for the start)."""
        return self._sync is not None

    def attach(self, sync: Sync | None) -> None:
        """Send changes with ``sync`` from now on (None: the source is gone)."""
        self._sync = sync

    async def detach(self) -> None:
        """The source is going away: send nothing more, and return once the change
        being sent (a periodic resync, a subscription) is answered, so that the close's
        COMPLETE_REMOVE, sent after this, is applied after it: sent alongside, a server
        that applies requests in a pool may apply the add last and keep the closing
        client subscribed."""
        self._sync = None
        async with self._lock:
            pass

    def _check_quota(self, extra: int) -> None:
        if self.quota is not None and self.quota >= 0 and len(self._topics) + extra > self.quota:
            raise LiteQuotaExceededError(
                f"{len(self._topics)} lite subscriptions of {self.bind_topic!r}: the quota "
                f"of {self.quota} per client allows no more"
            )

    async def subscribe(self, lite_topic: str, offset: LiteOffset | None = None) -> None:
        """Add ``lite_topic`` (from ``offset``); sent at once when attached, else at the
        start. A subscribed lite topic stays as it is (as with the official clients)."""
        check_lite_topic(lite_topic, self.max_length)
        async with self._lock:
            if lite_topic in self._topics:
                return
            self._check_quota(1)
            if self._sync is not None:
                # A server's notice that drops the lite topic may come while its add is
                # answered (an exclusive group: another member took it right after us):
                # it is noted, and the lite topic is then not added.
                self._adding[lite_topic] = False
                try:
                    await self._send(LiteAction.PARTIAL_ADD, {lite_topic}, offset)
                finally:
                    dropped = self._adding.pop(lite_topic)
                if dropped:
                    self.log.info("lite_unsubscribed_by_server", lite_topic=lite_topic,
                                  topic=self.bind_topic, during="subscribe")  # fmt: skip
                    return
            elif offset is not None:
                self._offsets[lite_topic] = offset
            self._topics.add(lite_topic)
        self.log.info("lite_subscribed", lite_topic=lite_topic, topic=self.bind_topic)

    async def unsubscribe(self, lite_topic: str) -> None:
        """Remove ``lite_topic``; messages of it already received are still delivered."""
        async with self._lock:
            if lite_topic not in self._topics:
                return
            if self._sync is not None:
                await self._send(LiteAction.PARTIAL_REMOVE, {lite_topic})
            self._topics.discard(lite_topic)
            self._offsets.pop(lite_topic, None)
        self.log.info("lite_unsubscribed", lite_topic=lite_topic, topic=self.bind_topic)

    async def resync(self) -> None:
        """Send the whole set (COMPLETE_ADD): at the start and every RESYNC_INTERVAL;
        then the start offsets given before the start, each once."""
        async with self._lock:
            if self._sync is None:
                return
            # Those subscribed before the start met no quota yet (the source learns it
            # when it opens); the servers take any number (5.5.0).
            self._check_quota(0)
            await self._send(LiteAction.COMPLETE_ADD, set(self._topics))
            for lite_topic, offset in list(self._offsets.items()):
                if self._sync is None:  # detached meanwhile (the close): the rest not sent
                    return
                await self._send(LiteAction.PARTIAL_ADD, {lite_topic}, offset)
                self._offsets.pop(lite_topic, None)  # a notice may have dropped it meanwhile

    async def _send(
        self, action: LiteAction, topics: Collection[str], offset: LiteOffset | None = None
    ) -> None:
        assert self._sync is not None
        if offset is None:
            await self._sync(action, topics)
        else:
            await self._sync(action, topics, offset=offset)

    def on_unsubscribed(self, lite_topic: str) -> None:
        """The server dropped ``lite_topic`` for this client (its notice): forget it (one
        being subscribed is not added)."""
        if lite_topic in self._adding:
            self._adding[lite_topic] = True
        if lite_topic in self._topics:
            self._topics.discard(lite_topic)
            self._offsets.pop(lite_topic, None)
            self.log.info("lite_unsubscribed_by_server", lite_topic=lite_topic,
                          topic=self.bind_topic)  # fmt: skip

    def resync_soon(self, again: Sequence[float] = ()) -> None:
        """The server lost this client's subscriptions: ``run`` sends them now, and again
        at each of ``again`` seconds from now (a server that may drop them late:
        ``RESYNC_AFTER_RECONNECT``); a later call replaces those times."""
        self._again = tuple(sorted(again))
        self._soon.set()

    async def run(self) -> None:
        """Re-send the whole set every RESYNC_INTERVAL (at once after ``resync_soon``,
        and at the times it asked for again), until cancelled. A failed resync is logged
        and tried again sooner (RESYNC_RETRY, doubling up to the interval); it never ends
        the loop, so it never takes the consumer (and the application's code around it)
        down."""
        delay = RESYNC_INTERVAL
        failures = 0
        #: the event-loop times at which ``resync_soon`` asked for the resync again
        due: list[float] = []
        while True:
            with anyio.move_on_after(delay):
                await self._soon.wait()
            if self._soon.is_set():
                self._soon = anyio.Event()
                now = anyio.current_time()
                due = [now + after for after in self._again]
            try:
                await self.resync()
            except Exception as err:  # any failure: logged, tried again
                failures += 1
                delay = min(RESYNC_INTERVAL, RESYNC_RETRY * 2 ** (failures - 1))
                self.log.warning(
                    "lite_resync_failed", error=str(err), error_type=type(err).__name__,
                    topic=self.bind_topic, failures=failures, retry_in=delay,
                    exc_info=not isinstance(err, RocketMQError),
                )  # fmt: skip
            else:
                if failures:
                    self.log.info("lite_resynced", topic=self.bind_topic, failures=failures)
                failures, delay = 0, RESYNC_INTERVAL
            now = anyio.current_time()
            due = [at for at in due if at > now]  # those passed: this resync sent them
            if due:
                delay = min(delay, due[0] - now)
