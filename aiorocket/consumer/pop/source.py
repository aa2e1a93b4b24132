"""What the pop runtime asks of a transport: a ``PopSource``.

The receivers, the renewer, the acks and the settler of ``aiorocket.consumer.pop`` are
written against this interface only; a 5.x Proxy over gRPC
(``aiorocket.consumer.pop.grpc_source``) and the brokers over remoting
(``aiorocket.consumer.pop.remoting_source``, ``aiorocket.consumer.pop.remoting_lite``)
implement it.

The error contract (every source; ``tests/unit/test_pop_source_contract.py`` checks it):

* A method that fails raises one ``RocketMQError`` (``aiorocket.errors``), never a bare
  ``False``, a count, an ``ExceptionGroup`` or a transport's own exception. A server's
  error answer is a typed error too (``error_for_response``: ``BrokerResponseError``
  and its subclasses; the Proxy: ``ProxyResponseError``), and so is a failed request
  (``ConnectionClosedError`` / ``ProxyUnavailableError``, ``RequestTimeoutError``,
  ``NoRouteError``).
* ``err.retriable`` says whether the same call may succeed if made again unchanged (a
  dropped connection, a timeout, SYSTEM_BUSY / SYSTEM_ERROR, the Proxy's
  INTERNAL_ERROR / TOO_MANY_REQUESTS ...); not retriable: the server refused it for good
  (MESSAGE_ILLEGAL, NO_MESSAGE, INVALID_RECEIPT_HANDLE, an ACL refusal ...).
* ``ack`` settles many messages in one call, so it reports per message: it *returns*
  the messages the server refused, each with its typed error (empty: all acked), and
  raises only when nothing of the call is known to be acked. The runtime treats a
  raised error as that error for every message of the call.

What the runtime does with each error:

=====================  ===============================  ================================
method                 retriable                        not retriable
=====================  ===============================  ================================
``receive``            logged, the loop backs off       the same (the loop keeps
                       (0.4 s doubling to 10 s; reset,  polling: a route may come back)
                       and cut short, by a new
                       connection: ``new_connection``)
``ack`` (per message)  sent again, backing off (up to   logged and counted; the message
                       ``acks.MAX_BACKOFF``) while the  is released (made visible) so it
                       consumer runs; at the close      is delivered again at once
                       whatever is still unacked is     rather than held by a renewing
                       released                         server
``change_invisible``   renewer: again at the next       ``lost(err)``: the delivery is
                       sweep; settler: ``TRIES``        gone (someone else's now): the
                       requests; a nack that still      message is settled locally;
                       fails stays held and is sent     else logged, the message comes
                       again with the acks' backoff     back after its invisible time
                       while the consumer runs, and is
                       released at the close
``dead_letter``        as a nack's ``change_invisible`` logged; the message comes back
                                                        and is dead-lettered again
``sync_lite``          ``subscribe_lite`` raises it     the same (over the quota:
                       (one error for all the servers:  ``LiteQuotaExceededError``);
                       the quota's refusal first, else  a periodic resync: as
                       one not retriable, else the      retriable
                       first); a periodic resync:
                       logged, sent again after
                       ``lite.RESYNC_RETRY`` doubling
                       to ``lite.RESYNC_INTERVAL``
=====================  ===============================  ================================

A remoting pull consumer has no ``PopSource``: its requests go through
``aiorocket.client.broker`` and raise the same typed errors (``error_for_response``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection
from typing import TYPE_CHECKING, Protocol

from aiorocket._trace import TraceSender
from aiorocket.errors import RocketMQError
from aiorocket.received import PopMessage

if TYPE_CHECKING:
    from aiorocket.consumer.pop.lite import LiteAction, LiteOffset

__all__ = ["AckRefusals", "Early", "LiteSource", "PopSource"]

#: what ``PopSource.ack`` returns: each message the server refused, with its error
AckRefusals = list[tuple[PopMessage, RocketMQError]]
#: what a receive gives its first messages to before it ends (``PopSource.receive``)
Early = Callable[[list[PopMessage]], None]


class PopSource(Protocol):
    """A session that pops, acks and postpones one group's messages; its errors follow
    the contract of the module docstring."""

    group: str
    #: the server keeps received messages invisible until they are settled (the
    #: Proxy's auto-renew); else the client's renewer does
    server_renews: bool
    #: messages are handed out in order per message group / queue (orderly delivery)
    fifo: bool
    #: deliveries before the dead-letter queue, by the server's settings (0: unknown)
    server_max_attempts: int
    #: ``dead_letter`` settles the message too (gRPC: the Proxy acks it); else the
    #: runtime acks it after (remoting: sent to the DLQ, then acked like a success)
    dead_letter_settles: bool

    @property
    def client_id(self) -> str: ...

    def trace_sender(self) -> TraceSender:
        """Where this session stores trace messages (``aiorocket._trace``), once open."""

    @property
    def receivers(self) -> int:
        """Receive loops to run at once."""

    @property
    def behind_receivers(self) -> int:
        """Receive loops added while the consumer is behind (its receives come back
        full): ``aiorocket.consumer.pop.receiver``."""

    def receivable_queues(self) -> int:
        """Queues of the subscribed topics this member receives from now (over remoting
        the readable queues of the cached routes, over gRPC the Proxy's current
        assignments): 0 means nothing is consumed (a missing topic, no broker)."""

    @property
    def connection(self) -> int:
        """Which connection of the session to the server is up: changes when a new one
        is (over gRPC: the Proxy took this client's settings on a new telemetry stream,
        after a Proxy restart or a lost connection); over remoting, pops lost with their
        connection after a request timeout or more (the next pop goes on a new one)."""

    async def new_connection(self, since: int) -> None:
        """Return once ``connection`` is no longer ``since``. A
        receive loop's backoff ends there: what failed on the old connection says
        nothing of the new one."""

    async def run(self) -> None:
        """Background work of the session (heartbeats), until cancelled; may return."""

    async def open(self) -> None:
        """Connect, and learn the server's settings (FIFO, retry policy)."""

    async def close(self) -> None: ...

    def backoff(self, attempt: int) -> float:
        """Seconds before the retry of failed delivery ``attempt``."""

    def retry_pause(self, attempt: int) -> float:
        """Orderly: seconds a queue pauses before failed ``attempt`` is retried in place."""

    async def receive(
        self, max_messages: int, invisible: float, early: Early | None = None
    ) -> list[PopMessage]:
        """Up to ``max_messages``, invisible to the group for ``invisible`` seconds;
        long-polls, and returns ``[]`` when none arrived. A source whose answer
        arrives in pieces (a gRPC stream) may give its first messages to ``early``
        while it still reads the rest: in order, each once, synchronously, a prefix of
        what it returns; what it gave is the caller's even when the receive then
        fails or is cancelled."""

    async def ack(self, topic: str, messages: list[PopMessage]) -> AckRefusals:
        """Ack ``messages`` of ``topic`` (in as few requests as the server allows);
        returns the messages the server refused, each with its error; raises when none
        is known to be acked (the error then stands for every message)."""

    async def change_invisible(self, msg: PopMessage, seconds: float) -> None:
        """``msg`` becomes visible ``seconds`` from now; its receipt handle is replaced."""

    async def dead_letter(self, msg: PopMessage, *, attempt: int, max_attempts: int) -> None:
        """Move ``msg`` to the group's dead-letter queue (``%DLQ%<group>``); settled
        too when ``dead_letter_settles``. Raised: ``msg`` is not known to be moved."""

    def acks_before_release(self, send: Callable[[], Awaitable[None]]) -> None:
        """``send()`` sends the acks the consumer owes: the source awaits it before it
        ends the server's hold on every message it gave this client (gRPC: the
        NotifyClientTermination after a broken receive, ``Session.release_held``),
        which would hand out again a message whose handler succeeded and whose ack is
        still owed. A source that never releases so (remoting) ignores it."""

    def lost(self, err: RocketMQError) -> bool:
        """A renewal failed with ``err`` because the server no longer knows this
        delivery (the message is someone else's now), not for a transient reason
        (always a non-retriable ``err``)."""


class LiteSource(PopSource, Protocol):
    """A ``PopSource`` of a lite consumer (``ConsumerState.lite`` is set): it pops the
    subscribed lite topics of ``state.lite.bind_topic``, FIFO per lite topic (each
    message's ``message_group`` is its lite topic), and settles them with their lite
    topic (``msg.lite_topic``)."""

    async def sync_lite(
        self, action: LiteAction, lite_topics: Collection[str], *, offset: LiteOffset | None = None
    ) -> None:
        """Send one lite subscription update to every server of the bind topic (a
        PARTIAL_ADD may carry where the new subscriptions start: ``offset``); raises one
        ``RocketMQError`` (the first server's failure, never a group of them):
        ``LiteQuotaExceededError`` when a server refuses it for the quota."""
