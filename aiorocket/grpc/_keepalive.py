"""Abandoning a half-open HTTP/2 connection to the Proxy: PING with a timeout.

A connection whose peer stopped answering without closing (a NAT entry evicted, a frozen
host, a cable pulled) stays open on our side until the kernel gives up, minutes later;
every call on it times out, and grpclib opens no new connection while the old one looks
alive. The remoting side closes a connection on which a request timed out; here
``Keepalive`` watches each connection instead:

* while a call is open on it (any call: a client's Telemetry stream is always open) and
  nothing has come from the Proxy for ``interval`` seconds, it sends one HTTP/2 PING;
* if neither its ACK nor anything else arrives within ``timeout`` seconds, it aborts the
  connection: the calls on it fail at once (``ProxyUnavailableError``) and the next call
  opens a new connection.

So a stalled connection is abandoned ``interval + timeout`` (2-2.25 s by default) after
it went silent, like the remoting side's request timeout; a call that times out sends a
PING at once (``Keepalive.probe``). One PING per silence, and a silence ends only with
response headers or data from the Proxy (not with the PING's ACK): a gRPC server counts
the PINGs that come without such frames in between as strikes and hangs up after the
third (``too_many_pings``; grpc-java's KeepAliveEnforcer), so a long poll or an idle
session costs one PING per answer at most, never a strike past the first.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from dataclasses import dataclass

from aiorocket._log import get_logger

__all__ = ["DEFAULT_KEEPALIVE", "Keepalive", "KeepaliveSettings"]

log = get_logger("grpc")


@dataclass(frozen=True, slots=True)
class KeepaliveSettings:
    """``interval``: silence under an open call before a PING; ``timeout``: how long the
    PING may go unanswered before the connection is abandoned (seconds)."""

    interval: float = 1.0
    timeout: float = 1.0


#: about the remoting side's bound: a stuck connection is replaced in ~2 s
DEFAULT_KEEPALIVE = KeepaliveSettings()


class Keepalive:
    """The watchdog of one connection (see the module docstring).

    Parameters
    ----------
    settings:
        interval and timeout.
    busy:
        whether a call is open (on any connection of the transport: only the current
        one carries calls).
    ping:
        sends a PING with these 8 bytes (and flushes).
    abort:
        drops the connection at once (no FIN handshake to wait for).
    """

    def __init__(
        self,
        settings: KeepaliveSettings,
        busy: Callable[[], bool],
        ping: Callable[[bytes], None],
        abort: Callable[[], None],
        *,
        peer: str,
    ) -> None:
        self._settings = settings
        self._busy = busy
        self._ping = ping
        self._abort = abort
        self._peer = peer
        self._loop = asyncio.get_running_loop()
        self._heard = self._loop.time()
        self._pinged = False  # a PING went during this silence
        self._deadline: asyncio.TimerHandle | None = None
        # Checked four times per interval: a silence is noticed within 1.25 intervals.
        self._period = settings.interval / 4
        self._tick: asyncio.TimerHandle | None = self._loop.call_later(self._period, self._check)
        #: PINGs sent and connections abandoned (for tests and logs)
        self.pings = 0
        self.abandoned = False

    def heard(self, *, answer: bool) -> None:
        """Frames came: the peer is alive. ``answer``: response headers or data among
        them, which end a silence (the server forgives a PING after those only)."""
        if answer:
            self._heard = self._loop.time()
            self._pinged = False
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def probe(self) -> None:
        """A call on the connection timed out: PING now (unless one is out already)."""
        if self._deadline is None and self._tick is not None:
            self._send_ping()

    def _send_ping(self) -> None:
        self._pinged = True
        self.pings += 1
        self._ping(os.urandom(8))
        self._deadline = self._loop.call_later(self._settings.timeout, self._dead)

    def _check(self) -> None:
        now = self._loop.time()
        interval = self._settings.interval
        if not self._busy():
            self._heard = now  # silence counts only while a call is open
        elif not self._pinged and now - self._heard >= interval:
            self._send_ping()
        self._tick = self._loop.call_later(self._period, self._check)

    def _dead(self) -> None:
        self.abandoned = True
        silent = round(self._loop.time() - self._heard, 3)
        log.warning("grpc_connection_abandoned", peer=self._peer, silent_s=silent,
                    ping_timeout_s=self._settings.timeout)  # fmt: skip
        self.stop()
        self._abort()

    def stop(self) -> None:
        for handle in (self._tick, self._deadline):
            if handle is not None:
                handle.cancel()
        self._tick = self._deadline = None
