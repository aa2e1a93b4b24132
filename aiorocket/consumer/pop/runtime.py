"""The pop consumer runtime: a ``PopSource`` (a Proxy over gRPC, or the brokers over
remoting) and its lifecycle.

It builds, starts and stops the pop parts (source, receivers, renewer, acks, settler)
around the *shared* delivery strategy and handler, exactly as the remoting
``Engine`` does around its pullers. Everything runs in
one task group it owns; the source, that task group, the lite subscriptions and the
close's steps are entered by ``PopRuntime.start`` into one exit stack, which
``PopRuntime.close`` (or a failed start) unwinds in reverse order, every step even when
one fails (``aiorocket._tasks``).

The close, in order (each network step shielded and bounded, so a cancelled close
still leaves nothing behind):

1. stop receiving (a receive in flight is cancelled: what it popped comes back after
   the invisible time; over remoting the connection of a cut long poll is closed, so
   the broker does not answer it while the close goes on; an ack in flight on that
   connection is sent again at once on a new one, no failed ack);
2. a lite consumer drops its lite subscriptions on the servers (COMPLETE_REMOVE, once
   a resync in flight is answered, so the servers do not apply that after it), so
   they stop reserving this client's lite topics' messages for it, *before* anything
   is released: a released lite message is announced to the lite topic's subscribers
   (the 5.5 broker's LiteEventDispatcher), and while this client is one, a receive it
   cut but the Proxy still holds (a cut gRPC stream does not end the Proxy's long poll
   at the broker) pops it again, with the rest of its lite topic, into a stream nobody
   reads: the Proxy's nack of those names the parent topic, which the broker ignores
   for a lite message, so they stayed invisible for the receive's whole invisible time
   (30 s) instead of going to the next member (the CI failure of
   tests/integration/test_lite.py::test_messages_unsettled_at_close_come_back[grpc]);
3. hand back what was queued but never started: made visible again at once; and
   meanwhile
4. let running handlers finish within ``shutdown_timeout`` (graceful), then cancel
   (at the same time as 3: the timeout runs from the close, not from the end of the
   hand-back, which takes seconds for a full cache);
5. release every message still unsettled (a cancelled handler's, a FIFO group's
   buffer, an ``async for`` loop's, one whose nack failed so far and waits for its
   retry): visible again at once; but not one a synchronous handler's thread still
   works on (threads cannot be stopped): it stays invisible until its invisible time
   ends;
6. stop renewing; send every ack owed (retrying within the bound), log how many could
   not be sent and release those (visible again at once);
7. end the session.

A lite consumer (``state.lite``) sends its whole set of lite subscriptions once the
source is open and before the first receive, then every ``lite.RESYNC_INTERVAL``.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AsyncExitStack
from functools import partial
from typing import TYPE_CHECKING

import anyio

from aiorocket._tasks import BackgroundTasks, close_bound
from aiorocket.consumer.delivery import DeliveryFactory, DeliveryParts
from aiorocket.consumer.pop.acks import AckBatcher
from aiorocket.consumer.pop.in_hand import InHand
from aiorocket.consumer.pop.lite import LiteAction, Sync
from aiorocket.consumer.pop.queue import PopQueues
from aiorocket.consumer.pop.receiver import Receiver
from aiorocket.consumer.pop.renewer import Renewer
from aiorocket.consumer.pop.settler import PopSettler, max_attempts
from aiorocket.consumer.process_queue import CacheBudget
from aiorocket.errors import RocketMQError, UnsupportedTransportError
from aiorocket.received import PopMessage

if TYPE_CHECKING:
    from aiorocket.consumer.delivery import Delivery
    from aiorocket.consumer.pop.source import PopSource
    from aiorocket.consumer.state import ConsumerState
    from aiorocket.consumer.threads import HandlerThreads

__all__ = ["MAX_CACHE_BYTES", "PopRuntime"]

#: acks queued within this many seconds share a request
ACK_DELAY = 0.005
#: body bytes the cache may hold before receiving pauses (Java 5.x: 64 MiB)
MAX_CACHE_BYTES = 64 * 1024 * 1024
#: messages the cache may hold when ``pull_threshold_for_all`` is not set (Java 5.x)
DEFAULT_MAX_CACHE = 1024


class PopRuntime:
    """Runs one consumer's pop source and delivery.

    Parameters
    ----------
    state:
        The consumer's shared state (group, subscriptions, configuration, logger).
    source:
        Where messages are popped (not yet opened).
    delivery:
        Builds the delivery strategy (the same factories as the remoting engine's).
    transport:
        What the logs name: ``"grpc"`` or ``"remoting"``.
    threads:
        Where a synchronous handler runs: the close does not release a message whose
        call it gave up while its thread still runs (see step 4).
    """

    def __init__(
        self,
        state: ConsumerState,
        source: PopSource,
        *,
        delivery: DeliveryFactory,
        transport: str,
        threads: HandlerThreads | None = None,
    ) -> None:
        self.state = state
        self._threads = threads
        self.source = source
        self._make_delivery = delivery
        self._transport = transport
        cfg = state.config
        self.budget = CacheBudget(cfg.pull_threshold_for_all or DEFAULT_MAX_CACHE, MAX_CACHE_BYTES)
        self.opened = False
        self.delivery: Delivery
        self.settler: PopSettler
        self.acks: AckBatcher
        self.renewer: Renewer
        self.receiver: Receiver
        self.in_hand: InHand
        self.fifo = False
        #: the started runtime's parts, unwound by the close (aiorocket._tasks)
        self._stack: AsyncExitStack | None = None
        self._receiving = anyio.CancelScope()
        self._closed = False
        #: the close lets running handlers finish (a failed start does not)
        self._graceful = False
        #: acks the close could not deliver, then released (see AckBatcher.close)
        self.unsent_acks = 0

    @property
    def started(self) -> bool:
        return self.opened and not self._closed

    @property
    def client_id(self) -> str:
        return self.source.client_id

    # -- lifecycle -----------------------------------------------------------------

    async def start(self) -> None:
        state = self.state
        # One stack (aiorocket._tasks), unwound in reverse at close, or here when a step
        # of the start fails: the close's steps, the lite subscriptions, the background
        # tasks, the source.
        try:
            async with AsyncExitStack() as stack:
                await self.source.open()
                self.opened = True
                stack.push_async_callback(self.source.close)
                if state.tracer is not None:  # flushed after the handlers end
                    sender = self.source.trace_sender()
                    await stack.enter_async_context(state.tracer.running(sender))
                self._build()
                tg = await stack.enter_async_context(BackgroundTasks())
                await self._attach_lite()
                # Unwound in reverse: the lite subscriptions are dropped before the
                # wind-down releases anything (step 2 of the module docstring), and the
                # wind-down still runs when dropping them fails.
                stack.push_async_callback(self._wind_down)
                stack.push_async_callback(self._detach_lite)
                tg.start_soon(self.acks.run)
                tg.start_soon(self.settler.run)
                tg.start_soon(self.renewer.run)
                tg.start_soon(self.source.run)
                if state.lite is not None:
                    tg.start_soon(state.lite.run)
                await self.delivery.start(tg)
                tg.start_soon(self._receive)
                self._stack = stack.pop_all()
        except BaseException:
            self._closed = True  # unwound: nothing runs, and nothing is left to close
            raise
        state.log.info("consumer_started", topics=sorted(state.subscriptions),
                       transport=self._transport, fifo=self.fifo,
                       max_attempts=self.settler.max_attempts)  # fmt: skip

    def _build(self) -> None:
        """The parts, from the server's settings (FIFO, retry policy)."""
        state = self.state
        cfg = state.config
        source = self.source
        state.log = state.log.bind(client_id=source.client_id)
        self.fifo = source.fifo
        attempts = max_attempts(source.server_max_attempts, cfg.max_reconsume_times)
        bound = self._bound
        self.renewer = Renewer(
            source.change_invisible, invisible=cfg.invisible_duration,
            request_timeout=cfg.request_timeout, on_lost=self._lost, is_lost=source.lost,
            log=state.log,
        )  # fmt: skip
        # In hand until its ack is done with, as the renewer holds it (in_hand): a copy
        # the Proxy hands back meanwhile is acked, not handled again.
        in_hand = self.in_hand = InHand(partial(self.renewer.held, owed=True))
        forget = self.renewer.forget

        def settled(msg: PopMessage) -> None:
            """Settled, or its ack done with: each lets go once both are."""
            in_hand.settled(msg)
            forget(msg)

        self.acks = AckBatcher(
            source, ACK_DELAY, release=lambda msgs: self.settler.make_visible(msgs, bound),
            forget=settled,
        )  # fmt: skip
        # What a release of everything this client holds (gRPC's termination after a
        # broken receive) would free and hand out again: the successes whose ack waits
        # for its retry go first, without their backoff (grpc_receive seed 42000).
        source.acks_before_release(self.acks.send_owed)
        self.settler = PopSettler(
            source, self.acks, max_attempts=attempts, backoff=source.backoff,
            retry_pause=source.retry_pause, log=state.log,
        )  # fmt: skip
        self.delivery = self._make_delivery(
            DeliveryParts(
                state=state, settler=self.settler, ordered=self.fifo, commits=None, locks=None
            )
        )
        self.receiver = Receiver(
            source, PopQueues(self.budget, fifo=self.fifo, on_settled=settled),
            self.budget, self.renewer, in_hand,
            self.settler, self.delivery, state.log,
            batch_size=cfg.pull_batch_size, invisible=cfg.invisible_duration,
            pauses=state.pauses, topics=state.subscriptions.keys(),
            release=lambda msgs: self.settler.release(msgs, bound), rate=state.rate,
            topic_rates=state.topic_rates,
        )  # fmt: skip

    async def _attach_lite(self) -> None:
        """A lite consumer: its subscriptions go through the source from now on, and the
        servers get the whole set before the first receive."""
        lite = self.state.lite
        if lite is None:
            return
        sync = getattr(self.source, "sync_lite", None)
        if sync is None:
            raise UnsupportedTransportError(
                f"lite consumption is not available over {self._transport} yet"
            )
        lite.attach(sync)
        try:
            await lite.resync()
        except BaseException:
            lite.attach(None)
            # The servers may hold this client id's subscriptions all the same: the
            # COMPLETE_ADD went through when a start offset's PARTIAL_ADD after it
            # failed, and a failed or timed-out request may still be applied (a 5.5
            # broker applies a LITE_SUBSCRIPTION_CTL whenever it processes it, whoever
            # gave up on it). A broker keeps an idle client id's for minutes (its check:
            # 3 min, every 2); meanwhile this dead client id shares the lite topics with
            # the next start's client (their events handed to either) or, in an
            # exclusive group, takes from it those it adds with a start offset. Removed
            # here as the close removes them (found with the simulator's lite_remoting
            # 4244, where a late COMPLETE_ADD of a failed start's client id was applied).
            await self._remove_lite(sync)
            raise

    async def _detach_lite(self) -> None:
        lite = self.state.lite
        if lite is None or not lite.attached:
            return
        sync = getattr(self.source, "sync_lite", None)
        # A resync or subscription in flight first (LiteSubscriptions.detach), within its
        # own bound: the remove then has the whole of its own.
        with anyio.move_on_after(self._bound, shield=True):
            await lite.detach()
        if sync is not None:
            await self._remove_lite(sync)

    async def _remove_lite(self, sync: Sync) -> None:
        """COMPLETE_REMOVE of this client's lite subscriptions (shielded, bounded; a
        failure is logged: the servers drop an idle client's in time)."""
        with anyio.move_on_after(self._bound, shield=True):
            try:
                await sync(LiteAction.COMPLETE_REMOVE, ())
            except RocketMQError as err:
                self.state.log.info("lite_unsubscribe_failed", error=str(err))

    def _lost(self, msg: PopMessage) -> None:
        """The server refused a renewal for good: the message is no longer ours."""
        if not msg._settled:
            msg._settled = True
            if msg._pq is not None:
                msg._pq.on_done(msg, 0)

    async def _receive(self) -> None:
        with self._receiving:
            async with anyio.create_task_group() as tg:
                topics = list(self.state.subscriptions)
                rates = self.state.topic_rates
                own = [] if rates is None else rates.limited(topics)
                if len(own) < len(topics):  # some topic is not limited: the shared loops
                    for _ in range(self.source.receivers):
                        tg.start_soon(self.receiver.run)
                    # Not under max_rate: the limit, not a backlog, sets the pace there,
                    # and its burst allows a batch per loop of the shared ones only
                    # (aiorocket.consumer.rate; the simulator's grpc_receive seed 6).
                    extra = 0 if self.state.rate is not None else self.source.behind_receivers
                    for _ in range(extra):
                        tg.start_soon(partial(self.receiver.run, extra=True))
                for topic in own:  # topic_max_rate: a loop each (aiorocket.consumer.rate)
                    tg.start_soon(self.receiver.run, topic)

    async def close(self, *, graceful: bool) -> None:
        """Stop as the module docstring says; idempotent."""
        if self._closed:
            return
        self._closed = True
        self._graceful = graceful
        self.state.closing = True
        self._receiving.cancel()
        stack, self._stack = self._stack, None
        try:
            if stack is not None:
                await stack.aclose()
        finally:
            self.state.log.info("consumer_closed", graceful=graceful, transport=self._transport)

    @property
    def _bound(self) -> float:
        """Seconds each network step of the close may take."""
        return close_bound(self.state.config.request_timeout)

    async def _wind_down(self) -> None:
        """Steps 1 and 3-6 of the close (shielded): the background tasks still run."""
        self.state.closing = True
        self._receiving.cancel()
        bound = self._bound
        with anyio.CancelScope(shield=True):
            unstarted = self.delivery.stop()
            async with anyio.create_task_group() as releasing:
                releasing.start_soon(self._release, unstarted, bound, "unstarted")
                await self.delivery.drain(graceful=self._graceful)
            await self._release(self._unsettled(), bound, "unsettled")
            backlog = self.settler.backlog
            if backlog:  # nacks that failed so far: released rather than held
                failed = await self.settler.close(bound)
                self.state.log.info("messages_released", what="nacks_not_delivered",
                                    n=backlog, failed=failed)  # fmt: skip
            unacked = await self.acks.close(bound)
            self.unsent_acks = len(unacked)
            if unacked:  # else a renewing Proxy would hold them until we are gone
                await self.settler.make_visible(unacked, bound)

    def _unsettled(self) -> list[PopMessage]:
        """What the close releases: every unsettled message but those a handler thread
        it gave up on still works on (one cannot be stopped; released, the message would
        be handled by another member at the same time): they stay invisible until their
        invisible time ends, and come back then."""
        held = self.renewer.held()
        if self._threads is None:
            return held
        running = [m for m in self._threads.still_running() if isinstance(m, PopMessage)]
        # and its copies delivered again meanwhile (in_hand): the same message
        busy = {id(m) for m in running} | {id(c) for m in running for c in m._copies or ()}
        left = [m for m in held if id(m) not in busy]
        if len(left) < len(held):
            self.state.log.warning(
                "messages_left_to_running_threads", n=len(held) - len(left),
                hint="handler threads that overran the close still work on them: not "
                "released, they come back after their invisible time",
            )  # fmt: skip
        return left

    async def _release(self, messages: Sequence[object], bound: float, what: str) -> None:
        pops = [m for m in messages if isinstance(m, PopMessage) and not m._settled]
        if not pops:
            return
        failed = await self.settler.release(pops, bound)
        self.state.log.info("messages_released", what=what, n=len(pops), failed=failed)
