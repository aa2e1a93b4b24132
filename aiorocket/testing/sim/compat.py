"""Names the simulator takes from the client that an older client lacks.

``scripts/simulate.py --against <commit>`` runs today's simulator on an old checkout
(docs/simulator.md: the table of cce0824's defects). Where the simulator reaches into
the client for a name, this module feature-detects it and falls back to the value the
old client has (or the wire's), so the simulator imports on either; on main every name
here is the client's own, so nothing it checks on main changes."""

from __future__ import annotations

from aiorocket import message as _message

__all__ = [
    "GET_LITE_CLIENT_INFO",
    "PROPERTY_CLUSTER",
    "PROPERTY_CORRELATION_ID",
    "PROPERTY_REPLY_TO_CLIENT",
    "receive_backoff_cap",
]  # fmt: skip

# Request-reply's message properties (the wire's names, as RocketMQ's
# MessageConst spells them); cce0824 has no request-reply and none of them.
PROPERTY_CORRELATION_ID: str = getattr(_message, "PROPERTY_CORRELATION_ID", "CORRELATION_ID")
PROPERTY_REPLY_TO_CLIENT: str = getattr(_message, "PROPERTY_REPLY_TO_CLIENT", "REPLY_TO_CLIENT")
PROPERTY_CLUSTER: str = getattr(_message, "PROPERTY_CLUSTER", "CLUSTER")


def receive_backoff_cap() -> float:
    """The longest pause a POP receive loop takes after failed receives."""
    try:
        from aiorocket.consumer.pop.receiver import receive_backoff
    except ImportError:  # cce0824: the same backoff inline in Receiver, capped at 10 s
        return 10.0
    return float(receive_backoff(99))


# The request code of GET_LITE_CLIENT_INFO (5.5.0's RequestCode); cce0824's lite
# consumer never asks a broker which lite topics it holds, so it has no such name.
def _lite_client_info() -> int:
    from aiorocket.client import lite

    return int(getattr(lite, "GET_LITE_CLIENT_INFO", 200077))


GET_LITE_CLIENT_INFO = _lite_client_info()
