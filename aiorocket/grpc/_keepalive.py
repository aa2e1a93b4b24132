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

* a silence that goes on gets a second PING once a call that expects a prompt answer
  (any unary call: an ack, a send, a heartbeat) has waited ``interval`` for it, and at
  least ``interval`` has passed since the first PING.

A silence ends only with response headers or data from the Proxy (not with a PING's
ACK), and the budget is two PINGs per silence: a gRPC server counts the PINGs that come
without such frames in between as strikes and hangs up at the third (grpc-java's
KeepAliveEnforcer, MAX_PING_STRIKES = 2; on a connection younger than its
``permitKeepAliveTime``, 5 min by default, every PING is a strike). Measured on the
5.5.0 Proxy: PINGs 1 s apart during a parked receive, and the third closed the
connection (GOAWAY ``too_many_pings``). So a PING cannot go every ``interval`` of a
long silence; a call that waits for an answer is what earns the second.

Bounds: a connection that stalls while a unary call waits is abandoned
``interval + timeout`` (2-2.25 s by default) after the later of the call's start and
the first PING; a call that times out sends a PING at once (``Keepalive.probe``,
within the same budget). While only long polls wait, the next heartbeat (every 10 s)
is such a call: a stall then costs up to the heartbeat interval plus 2 s.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from dataclasses import dataclass

from aiorocket._log import get_logger

__all__ = ["DEFAULT_KEEPALIVE", "PINGS_PER_SILENCE", "Keepalive", "KeepaliveSettings"]

log = get_logger("grpc")

#: PINGs a silence may get: a grpc-java server hangs up at the third (see above)
PINGS_PER_SILENCE = 2


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
    waiting_since:
        the loop time the oldest open call that expects a prompt answer (unary) was
        started, None when there is none.
    ping:
        sends a PING with these 8 bytes (and flushes).
    abort:
        drops the connection at once (no FIN handshake to wait for).
    abandoned:
        called once this keepalive abandoned its connection (the transport then looks
        at its other connection to the endpoint: ``sibling_abandoned``).
    """

    def __init__(
        self,
        settings: KeepaliveSettings,
        busy: Callable[[], bool],
        ping: Callable[[bytes], None],
        abort: Callable[[], None],
        *,
        peer: str,
        waiting_since: Callable[[], float | None] = lambda: None,
        abandoned: Callable[[], None] = lambda: None,
    ) -> None:
        self._settings = settings
        self._abandoned = abandoned
        self._busy = busy
        self._waiting_since = waiting_since
        self._ping = ping
        self._abort = abort
        self._peer = peer
        self._loop = asyncio.get_running_loop()
        self._heard = self._loop.time()
        self._pinged = 0  # PINGs sent during this silence
        self._pinged_at = 0.0  # when the last one went
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
            self._pinged = 0
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def probe(self) -> None:
        """A call on the connection timed out: PING now (unless one is out already, or
        the silence has had its PINGs)."""
        if self._deadline is None and self._tick is not None and (
            self._pinged < PINGS_PER_SILENCE
        ):
            self._send_ping()

    def sibling_abandoned(self) -> None:
        """The client's other connection to this endpoint went unanswered: the path
        both take may be dead (a NAT entry, a frozen host). If this one's PING is out
        unanswered too, it is abandoned now rather than at its own deadline (a call
        would otherwise start on it meanwhile); if none is out, one goes now
        (``probe``)."""
        if self._tick is None:
            return  # stopped: the connection is gone already
        if self._deadline is not None:
            self._dead()
        else:
            self.probe()

    def _send_ping(self) -> None:
        self._pinged += 1
        self._pinged_at = self._loop.time()
        self.pings += 1
        self._ping(os.urandom(8))
        self._deadline = self._loop.call_later(self._settings.timeout, self._dead)

    def _check(self) -> None:
        now = self._loop.time()
        interval = self._settings.interval
        if not self._busy():
            self._heard = now  # silence counts only while a call is open
        elif not self._pinged:
            if now - self._heard >= interval:
                self._send_ping()
        elif self._pinged < PINGS_PER_SILENCE and self._deadline is None:
            # The first PING was answered, and the silence goes on: a call that waits
            # for a prompt answer gets the second after ``interval``.
            since = self._waiting_since()
            if since is not None and now - max(since, self._pinged_at) >= interval:
                self._send_ping()
        self._tick = self._loop.call_later(self._period, self._check)

    def _dead(self) -> None:
        self.abandoned = True
        silent = round(self._loop.time() - self._heard, 3)
        log.warning("grpc_connection_abandoned", peer=self._peer, silent_s=silent,
                    ping_timeout_s=self._settings.timeout)  # fmt: skip
        self.stop()
        self._abort()
        self._abandoned()

    def stop(self) -> None:
        for handle in (self._tick, self._deadline):
            if handle is not None:
                handle.cancel()
        self._tick = self._deadline = None
