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
delivery is not indexed when it arrives: indexing it would cost every message a decoding
of its properties (a fifth of a pop's CPU). A remoting POP consumer renews its messages
itself, so a broker delivers one again while it is in hand only after its renewals
failed (its connection went silent, pop_remoting seed 3033 of the simulator); that copy
is a redelivery (``reconsume_times`` > 0, the broker's revive counts it), its id is
decoded, and when it finds nothing in the index it is looked for among the messages in
hand not indexed (``_unindexed``) before it is dispatched: the first deliveries among
the held messages (``Renewer.held``), by body, then topic and id (their properties
parsed then). Its cost falls on a remoting redelivery that is not a
copy (each retry's first sight): one pass over the held messages (at most the cache,
1,024 by default) for a receive's messages with such a redelivery, then a lookup each;
a receive pays one call (``handed_on``: the pass is stale after it). A first delivery
pays nothing (``admit`` and ``settled`` return at once for it). The message found is
not indexed (its settling stays as cheap): a further copy finds it by the same search.
Two stored messages with one id (a producer's retry) in hand at once are handled once
and both settled by that call.

A message stays in hand after its handler succeeded until its ack is answered (or
refused for good, or handed to the close): *handled, not acked*. The termination that
follows a broken receive frees such a message too when its ack is still refused then
(the owed acks go first, ``Session.release_held``, but a Proxy may refuse them again),
and the Proxy may hand it back to this consumer: handled again, it would be a duplicate
outside the in-flight window, an avoidable one. So a copy of a handled message whose
ack is not answered is not dispatched: ``admit`` says ``HANDLED``, and the receiver
acks the copy's handle at once (``Settler.finish``): the application handled the
message, and the copy's handle is the one the server now renews (the first is stale
after the release). The index then names the copy, the newest handle: a further copy
finds it while its ack is owed. Such an entry leaves the index when its ack is done
with (``AckBatcher``'s ``forget``: answered, refused for good, or left to the close,
which releases it), so the index holds no more than the renewer does (which keeps a
message until its ack is done with): the cache and the owed acks. A copy that comes
after the ack was answered, or refused for good (the message then released on purpose),
is a new delivery and handled. The remoting pull consumer follows the same rule for a
retry-topic copy of a message in a handler call (``aiorocket.consumer.in_hand``, whose
``same_message`` both use).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from aiorocket.consumer.in_hand import hashable, same_message

if TYPE_CHECKING:
    from aiorocket.received import PopMessage

__all__ = ["ATTACHED", "DISPATCH", "HANDLED", "InHand"]

#: what ``InHand.admit`` makes of a received message: hand it to the application; a copy
#: of a message in hand, attached to it (settled by its outcome); a copy of a message
#: handled whose ack is not answered yet (acked at once, not handled again)
DISPATCH, ATTACHED, HANDLED = 0, 1, 2


def _key(msg: PopMessage) -> str:
    """The message's id when it is cheap to know ("" when it is not)."""
    if msg._message_id:
        return msg._message_id
    return msg.msg_id if msg.reconsume_times > 0 else ""


class InHand:
    """Received, unsettled messages by id (see the module doc).

    Parameters
    ----------
    held:
        Every message in hand (``Renewer.held``): where a remoting redelivery that
        finds nothing in the index looks for its first delivery. None: nowhere (gRPC,
        every message is indexed).
    """

    __slots__ = ("_by_id", "_held", "_unkeyed")

    def __init__(self, held: Callable[[], Iterable[PopMessage]] | None = None) -> None:
        self._by_id: dict[str, PopMessage] = {}
        self._held = held
        #: the held first deliveries by body, for one receive's messages (``_unindexed``);
        #: None: not gathered
        self._unkeyed: dict[bytes, list[PopMessage]] | None = None

    def admit(self, msg: PopMessage) -> int:
        """Index ``msg``: ``DISPATCH``; or ``ATTACHED`` to the message in hand it is a
        copy of; or ``HANDLED``: a copy of a handled message whose ack is owed (the
        caller acks it, see the module doc)."""
        key = _key(msg)
        if not key:
            return DISPATCH
        held = self._by_id.get(key)
        if held is None and not msg._message_id and self._held is not None:
            held = self._unindexed(msg, key)
        if held is None or held is msg:
            self._by_id[key] = msg
            return DISPATCH
        # a message whose retry is being asked for is still in hand: a copy handled now
        # would come back before the retry's delay (NotifyClientTermination released it)
        if held._settled and not held._nacking:
            self._by_id[key] = msg  # (a handled one's copy: its handle is the live one)
            # handled, its ack not answered (success, or a dead-lettering's ack): the
            # copy is acked, not handled again; else settled for good: a new delivery
            return HANDLED if held._ack_state else DISPATCH
        if held._copies is None:
            held._copies = [msg]
        else:
            held._copies.append(msg)
        return ATTACHED

    def _unindexed(self, msg: PopMessage, key: str) -> PopMessage | None:
        """A remoting redelivery's first delivery still in hand, not indexed (its id was
        not decoded). The held first deliveries are gathered by body once for a
        receive's messages; only those of its topic with its body have their ids
        decoded."""
        unkeyed = self._unkeyed
        if unkeyed is None:
            assert self._held is not None
            unkeyed = self._unkeyed = {}
            for m in self._held():
                if m.reconsume_times == 0 and not m._message_id:
                    body = hashable(m.body)
                    same = unkeyed.get(body)  # a body's hash is kept with it: once each
                    if same is None:
                        unkeyed[body] = [m]
                    else:
                        same.append(m)
        for m in unkeyed.get(hashable(msg.body), ()):
            if same_message(m, msg, key):
                return m
        return None

    def handed_on(self) -> None:
        """A receive's messages are all admitted: what ``_unindexed`` gathered is stale."""
        self._unkeyed = None

    def settled(self, msg: PopMessage) -> None:
        """``msg`` is settled, or its ack done with: no longer in hand once both are
        (a handled message stays while its ack is owed, see the module doc)."""
        if msg._ack_state:
            return  # the ack batcher calls again when the ack is done with
        key = _key(msg)
        if key and self._by_id.get(key) is msg:
            del self._by_id[key]

    def __len__(self) -> int:
        return len(self._by_id)
