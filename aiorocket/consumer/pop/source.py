"""What the pop runtime asks of a transport: a ``PopSource``.

The receivers, the renewer, the acks and the settler of ``aiorocket.consumer.pop`` are
written against this interface only; a 5.x Proxy over gRPC
(``aiorocket.consumer.pop.grpc_source``) and the brokers over remoting
(``aiorocket.consumer.pop.remoting_source``) implement it.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING, Protocol

from aiorocket.errors import RocketMQError
from aiorocket.received import PopMessage

if TYPE_CHECKING:
    from aiorocket.consumer.pop.lite import LiteAction, LiteOffset

__all__ = ["LiteSource", "PopSource"]


class PopSource(Protocol):
    """A session that pops, acks and postpones one group's messages."""

    group: str
    #: the server keeps received messages invisible until they are settled (the
    #: Proxy's auto-renew); else the client's renewer does
    server_renews: bool
    #: messages are handed out in order per message group / queue (orderly delivery)
    fifo: bool
    #: deliveries before the dead-letter queue, by the server's settings (0: unknown)
    server_max_attempts: int

    @property
    def client_id(self) -> str: ...

    @property
    def receivers(self) -> int:
        """Receive loops to run at once."""

    async def run(self) -> None:
        """Background work of the session (heartbeats), until cancelled; may return."""

    async def open(self) -> None:
        """Connect, and learn the server's settings (FIFO, retry policy)."""

    async def close(self) -> None: ...

    def backoff(self, attempt: int) -> float:
        """Seconds before the retry of failed delivery ``attempt``."""

    def retry_pause(self, attempt: int) -> float:
        """Orderly: seconds a queue pauses before failed ``attempt`` is retried in place."""

    async def receive(self, max_messages: int, invisible: float) -> list[PopMessage]:
        """Up to ``max_messages``, invisible to the group for ``invisible`` seconds;
        long-polls, and returns ``[]`` when none arrived."""

    async def ack(self, topic: str, messages: list[PopMessage]) -> int:
        """Ack ``messages`` of ``topic`` (in as few requests as the server allows);
        returns how many the server confirmed, raises if the request failed."""

    async def change_invisible(self, msg: PopMessage, seconds: float) -> None:
        """``msg`` becomes visible ``seconds`` from now; its receipt handle is replaced."""

    async def dead_letter(self, msg: PopMessage, *, attempt: int, max_attempts: int) -> None:
        """Move ``msg`` to the group's dead-letter queue (``%DLQ%<group>``), settled."""

    def lost(self, err: RocketMQError) -> bool:
        """A renewal failed with ``err`` because the server no longer knows this
        delivery (the message is someone else's now), not for a transient reason."""


class LiteSource(PopSource, Protocol):
    """A ``PopSource`` of a lite consumer (``ConsumerState.lite`` is set): it pops the
    subscribed lite topics of ``state.lite.bind_topic``, FIFO per lite topic (each
    message's ``message_group`` is its lite topic), and settles them with their lite
    topic (``msg.lite_topic``)."""

    async def sync_lite(
        self, action: LiteAction, lite_topics: Collection[str], *, offset: LiteOffset | None = None
    ) -> None:
        """Send one lite subscription update to every server of the bind topic (a
        PARTIAL_ADD may carry where the new subscriptions start: ``offset``); raises
        ``LiteQuotaExceededError`` when a server refuses it for the quota."""
