"""A consumer's trace records (``aiorocket._trace``): a ``SubBefore`` per message handed
to the handler and a ``SubAfter`` per message once the call ended, the same from both
transports (``Handler.call`` records them: worker pools and orderly consumption).

The outcome codes are Java's ``ConsumeReturnType``: SUCCESS, FAILED (the handler said
so), EXCEPTION (it raised), TIME_OUT (``consume_timeout`` cut it). A call cut by a close
has no outcome (its message is handed back, not settled): no ``SubAfter``. Messages a
broker marks ``TRACE_ON=false`` are not traced (as Java).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from aiorocket._failure_log import msg_id_of
from aiorocket._trace import DEFAULT_REGION, Tracer, now_ms, request_id, sub_after, sub_before
from aiorocket.message import PROPERTY_KEYS
from aiorocket.received import ConsumerMessage

__all__ = ["CallTrace", "HandlerTrace"]

#: the broker's region and trace switch, in each stored message's properties
PROPERTY_MSG_REGION = "MSG_REGION"
PROPERTY_TRACE_SWITCH = "TRACE_ON"


@dataclass(slots=True)
class CallTrace:
    """One traced handler call: its request id, start and traced messages."""

    request_id: str
    began: float
    messages: list[tuple[str, list[str]]]


def _id(msg: ConsumerMessage) -> str:
    # The Proxy's message id over gRPC (a PopMessage), else the UNIQ_KEY (or offset id).
    return getattr(msg, "message_id", "") or msg_id_of(msg)


class HandlerTrace:
    """Records a consumer's handler calls into its ``Tracer``.

    ``group`` is the group as the application names it (no namespace), as Java writes it.
    """

    __slots__ = ("group", "tracer")

    def __init__(self, tracer: Tracer, group: str) -> None:
        self.tracer = tracer
        self.group = group

    def before(self, live: Sequence[ConsumerMessage]) -> CallTrace:
        call = CallTrace(request_id(), time.monotonic(), [])
        stamp = now_ms()
        append = self.tracer.append
        for msg in live:
            props = msg.properties
            if props.get(PROPERTY_TRACE_SWITCH) == "false":
                continue
            raw = props.get(PROPERTY_KEYS)
            msg_id, keys = _id(msg), raw.split() if raw else []
            call.messages.append((msg_id, keys))
            append(sub_before(
                group=self.group, request_id=call.request_id, msg_id=msg_id,
                retry_times=msg.reconsume_times, keys=keys, timestamp=stamp,
                region=props.get(PROPERTY_MSG_REGION) or DEFAULT_REGION,
            ))  # fmt: skip
        return call

    def after(self, call: CallTrace, code: int) -> None:
        if not call.messages:
            return
        # Java divides the call's time by its messages (a batch's share of it).
        cost = int((time.monotonic() - call.began) * 1000 / len(call.messages))
        stamp = now_ms()
        for msg_id, keys in call.messages:
            self.tracer.append(sub_after(
                group=self.group, request_id=call.request_id, msg_id=msg_id, cost_ms=cost,
                success=code == 0, keys=keys, context_code=code, timestamp=stamp,
            ))  # fmt: skip
