"""Auto-batching over gRPC: concurrent sends to one topic share ``SendMessage`` requests.

A gRPC call costs the client far more than the bytes of one small message (a new HTTP/2
stream, HPACK-encoded metadata, the reply's frames): benchmarks/README.md, "gRPC". With
``auto_batch=True`` a send does not wait for a timer: it goes at once when fewer than
``batch_in_flight`` requests of its topic are out; otherwise it waits for one of them
to return and then leaves with every message that queued meanwhile (up to
``batch_max_bytes``). At low load nothing waits; under load, requests fill up by
themselves. The Proxy stores a request's messages as one batch, in one queue.

Only plain messages are batched: FIFO (a message group), timed and lite ones go alone. A
failed request fails each of its messages with the same error (after the retries of the
server's policy).

Each send keeps its own deadline (``aiorocket._riders``, shared with the remoting
auto-batcher): a request runs, retries included, until the latest deadline of the sends
it carries. A send cancelled (or timed out) while its message waits takes it out of the
queue; one whose message is in a request already leaves it for the retries: a retry
carries only the messages whose callers still wait. The attempt under way when the
caller gave up may still store it (as with any send whose answer was not awaited), none
after it does.
"""

from __future__ import annotations

import contextlib
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import anyio
import anyio.abc

from aiorocket._riders import latest_deadline, still_waiting
from aiorocket._send_result import SendResult
from aiorocket.errors import ClientClosedError, RequestTimeoutError, RocketMQError
from aiorocket.grpc._convert import Outgoing

__all__ = ["GRPC_BATCH_IN_FLIGHT", "GrpcBatcher", "SendBatch", "Wanted"]

#: requests per topic under way at once when ``batch_in_flight`` is None (ProducerConfig)
GRPC_BATCH_IN_FLIGHT = 2

#: A request's messages whose callers still wait, and the latest of their deadlines
#: (``time.monotonic()``): read before each attempt.
Wanted = Callable[[], tuple[list[Outgoing], float]]
#: ``send(wanted, topic)`` of one request: the producer's retrying send; it returns a
#: result for each message of its last attempt (none if nobody waited).
SendBatch = Callable[[Wanted, str], Awaitable[list[SendResult]]]


@dataclass(eq=False)
class _Pending:
    out: Outgoing
    size: int
    #: the caller's deadline (``time.monotonic()``)
    deadline: float
    done: anyio.Event = field(default_factory=anyio.Event)
    result: SendResult | None = None
    error: RocketMQError | None = None
    #: the caller gave up while its message was in a request: retries leave it out
    gone: bool = False


@dataclass(eq=False)
class _Lane:
    """One topic's queue of messages and its requests in flight."""

    waiting: deque[_Pending] = field(default_factory=deque)
    requests: int = 0


class GrpcBatcher:
    """Batches a producer's plain sends per topic.

    Parameters
    ----------
    send:
        Sends one request's messages (with the producer's retries) and returns their
        results in order.
    task_group:
        Runs the requests, so that a caller cancelled while others' messages ride in its
        request does not cancel it; owned by the producer.
    max_bytes:
        A request's messages total at most this many bytes of body and properties (one
        larger message goes alone).
    in_flight:
        Requests of one topic out at once.
    """

    def __init__(
        self, send: SendBatch, task_group: anyio.abc.TaskGroup, *, max_bytes: int, in_flight: int
    ) -> None:
        self._send = send
        self._tg = task_group
        self._max_bytes = max_bytes
        self._in_flight = in_flight
        self._lanes: dict[str, _Lane] = {}
        self._closed = False
        #: requests sent and the messages they carried (the remoting AutoBatcher's names)
        self.batches = 0
        self.batched_messages = 0

    async def send(self, out: Outgoing, size: int, deadline: float) -> SendResult:
        """Send ``out`` (``size`` bytes) in the next request of its topic, by ``deadline``
        (``time.monotonic()``; the caller bounds its own wait by it)."""
        lane = self._lanes.setdefault(out.topic, _Lane())
        pending = _Pending(out, size, deadline)
        lane.waiting.append(pending)
        self._dispatch(lane)
        try:
            await pending.done.wait()
        except BaseException:
            if not pending.done.is_set():
                # Still queued: never sent. In a request: no retry of it carries this
                # message any more (the attempt under way may store it).
                pending.gone = True
                with contextlib.suppress(ValueError):
                    lane.waiting.remove(pending)
            raise
        if pending.error is not None:
            raise pending.error
        assert pending.result is not None
        return pending.result

    def _dispatch(self, lane: _Lane) -> None:
        """Start requests while the lane has messages and a free request slot."""
        while lane.waiting and lane.requests < self._in_flight and not self._closed:
            batch = [lane.waiting.popleft()]
            size = batch[0].size
            while lane.waiting and size + lane.waiting[0].size <= self._max_bytes:
                size += lane.waiting[0].size
                batch.append(lane.waiting.popleft())
            lane.requests += 1
            self.batches += 1
            self.batched_messages += len(batch)
            self._tg.start_soon(self._request, lane, batch)

    async def _request(self, lane: _Lane, batch: list[_Pending]) -> None:
        def wanted() -> tuple[list[Outgoing], float]:
            still = still_waiting(batch, time.monotonic())
            return [p.out for p in still], latest_deadline(still) if still else 0.0

        try:
            results = await self._send(wanted, batch[0].out.topic)
        except RocketMQError as exc:
            for p in batch:
                p.error = exc
        except BaseException:  # cancelled: the producer closes; start nothing more
            self._closed = True
            raise
        else:
            by_id: dict[str, list[SendResult]] = {}
            for result in results:
                by_id.setdefault(result.msg_id, []).append(result)
            for p in batch:
                same = by_id.get(p.out.message_id)
                if same:
                    p.result = same.pop(0)
                elif not p.gone:  # not sent: a caller that left took it out
                    p.error = RequestTimeoutError("the message left its batch unsent")
        finally:
            for p in batch:
                if p.result is None and p.error is None:  # cancelled: the producer closes
                    p.error = ClientClosedError("the producer closed before the answer came")
                p.done.set()
            lane.requests -= 1
            self._dispatch(lane)

    def fail_waiting(self) -> None:
        """The producer closed: messages no request took fail (they were never sent)."""
        self._closed = True
        for lane in self._lanes.values():
            while lane.waiting:
                p = lane.waiting.popleft()
                p.error = ClientClosedError("the producer closed before the message was sent")
                p.done.set()
