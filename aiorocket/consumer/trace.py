"""A consumer's trace records (``aiorocket._trace``): a ``SubBefore`` per message handed
to the application and a ``SubAfter`` per message once it is consumed, the same from both
transports:

* a handler call (``Handler.call`` records it: worker pools and orderly consumption):
  ``SubBefore`` when the call starts, ``SubAfter`` when it ends;
* ``async for msg in consumer`` (``Iterated``, ordered or not): ``SubBefore`` when the
  loop is handed the message, ``SubAfter`` when the application settles it (the loop
  asks for the next one, ``ack``, ``nack``, ``async with msg``), through a
  ``TracedSettler``.

The outcome codes are Java's ``ConsumeReturnType``: SUCCESS, FAILED (the handler said
so, or ``nack``), EXCEPTION (the handler raised), TIME_OUT (``consume_timeout`` cut it).
A message handed back unsettled (a call cut by a close, a message the loop left and
released) has no outcome: no ``SubAfter``. Messages a broker marks ``TRACE_ON=false``
are not traced (as Java).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from aiorocket._failure_log import msg_id_of
from aiorocket._trace import (
    CONSUME_FAILED,
    CONSUME_SUCCESS,
    DEFAULT_REGION,
    CallTrace,
    Tracer,
    now_ms,
    request_id,
    sub_after,
    sub_before,
)
from aiorocket.message import PROPERTY_KEYS
from aiorocket.received import ConsumerMessage

if TYPE_CHECKING:
    from aiorocket.received import Settler

__all__ = ["CallTrace", "HandlerTrace", "TracedSettler"]

#: the broker's region and trace switch, in each stored message's properties
PROPERTY_MSG_REGION = "MSG_REGION"
PROPERTY_TRACE_SWITCH = "TRACE_ON"


def _id(msg: ConsumerMessage) -> str:
    # The Proxy's message id over gRPC (a PopMessage), else the UNIQ_KEY (or offset id).
    return getattr(msg, "message_id", "") or msg_id_of(msg)


class HandlerTrace:
    """Records a consumer's handler calls (and ``async for`` handings) into its ``Tracer``.

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

    # -- ``async for``: a message handed to the loop, settled later --------------------

    def handed(self, msg: ConsumerMessage) -> None:
        """``msg`` goes to an ``async for`` loop: its ``SubBefore`` now, its
        ``SubAfter`` when it is settled (``TracedSettler``). Handed again (released,
        retried in place), it is a new consumption with a new request id."""
        call = self.before((msg,))
        msg._trace = call if call.messages else None

    def settled(self, msg: ConsumerMessage, code: int) -> None:
        """The application settled ``msg`` (``code``): its ``SubAfter``, once."""
        call = msg._trace
        if call is not None:
            msg._trace = None
            self.after(call, code)


class TracedSettler:
    """The settler of an ``async for`` consumer's messages when tracing: ``inner``'s,
    writing each message's ``SubAfter`` when the application settles it (success, or
    failed for a ``nack``), before the settle's request (its time is not the
    consumption's, and a settle that fails or is cancelled was still the application's
    outcome). Messages never handed to a loop carry no trace: nothing is written."""

    __slots__ = ("_inner", "_trace", "dead_letter", "dead_letters", "retry_in_place")

    def __init__(self, inner: Settler, trace: HandlerTrace) -> None:
        self._inner = inner
        self._trace = trace
        self.dead_letters = inner.dead_letters
        self.retry_in_place = inner.retry_in_place
        self.dead_letter = inner.dead_letter

    def finish(self, msg: ConsumerMessage) -> bool:
        if msg._trace is not None:
            self._trace.settled(msg, CONSUME_SUCCESS)
        return self._inner.finish(msg)

    async def settle(self, msg: ConsumerMessage, delay_level: int | None) -> None:
        if msg._trace is not None:
            self._trace.settled(msg, CONSUME_SUCCESS if delay_level is None else CONSUME_FAILED)
        await self._inner.settle(msg, delay_level)
