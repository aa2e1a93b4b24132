"""A message delivered again while this consumer still has it in hand.

A pop server may hand this consumer a message it still holds unsettled: queued, or in
a handler call. Over gRPC this is what NotifyClientTermination does (sent after an
auto-renewed receive broke, ``aiorocket.grpc._session.Session.release_held``): the
Proxy ends its hold on everything it gave the client, handlers' messages included,
and receives hand them out again, to this consumer too. Dispatched, the copy would be
handled a second time while the first call still runs.

So a copy is not dispatched: it is attached to the message in hand (``_copies``) and
settled by that message's outcome (``PopSettler``): a success acks the copy's handle
too (the first handle is stale after the release; the server ignores its ack), a
failure sends the copy down the retry path, a dead-lettering acks it. Meanwhile the
copy counts in its queue and the cache like any received message (so a FIFO group
stays in order behind it, and the budget sees its body), is held by the renewer (the
close releases it, with the message in hand), and the message in hand is no longer
renewed (its handle is stale: a renewal would be refused and lose it).

Identity is the message id. Over gRPC the Proxy gives it; over remoting it is in the
properties, which are decoded for redeliveries only (``client/pop.py``), so a first
delivery is not indexed there: a remoting POP consumer renews its messages itself, and
a broker delivers one again while it is in hand only after its renewals failed.
Two stored messages with one id (a producer's retry) in hand at once are handled once
and both settled by that call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from aiorocket.received import PopMessage

__all__ = ["InHand"]


def _key(msg: PopMessage) -> str:
    """The message's id when it is cheap to know ("" when it is not)."""
    if msg._message_id:
        return msg._message_id
    return msg.msg_id if msg.reconsume_times > 0 else ""


class InHand:
    """Received, unsettled messages by id (see the module doc)."""

    __slots__ = ("_by_id",)

    def __init__(self) -> None:
        self._by_id: dict[str, PopMessage] = {}

    def admit(self, msg: PopMessage) -> bool:
        """Index ``msg``; False (and attached to it) when it is a copy of one in hand."""
        key = _key(msg)
        if not key:
            return True
        held = self._by_id.get(key)
        # a message whose retry is being asked for is still in hand: a copy handled now
        # would come back before the retry's delay (NotifyClientTermination released it)
        if held is None or (held._settled and not held._nacking) or held is msg:
            self._by_id[key] = msg
            return True
        if held._copies is None:
            held._copies = [msg]
        else:
            held._copies.append(msg)
        return False

    def settled(self, msg: PopMessage) -> None:
        """``msg`` is settled: no longer in hand."""
        key = _key(msg)
        if key and self._by_id.get(key) is msg:
            del self._by_id[key]

    def __len__(self) -> int:
        return len(self._by_id)
