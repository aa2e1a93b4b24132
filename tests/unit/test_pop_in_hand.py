"""The pop consumer's messages in hand (``aiorocket.consumer.pop.in_hand``), without a
server: which copies are dispatched, attached or acked, and when an entry goes."""

from __future__ import annotations

from aiorocket.consumer.pop.acks import ACK_QUEUED
from aiorocket.consumer.pop.in_hand import ATTACHED, DISPATCH, HANDLED, InHand
from aiorocket.grpc._push_message import PopMessage


def _delivery(handle: str) -> PopMessage:
    msg = PopMessage("t", b"x", {}, 0, 0, 0)
    msg.receipt_handle, msg.message_id = handle, "id0"
    return msg


def _handled(in_hand: InHand, msg: PopMessage) -> None:
    """Its handler succeeded: settled, its ack queued (``PopSettler.finish``)."""
    msg._settled, msg._ack_state = True, ACK_QUEUED
    in_hand.settled(msg)  # (its queue's ``on_done``)


def _ack_done(in_hand: InHand, msg: PopMessage) -> None:
    """Its ack answered (``AckBatcher._done``, then its ``forget``)."""
    msg._ack_state = 0
    in_hand.settled(msg)


def test_a_copy_of_a_handled_message_whose_ack_is_owed_is_acked_not_handled() -> None:
    """Handled, its ack not answered: a copy (the Proxy freed it at a release) is
    HANDLED and becomes the entry (its handle is the live one); the first one's ack
    answered leaves the copy's entry; the copy's answered ends it, and a later copy is
    a new delivery. Before, the entry went when the ack was queued: the copy was
    dispatched."""
    in_hand = InHand()
    first, copy, later = _delivery("rh0"), _delivery("rh0b"), _delivery("rh0c")
    assert in_hand.admit(first) == DISPATCH
    _handled(in_hand, first)
    assert len(in_hand) == 1  # in hand while its ack is owed
    assert in_hand.admit(copy) == HANDLED
    _handled(in_hand, copy)  # the receiver acks it (``Settler.finish``)
    _ack_done(in_hand, first)
    assert len(in_hand) == 1  # the copy's ack is still owed
    _ack_done(in_hand, copy)
    assert len(in_hand) == 0
    assert in_hand.admit(later) == DISPATCH


def test_a_copy_of_a_message_in_a_handler_call_is_attached_to_it() -> None:
    in_hand = InHand()
    first, copy = _delivery("rh0"), _delivery("rh0b")
    assert in_hand.admit(first) == DISPATCH
    assert in_hand.admit(copy) == ATTACHED and first._copies == [copy]


def test_a_copy_after_a_release_or_a_lost_renewal_is_a_new_delivery() -> None:
    """Settled with no ack owed (released, lost, or its ack refused for good and the
    message released on purpose): a copy is handled."""
    in_hand = InHand()
    first = _delivery("rh0")
    in_hand.admit(first)
    first._settled = True
    in_hand.settled(first)
    assert len(in_hand) == 0
    assert in_hand.admit(_delivery("rh0b")) == DISPATCH
