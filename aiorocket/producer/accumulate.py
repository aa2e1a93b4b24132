"""Auto-batching: concurrent plain sends of one topic leave together in batch requests.

A broker spends most of its effort per request, not per byte: batches of 1 KiB
messages go several times faster than one message per request (benchmarks/README.md,
produce figures). So with ``auto_batch`` on, ``Producer.send`` hands eligible messages to an
``AutoBatcher``, and each caller still awaits its own ``SendResult``.

There is no linger timer for what arrives. A topic keeps at most ``batch_in_flight``
requests under way; a message that finds one of them free leaves at once (with whatever
else was sent in the same event loop iteration), so an idle producer adds no latency.
Messages that arrive while all of them are busy wait, and the next request to free up
takes everything waiting (up to ``batch_max_bytes`` of bodies, as Java's ``holdSize``
counts, and ``max_message_size`` of records), after letting the callers its own answer
woke send again (so it carries their messages too): the batch size follows the load, as
aiokafka's accumulator does. Two rules keep the batches full under load: a message that
arrives while a worker is about to take (woken, or in those passes after its answer)
starts no other request (that worker takes it), and what a request could not carry (past
``batch_max_bytes``) starts another only as a full batch, else it waits for the next
answer or arrival, but at most ``batch_max_delay`` (10 ms, Java's ``batchMaxDelayMs``):
then a free request takes it, partial (the sweeper's wake-up, one a topic), so that a
slow broker's request does not hold it while others are free. A worker's take right
after its answer, less than a full batch while another request is under way, waits so
too: after a request the delay started (or a slow first answer), the requests merge back
into full ones instead of staying three of 21. Without them, with 64 sends in flight
each answer's freed sends, or the few left over, left in a free request of their own:
batches of 21 messages, where now two requests carry 32 each (the 32 KiB of 1 KiB
bodies), a third fewer requests for the broker and fewer instructions a message in the
client (benchmarks/README.md, "Goal 3, rounds 4 and 12"). Neither wait holds sends that
nothing can join: while every ``start_send`` slot is taken no message can arrive before
an answer, so less than a full batch leaves at once if fewer than two requests are under
way (``_more_may_come``), which keeps the two-request pipeline that the slots allow.
The answers of a topic's requests are handled one at a time (``_TopicLane.turn``): an
answer that comes while another worker handles the answer to a full request waits until
that worker's next request is written (or it goes idle). Handled together, two answers
freed all 64 sends before either next request left, both left in one write, the broker
answered them together again and idled while the client worked on the 64 (the two
requests in lockstep); one at a time, the broker works on the other request while the
client turns one around (benchmarks/README.md, "Goal 3, round 13"). Only the answer to
a full request that comes while every ``start_send`` slot is taken takes the turn (its
freed sends make the next request, and nothing else can arrive first); a paced
producer's answers, or those of ``send`` callers' tasks (each of which wakes in a loop
pass of its own, so a turn would hold the other answers for passes full of them), are
handled as they come.

Batch requests run in the producer's task group (they carry several callers' messages,
so no single caller owns them), in up to ``batch_in_flight`` worker tasks per topic,
started as its messages need them and ended after a minute without any: a task per
request would cost more than the request's own work (benchmarks/micro.py: a task per
message), and the worker that wakes for a message takes whatever else arrived in the same
loop iteration along with it.

Each caller keeps its own deadline (``aiorocket._riders``, shared with the gRPC
auto-batcher): a request runs, retries included, while any of its callers waits, until
the latest of their deadlines; the sweeper answers a caller whose deadline comes first
with ``RequestTimeoutError``. A caller that times out or is cancelled while its message
still waits takes it back; once the message is in a request it may be stored
(at-least-once: as for any send whose answer was not awaited), but no retry carries it
any more. A failed batch is retried as one request, on another broker, as a plain send
would be; when all attempts fail, every caller still waiting gets the error.

``start_send`` hands a message to the batcher too, once fewer than ``max_in_flight``
messages so started are unanswered: a loop feeding a task group (the Spark sink) is held
back as by a plain send's slot, and its messages share requests as concurrent ``send``
calls do. It spawns no task per message (a task's creation, scheduling and wake-up cost
more than the rest of a batched message's CPU: benchmarks/README.md, "produce"), and
runs no coroutine of its own while a slot is free (``start_nowait``): each
task group that has such messages unanswered runs one ``_Reporter`` task, which the
answers wake (once per request, not per message), which calls ``on_result`` and raises
the first failure in the group, and which is what ``async with`` of the group waits for.
Cancelled (its group failed or was cancelled), it withdraws its unanswered messages as
cancelled ``send`` callers do: those still waiting are taken back, those in a request
are gone (no retry carries them).
"""

from __future__ import annotations

import inspect
import math
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import anyio
import anyio.abc
import anyio.lowlevel

from aiorocket._loop import LoopShortcuts, OneShotEvent, capture
from aiorocket._riders import latest_deadline, still_waiting
from aiorocket._signal import Signal
from aiorocket._unique_id import create_unique_id
from aiorocket.client.results import SendResult
from aiorocket.errors import ClientClosedError, RequestTimeoutError
from aiorocket.message import RETRY_TOPIC_PREFIX, Message
from aiorocket.producer.backend import ResultCallback
from aiorocket.producer.batch import id_record, pack_record, split_batch_result
from aiorocket.producer.config import BATCH_MAX_DELAY, ProducerConfig
from aiorocket.producer.prepare import (
    Outgoing,
    check_body,
    check_topic,
    id_text,
    properties_with_id,
)
from aiorocket.producer.sender import Plan, Sender

__all__ = [
    "BATCH_IN_FLIGHT",
    "BATCH_MAX_DELAY",
    "WORKER_IDLE_EXIT",
    "AutoBatcher",
]

#: seconds a topic's idle request worker lives on, waiting for the topic's next message.
WORKER_IDLE_EXIT = 60.0
#: requests per topic under way at once when ``batch_in_flight`` is None (ProducerConfig)
BATCH_IN_FLIGHT = 4


@dataclass(eq=False, slots=True)
class _Waiting:
    msg: Message
    body: bytes
    #: encoded, with the message's UNIQ_KEY; None: the id alone (``id_text``), encoded
    #: only if the message leaves alone (a batch carries its record)
    properties: str | None
    #: its record in a batch body (encoded once, at hand-over: retries reuse it)
    record: bytes
    msg_id: str
    deadline: float
    #: the awaiting caller's (``send``); None for ``start_send``, whose reporter is told
    done: OneShotEvent | None
    #: ``start_send``: the task group's reporter (None until a slot is taken), and the
    #: caller's callback
    reporter: _Reporter | None = None
    on_result: ResultCallback | None = None
    result: SendResult | None = None
    error: BaseException | None = None
    #: out of the queue: in a request, or answered
    taken: bool = False
    #: its caller stopped waiting while it was in a request: no retry carries it
    gone: bool = False
    #: answered, or its caller left: no later answer counts
    answered: bool = False

    def finish(self, result: SendResult | None, error: BaseException | None) -> None:
        if self.answered:  # the sweeper may have answered it (its timeout)
            return
        self.answered = True
        self.result, self.error = result, error
        if self.done is not None:
            self.done.set()
        else:
            assert self.reporter is not None
            self.reporter.answer(self)


def _expire(lane: _TopicLane, now: float) -> float:
    """Take the messages whose deadline passed out of ``lane`` (they waited for a
    request) and answer them with ``RequestTimeoutError``; the earliest deadline of the
    others."""
    pool = lane.waiting
    for w in [w for w in pool if w.deadline <= now]:
        pool.remove(w)
        lane.waiting_bytes -= len(w.body)
        w.taken = w.gone = True  # no request carries it from now
        w.finish(None, RequestTimeoutError(f"send to {w.msg.topic!r} waited for a batch "
                                           "past its timeout"))  # fmt: skip
    return min((w.deadline for w in pool), default=math.inf)


def _expire_riders(batches: list[list[_Waiting]], now: float) -> float:
    """Answer the unanswered messages of requests under way (``batches``) whose deadline
    passed with ``RequestTimeoutError`` (they may be stored; no retry carries them); the
    earliest deadline of the others."""
    earliest = math.inf
    for batch in batches:
        for w in batch:
            if w.answered:
                continue
            if w.deadline <= now:
                w.gone = True
                w.finish(None, RequestTimeoutError(f"send to {w.msg.topic!r} got no answer "
                                                   "within its timeout"))  # fmt: skip
            elif w.deadline < earliest:
                earliest = w.deadline
    return earliest


def _earliest(lane: _TopicLane) -> float:
    """The earliest deadline of the messages waiting in ``lane``."""
    return min(w.deadline for w in lane.waiting)


@dataclass(eq=False, slots=True)
class _TopicLane:
    waiting: deque[_Waiting] = field(default_factory=deque)
    waiting_bytes: int = 0  # of their bodies: whether a full batch waits
    in_flight: int = 0  # requests under way
    workers: int = 0  # worker tasks alive (at most batch_in_flight)
    idle: int = 0  # workers waiting for messages
    wake: Signal = field(default_factory=Signal)  # a message arrived for idle workers
    #: when its last worker went idle (the loop's clock)
    idle_since: float = 0.0
    #: set by the sweeper after ``WORKER_IDLE_EXIT`` without a request: idle workers end
    retire: bool = False
    #: when what a request could not carry may leave partial (``batch_max_delay``)
    linger_until: float = math.inf
    #: the worker that handles its request's answer until its next request leaves (or it
    #: goes idle): another answer of the topic waits for it (``AutoBatcher._run``).
    #: None (free), a worker's own token (held), or ``_LEAVING`` (given back once the
    #: holder's next request has been handed to the socket)
    turn: object | None = None
    turned: Signal = field(default_factory=Signal)  # ``turn`` was given back
    #: whether the latest ``_take`` filled its request (its answer then takes the turn)
    took_full: bool = False


#: ``_TopicLane.turn`` while the request of the worker that held it is being written
_LEAVING = object()


def _turn_over(lane: _TopicLane) -> None:
    """Give ``lane``'s turn back once the write queued before this call has run."""
    if lane.turn is _LEAVING:
        lane.turn = None
        lane.turned.notify()


def _retire_if_idle(lane: _TopicLane, now: float) -> float:
    """Retire ``lane``'s workers if all have been idle for ``WORKER_IDLE_EXIT``; else
    when to look again."""
    if not lane.workers or lane.retire:
        return math.inf
    if lane.idle < lane.workers or lane.waiting:  # busy: it goes idle later, if ever
        return now + WORKER_IDLE_EXIT
    at = lane.idle_since + WORKER_IDLE_EXIT
    if at > now:
        return at
    lane.retire = True
    lane.wake.notify()
    return math.inf


async def _settle(callback_result: Awaitable[None]) -> None:
    await callback_result


class _StartedSlots:
    """The ``max_in_flight`` slots of ``start_send`` messages: a count, taken and given
    back inline. An ``anyio.Semaphore``'s ``acquire_nowait`` and ``release`` were two
    calls a message, and a request's answers give back all of theirs at once
    (benchmarks/README.md, "Goal 3, round 10"). Waiting for one is the slow path (all
    taken: once per answer in a loop of ``start_send``)."""

    __slots__ = ("_freed", "value")

    def __init__(self, slots: int) -> None:
        #: slots free
        self.value = slots
        self._freed = Signal()

    def release(self, n: int = 1) -> None:
        self.value += n
        self._freed.notify()

    async def acquire(self, deadline: float, now: Callable[[], float], what: str) -> None:
        """One slot by ``deadline``, else ``RequestTimeoutError``; cancelled, none taken."""
        if self.value:  # no checkpoint, as ``take_slot``'s fast path
            self.value -= 1
            return
        with anyio.move_on_after(deadline - now()):
            while not self.value:  # woken with the others: one of them may take it first
                await self._freed.wait()
            self.value -= 1
            return
        raise RequestTimeoutError(f"no in-flight slot freed up in time ({what})")


class _Reporter:
    """The one task of a task group that reports its ``start_send`` messages (module
    docstring): it ends when none is unanswered, and the group's next one starts another."""

    __slots__ = ("_batcher", "_tg", "answered", "unanswered", "wake")

    def __init__(self, batcher: AutoBatcher, tg: anyio.abc.TaskGroup) -> None:
        self._batcher = batcher
        self._tg = tg
        #: its messages not answered yet (``AutoBatcher._hand_over`` adds them)
        self.unanswered: set[_Waiting] = set()
        #: answered, not reported yet; ``wake`` after adding (``answer``, and
        #: ``AutoBatcher._answer`` inline for a request's messages)
        self.answered: list[_Waiting] = []
        self.wake = Signal()

    def answer(self, waiting: _Waiting) -> None:
        """``waiting`` got its answer (from a request, the sweeper or ``close``); a
        request's answers take ``AutoBatcher._answer``'s copy of these steps."""
        self.unanswered.discard(waiting)
        self._batcher.started_slots.release()
        self.answered.append(waiting)
        self.wake.notify()

    async def run(self) -> None:
        try:
            while True:
                # Taken whole: a loop over a list, not a ``popleft`` a message (what a
                # callback's answers add comes in the next round; after a failure the
                # rest are not reported, as before: the group fails)
                answered, self.answered = self.answered, []
                for w in answered:
                    if w.error is not None:
                        raise w.error
                    on_result = w.on_result
                    if on_result is not None:
                        ret = on_result(w.result)  # type: ignore[arg-type]  # set with error None
                        # an awaitable runs on, as in the callers' tasks of ``send``
                        if ret is not None and inspect.isawaitable(ret):
                            self._tg.start_soon(_settle, ret)
                if self.answered:
                    continue
                if not self.unanswered:
                    return
                await self.wake.wait()
        finally:
            self._batcher.reporter_ended(self._tg, self)
            for w in self.unanswered:  # cancelled, or another message failed
                self._batcher.withdraw(w)
                self._batcher.started_slots.release()
            self.unanswered.clear()


class AutoBatcher:
    """Groups the plain sends of each topic into batch requests while requests are busy."""

    def __init__(self, sender: Sender, config: ProducerConfig, log: Any) -> None:
        self._sender = sender
        self._config = config
        self._log = log
        self._requests = config.batch_in_flight or BATCH_IN_FLIGHT  # per topic
        self._full = config.batch_max_bytes
        self._max_size = config.max_message_size
        self._compress_over = config.compress_over
        # With answers every few ms the delay seldom ends a wait; it bounds the wait
        # behind a slow broker's requests while others of the topic are free.
        self._delay = config.batch_max_delay  # seconds (``BATCH_MAX_DELAY`` by default)
        self._lanes: dict[str, _TopicLane] = {}
        self._tg: anyio.abc.TaskGroup | None = None
        self._loop: LoopShortcuts | None = None
        self._finished = Signal()  # after every request: wakes drain()
        self._expiry = Signal()  # a message waits with an earlier deadline than any other
        self._next_expiry = math.inf
        #: requests (their messages) that run past some of their callers' deadlines
        #: (another caller's is later): the sweeper answers those at theirs. Whole
        #: batches, not a set of their messages: a set's add and remove per message were
        #: a measurable share of a batched message's CPU (benchmarks/README.md, goal 3)
        self._riding: list[list[_Waiting]] = []
        #: messages handed over by ``start_send`` and not answered yet
        self.started_slots = _StartedSlots(config.max_in_flight)
        #: per task group with ``start_send`` messages unanswered, its reporter task
        self._reporters: dict[anyio.abc.TaskGroup, _Reporter] = {}
        #: batches sent and messages in them (the mean batch size is their ratio).
        self.batches = 0
        self.batched_messages = 0

    def start(self, task_group: anyio.abc.TaskGroup) -> None:
        """Run batch requests, and the sweeper of overdue messages, in ``task_group``."""
        self._tg = task_group
        self._loop = capture()
        task_group.start_soon(self._expire_loop)

    def accepts(self, msg: Message) -> bool:
        """Whether ``msg`` may share a batch: not delayed, without a priority (which
        chooses its queue), not a lite message, not a retry, body uncompressed."""
        return (
            isinstance(msg.body, (bytes, bytearray, memoryview))
            and not msg.delay_level
            and msg.deliver_time_ms is None
            and msg.priority is None
            and msg.lite_topic is None
            and not msg.topic.startswith(RETRY_TOPIC_PREFIX)
            and len(msg.body) < self._compress_over
        )

    async def send(self, msg: Message, deadline: float) -> SendResult:
        """Send ``msg`` (for which ``accepts`` is true) alone or with others.

        No cancel scope per call (the costliest part of a send here): a message that
        outlives its deadline while waiting, or in a request that runs on for another
        caller, is answered by the sweeper; one in a request that ends by its deadline
        by that request.
        """
        loop = self._loop
        if loop is None:
            raise ClientClosedError("producer is not started or closed")
        return await self._wait(self._prepare(msg, deadline, loop.new_event(), None, None))

    def start_nowait(
        self, task_group: anyio.abc.TaskGroup, msg: Message, deadline: float,
        on_result: ResultCallback | None,
    ) -> _Waiting | None:  # fmt: skip
        """Send ``msg`` (``accepts`` is true) once fewer than ``max_in_flight`` messages
        handed over so are unanswered; ``task_group``'s reporter calls ``on_result``
        (module docstring). Synchronous while a slot is free (its common case: a
        coroutine per message was a measurable share of its CPU): None once handed over;
        else the prepared message, for ``start_when_free``. A bad message fails here."""
        slots = self.started_slots
        if not slots.value:
            return self._prepare(msg, deadline, None, None, on_result)
        reporter = self._reporters.get(task_group)
        waiting = self._prepare(msg, deadline, None, reporter, on_result)  # may raise
        slots.value -= 1
        if reporter is None:  # the group's first: ``_hand_over`` starts its reporter
            self._hand_over(task_group, waiting, on_result)
            return None
        # ``_hand_over`` inline (a call a message; ``_prepare`` found the batcher open
        # and nothing awaited since)
        reporter.unanswered.add(waiting)
        self._enqueue(waiting)
        return None

    async def start_when_free(self, task_group: anyio.abc.TaskGroup, waiting: _Waiting) -> None:
        """Hand ``waiting`` (from ``start_nowait``) over once a slot frees up, by its
        deadline (else ``RequestTimeoutError``); cancelled, nothing was handed over."""
        started = f"{self._config.max_in_flight} messages started"
        await self.started_slots.acquire(waiting.deadline, self._sender.now, started)
        self._hand_over(task_group, waiting, waiting.on_result)

    def _hand_over(
        self, task_group: anyio.abc.TaskGroup, waiting: _Waiting, on_result: ResultCallback | None
    ) -> None:
        """``waiting`` holds a slot: queue it, reported by ``task_group``'s reporter."""
        if self._tg is None:
            self.started_slots.release()
            raise ClientClosedError("producer is closed")
        reporter = self._reporters.get(task_group)
        if reporter is None:
            reporter = _Reporter(self, task_group)
            try:
                task_group.start_soon(reporter.run)
            except BaseException:
                self.started_slots.release()
                raise
            self._reporters[task_group] = reporter
        waiting.reporter, waiting.on_result = reporter, on_result  # no method: a call a message
        reporter.unanswered.add(waiting)
        self._enqueue(waiting)

    def reporter_ended(self, task_group: anyio.abc.TaskGroup, reporter: _Reporter) -> None:
        if self._reporters.get(task_group) is reporter:
            del self._reporters[task_group]

    def withdraw(self, waiting: _Waiting) -> None:
        """Its caller left (cancelled): take it back if it still waits, else no retry
        carries it; no answer reaches the caller after this."""
        waiting.answered = True
        if not waiting.taken:
            waiting.taken = True
            lane = self._lanes[waiting.msg.topic]
            lane.waiting.remove(waiting)
            lane.waiting_bytes -= len(waiting.body)
        else:  # answered: the sweeper passes over it in ``_riding``
            waiting.gone = True

    def _prepare(
        self, msg: Message, deadline: float, done: OneShotEvent | None,
        reporter: _Reporter | None, on_result: ResultCallback | None,
    ) -> _Waiting:  # fmt: skip
        """``done``: a ``send`` caller's event to wake it; ``reporter`` and ``on_result``:
        a ``start_send`` caller's.

        ``accepts(msg)`` held: its body is bytes, no delay, priority or lite topic (what
        ``check_schedule`` looks at). A topic with a lane was checked when it got one.
        """
        if self._tg is None or self._loop is None:
            raise ClientClosedError("producer is not started or closed")
        if msg.topic not in self._lanes:
            check_topic(msg.topic)
        body = msg.body
        if type(body) is not bytes:  # a copy of a bytearray's or memoryview's (no call else)
            body = bytes(body)
        if not 0 < len(body) <= self._max_size:
            check_body(msg, self._max_size)
        if msg.properties or msg.tags or msg.keys:
            text, data, msg_id = properties_with_id(msg)
            record = pack_record(body, data, msg.flag)
            return _Waiting(msg, body, text, record, msg_id, deadline, done, reporter, on_result)
        # and no delay, timer, priority or lite topic (accepts): the id alone
        record, msg_id = id_record(body, msg.flag)
        return _Waiting(msg, body, None, record, msg_id, deadline, done, reporter, on_result)

    def _enqueue(self, waiting: _Waiting) -> _TopicLane:
        """Queue ``waiting`` on its topic's lane and see that a request takes it."""
        topic = waiting.msg.topic
        lane = self._lanes.get(topic)
        if lane is None:
            lane = self._lanes[topic] = _TopicLane()
        lane.waiting.append(waiting)
        lane.waiting_bytes += len(waiting.body)
        # A worker about to take (woken, or after its answer) takes it too, under load
        # the common case: checked here, without ``_kick``'s two calls a message.
        if lane.workers - lane.idle <= lane.in_flight:
            self._kick(topic, lane, waiting.deadline)
        return lane

    def _kick(self, topic: str, lane: _TopicLane, deadline: float) -> None:
        """See that a request takes what waits in ``lane`` (the newest with
        ``deadline``) once one may leave (module docstring)."""
        if not self._send_now(topic, lane):
            self._watch(deadline)

    def _send_now(self, topic: str, lane: _TopicLane) -> bool:
        """Have a request take what waits in ``lane`` now if one is free; whether one
        will (else the next answer takes it)."""
        if lane.workers - lane.idle > lane.in_flight:
            return True  # a worker about to take (woken, or after its answer) takes it too
        if lane.idle:
            lane.wake.notify()  # a worker takes it (and whatever else came) at once
        elif lane.workers < self._requests:
            self._start_worker(topic, lane)  # a request slot to spare: it leaves now
        else:
            return False
        return True

    def _more_may_come(self, under_way: int) -> bool:
        """Whether less than a full batch should wait for more while ``under_way``
        requests of its topic are: not while every ``start_send`` slot is taken (nothing
        can arrive before an answer) and fewer than two are under way. Two requests are
        the pipeline that a number of slots allows (one at the broker while the client
        works on the other's answer: benchmarks/README.md, "Goal 3, round 8"); waiting
        with one left it alone until the delay or its answer (64 slots and batches of
        33: 31 sends waited, "Goal 3, round 12"). With two under way the wait stands,
        so that what is left over rides with the next answer's sends instead of in a
        small request of its own."""
        return under_way >= 2 or self.started_slots.value > 0

    def _linger_over(self, topic: str, lane: _TopicLane, now: float) -> float:
        """What a request could not carry has waited ``batch_max_delay``: a free request
        takes it, partial; else when to look again."""
        if not lane.waiting:
            lane.linger_until = math.inf
        elif lane.linger_until <= now:
            lane.linger_until = math.inf  # the next take with a leftover sets it again
            self._send_now(topic, lane)  # none free: the next answer takes it
        return lane.linger_until

    def _linger(self, lane: _TopicLane, now: float) -> None:
        """What waits in ``lane`` leaves with the next answer or arrival, or in a free
        request after ``batch_max_delay``: the sweeper watches it."""
        lane.linger_until = now + self._delay
        self._watch(min(_earliest(lane), lane.linger_until))

    def _watch(self, deadline: float) -> None:
        """A message with ``deadline`` waits for a busy request: the sweeper watches it."""
        if deadline < self._next_expiry:
            self._expiry.notify()

    async def _wait(self, waiting: _Waiting) -> SendResult:
        if self._tg is None:
            raise ClientClosedError("producer is closed")
        done = waiting.done
        assert done is not None
        lane = self._enqueue(waiting)
        try:
            await done.wait()
        finally:
            if not waiting.taken:  # cancelled while waiting: take it back
                waiting.taken = True
                lane.waiting.remove(waiting)
                lane.waiting_bytes -= len(waiting.body)
            elif not waiting.answered:  # cancelled in a request: leave its retries
                waiting.gone = True
        if waiting.error is not None:
            raise waiting.error
        assert waiting.result is not None
        return waiting.result

    async def _expire_loop(self) -> None:
        """Fail messages still waiting at their deadline (they were never sent), and
        answer those whose request runs on for a later caller (they may be stored); end
        the workers of a topic idle for ``WORKER_IDLE_EXIT`` (their own timer, a cancel
        scope per idle wait, cost more than a batch's request took)."""
        assert self._loop is not None
        now_of = self._loop.now
        while True:
            now, earliest = now_of(), math.inf
            for topic, lane in self._lanes.items():
                late = _expire(lane, now)
                linger = self._linger_over(topic, lane, now)
                earliest = min(earliest, late, linger, _retire_if_idle(lane, now))
            earliest = min(earliest, _expire_riders(self._riding, now))
            self._next_expiry = earliest
            with anyio.move_on_after(earliest - now):
                await self._expiry.wait()

    def _start_worker(self, topic: str, lane: _TopicLane) -> None:
        if self._tg is None:  # closing: close() fails whatever still waits
            return
        if not lane.workers:  # the sweeper must look at it when it may have gone idle
            assert self._loop is not None
            if self._loop.now() + WORKER_IDLE_EXIT < self._next_expiry:
                self._expiry.notify()
        lane.workers += 1
        self._tg.start_soon(self._lane_worker, topic, lane)

    def _take(self, topic: str, lane: _TopicLane) -> list[_Waiting]:
        """The next request's messages: all that wait, up to ``batch_max_bytes`` of
        bodies (Java's ``holdSize`` counts bodies: a 32 KiB batch is 32 messages of 1 KiB,
        not the 30 whose records fit) and ``max_message_size`` of records (what the
        broker stores of one batch request)."""
        assert self._loop is not None
        max_bytes, max_records, now = self._full, self._max_size, self._loop.now()
        batch: list[_Waiting] = []
        waiting = lane.waiting
        # Locals, and the lane's byte count updated once: this loop runs a message
        size = taken = 0  # the bodies' bytes in ``batch``; taken out of ``waiting``
        records = 0  # the records' bytes in ``batch``
        while waiting:
            nxt = waiting[0]
            n, r = len(nxt.body), len(nxt.record)
            # ``records``: ``batch`` is not empty (a message alone goes whatever its size)
            if records and (size + n > max_bytes or records + r > max_records):
                break
            waiting.popleft()
            nxt.taken = True
            taken += n
            if nxt.deadline <= now:  # its caller is giving up: do not send it
                lane.waiting_bytes -= taken  # (``finish`` may call back into the lane)
                taken = 0
                nxt.finish(None, RequestTimeoutError(f"send to {topic!r} timed out waiting"))
                continue
            batch.append(nxt)
            size += n
            records += r
        lane.waiting_bytes -= taken
        # Full: one more message of the batch's mean size would not have fit
        count = len(batch) or 1
        lane.took_full = (
            size + size // count > max_bytes or records + records // count > max_records
        )
        return batch

    async def _lane_worker(self, topic: str, lane: _TopicLane) -> None:
        """One of the topic's request slots: sends what waits, one request at a time.

        The workers of a topic idle for ``WORKER_IDLE_EXIT`` seconds end (the sweeper
        retires them; the next message of the topic starts another), so a producer that
        wrote to many topics keeps no tasks for them.
        """
        assert self._loop is not None
        now_of = self._loop.now
        answered = False  # the take after this worker's answer (and its passes)
        me = object()  # this worker's ``lane.turn``
        try:
            while True:
                if (
                    answered and lane.in_flight and lane.waiting_bytes < self._full
                    and self._more_may_come(lane.in_flight)
                ):  # fmt: skip
                    # Less than a full batch while another request is under way: it
                    # waits for that answer, an arrival or the delay (module docstring),
                    # as what a request could not carry does, so requests merge again.
                    batch = []
                    if lane.waiting:
                        self._linger(lane, now_of())
                else:
                    batch = self._take(topic, lane) if self._tg is not None else []
                answered = False
                if lane.turn is me:  # its next request leaves (or none): the next answer's turn
                    self._give_turn(lane, later=bool(batch))
                if not batch:
                    lane.idle += 1
                    lane.idle_since = now_of()
                    try:
                        await lane.wake.wait()
                    finally:
                        lane.idle -= 1
                    if lane.retire and not lane.waiting:
                        return
                    continue
                lane.retire = False
                lane.in_flight += 1
                if lane.waiting:  # more than a request carries waited (module docstring)
                    # A full batch leaves now, and so does what no arrival can fill
                    if lane.waiting_bytes >= self._full or not self._more_may_come(lane.in_flight):
                        self._kick(topic, lane, _earliest(lane))
                    else:  # the next answer or arrival, or a free request after the delay
                        self._linger(lane, now_of())
                try:
                    # Only a full request's answer takes the turn: its freed sends fill
                    # the next one (a paced producer's partial requests wait for none)
                    await self._run(topic, batch, lane, me if lane.took_full else None)
                finally:
                    lane.in_flight -= 1
                    self._finished.notify()
                # The answers freed their callers' slots and woke them: let them send
                # again before the next take, so that request carries their messages too
                # (without it, batches held what one answer freed). Two passes: trio
                # runs the tasks woken together in a random order.
                await anyio.lowlevel.checkpoint()
                await anyio.lowlevel.checkpoint()
                answered = True
        finally:
            if lane.turn is me:
                self._give_turn(lane, later=False)
            lane.workers -= 1
            if not (lane.workers or lane.waiting) and self._lanes.get(topic) is lane:
                del self._lanes[topic]

    def _give_turn(self, lane: _TopicLane, later: bool) -> None:
        """The holder of ``lane.turn`` is done with its answer. ``later``: it is about
        to hand its next request to the connection, whose write to the socket is queued
        behind the running task (asyncio: remoting's ``ProtocolWire``): the turn stays
        taken until that write has run, so no other answer of the topic is handled
        before it. (Over gRPC the request's frames are written on their own schedule:
        there the loop pass only orders the answers, which is all the turn is for.)"""
        call_soon = self._loop.call_soon if later and self._loop is not None else None
        if call_soon is None:
            lane.turn = None
            lane.turned.notify()
        else:
            lane.turn = _LEAVING
            call_soon(partial(_turn_over, lane))

    async def _run(
        self, topic: str, batch: list[_Waiting], lane: _TopicLane, me: object | None
    ) -> None:
        sender = self._sender
        # The request runs while any caller waits; the sweeper answers the others.
        deadlines = [w.deadline for w in batch]
        deadline, first = max(deadlines), min(deadlines)
        riding = first < deadline
        if riding:
            self._riding.append(batch)
            if first < self._next_expiry:
                self._expiry.notify()
        try:
            plan = sender.plan(batch[0].msg, None, None, None)
            await sender.acquire(deadline)
            try:
                sent, results = await self._request(topic, batch, plan, deadline)
            finally:
                sender.release()
        except Exception as exc:  # every caller gets it; the producer's task group lives on
            for w in batch:
                w.finish(None, exc)
        except BaseException:
            closed = ClientClosedError("the producer closed before the batch was answered")
            for w in batch:
                w.finish(None, closed)
            raise
        else:
            try:
                # Another worker of the topic handles its answer: its next request
                # leaves before this answer frees more sends (module docstring)
                while lane.turn is not None:
                    await lane.turned.wait()
                if me is not None and not self.started_slots.value:
                    # A full request's (``_lane_worker``) while every ``start_send``
                    # slot is taken: its answer's sends are the next request's
                    lane.turn = me
            finally:  # cancelled in the wait: the answer still reaches its callers
                self._answer(sent, results)
                for w in batch:  # left before the last attempt, which did not carry it
                    if not w.answered:
                        w.finish(None, RequestTimeoutError(f"send to {topic!r} timed out"))
        finally:
            if riding:
                self._riding[:] = [b for b in self._riding if b is not batch]

    def _answer(self, sent: list[_Waiting], results: list[SendResult]) -> None:
        """``_Waiting.finish`` of each of ``sent`` with its result, in one pass: the
        reporters' part (``_Reporter.answer``) inline and each reporter woken once, not
        per message (the answer's handling is part of the turnaround between an answer
        and the next request: benchmarks/README.md, "Goal 3, round 9")."""
        woken: _Reporter | None = None
        freed = 0  # ``start_send`` slots, given back at once
        try:
            for w, result in zip(sent, results, strict=True):
                if w.answered:  # the sweeper answered it (its timeout)
                    continue
                w.answered = True
                w.result = result
                done = w.done
                if done is not None:
                    done.set()
                    continue
                reporter = w.reporter
                assert reporter is not None
                reporter.unanswered.discard(w)
                freed += 1
                reporter.answered.append(w)
                if reporter is not woken:  # a notify per message was a call per message
                    reporter.wake.notify()
                    woken = reporter
        finally:
            if freed:
                self.started_slots.release(freed)

    async def _request(
        self, topic: str, batch: list[_Waiting], plan: Plan, deadline: float
    ) -> tuple[list[_Waiting], list[SendResult]]:
        """Send ``batch``, each retry with the messages whose callers still wait; the
        messages of the attempt that succeeded, and their results."""
        assert self._loop is not None
        now = self._loop.now
        sent = batch
        single = len(batch) == 1
        out = self._outgoing(topic, batch, single)

        def retry() -> tuple[Outgoing, float] | None:
            nonlocal sent, out
            still = still_waiting(sent, now())
            if not still:
                return None
            if len(still) != len(sent):
                sent, out = still, self._outgoing(topic, still, single)
            return out, latest_deadline(still)

        if single:
            return sent, [await self._sender.send(out, plan, deadline, retry=retry)]
        self.batches += 1
        self.batched_messages += len(batch)
        result = await self._sender.send(out, plan, deadline, batch=True, retry=retry)
        return sent, split_batch_result(result, [w.msg_id for w in sent])

    @staticmethod
    def _outgoing(topic: str, batch: list[_Waiting], single: bool) -> Outgoing:
        if single:  # exactly what a send without batching would be
            w = batch[0]
            text = id_text(w.msg_id) if w.properties is None else w.properties
            return Outgoing(topic, w.body, text, 0, w.msg_id, w.msg.flag)
        # A batch request (one that lost callers stays one: its request code is set).
        body = b"".join([w.record for w in batch])
        # The batch's own properties are appended to every message's: keep them empty.
        return Outgoing(topic, body, "", 0, create_unique_id())

    async def drain(self) -> None:
        """Wait until no message waits and no request is under way."""
        while any(lane.waiting or lane.in_flight for lane in self._lanes.values()):
            await self._finished.wait()

    def close(self) -> None:
        """Fail the messages still waiting (the producer is closing)."""
        self._tg = None
        for lane in self._lanes.values():
            while lane.waiting:
                w = lane.waiting.popleft()
                lane.waiting_bytes -= len(w.body)
                w.taken = True
                w.finish(None, ClientClosedError("the producer closed before the message left"))
