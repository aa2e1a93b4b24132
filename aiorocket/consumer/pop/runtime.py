"""The consumer runtime over a 5.x Proxy: the gRPC message source and its lifecycle.

It builds, starts and stops the gRPC parts (session, receivers, renewer, acks, settler)
around the *shared* delivery strategy and handler, exactly as the remoting
``Engine`` does around its pullers. Everything runs in
one task group it owns (entered by ``GrpcRuntime.start``, left by
``GrpcRuntime.close``).

The close, in order (each network step shielded and bounded, so a cancelled close
still leaves nothing behind):

1. stop receiving (a receive in flight is cancelled: what it popped comes back after
   the invisible time);
2. hand back what was queued but never started: made visible again at once;
3. let running handlers finish within ``shutdown_timeout`` (graceful), then cancel;
4. release every message still unsettled (a cancelled handler's, a FIFO group's
   buffer, an ``async for`` loop's): visible again at once;
5. stop renewing; send every ack owed, and log how many could not be sent;
6. end the session.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import anyio
import anyio.abc

from aiorocket.consumer.delivery import DeliveryFactory, DeliveryParts
from aiorocket.consumer.pop.queue import PopQueues
from aiorocket.consumer.pop.receiver import Receiver
from aiorocket.consumer.pop.renewer import Renewer
from aiorocket.consumer.pop.settler import GrpcSettler, max_attempts
from aiorocket.consumer.process_queue import CacheBudget
from aiorocket.grpc import _pb as pb
from aiorocket.grpc._acks import AckBatcher
from aiorocket.grpc._push_message import PopMessage
from aiorocket.grpc._session import backoff_delays, ensure_asyncio
from aiorocket.grpc._simple import SimpleConsumer
from aiorocket.grpc._transport import GrpcOptions, with_security

if TYPE_CHECKING:
    from aiorocket.consumer.delivery import Delivery
    from aiorocket.consumer.state import ConsumerState

__all__ = ["MAX_CACHE_BYTES", "RECEIVERS", "GrpcRuntime"]

#: receive loops at once
RECEIVERS = 2
#: acks queued within this many seconds share a request
ACK_DELAY = 0.005
#: body bytes the cache may hold before receiving pauses (Java 5.x: 64 MiB)
MAX_CACHE_BYTES = 64 * 1024 * 1024
#: messages the cache may hold when ``pull_threshold_for_all`` is not set (Java 5.x)
DEFAULT_MAX_CACHE = 1024


class GrpcRuntime:
    """Runs one consumer's gRPC source and delivery.

    Parameters
    ----------
    state:
        The consumer's shared state (group, subscriptions, configuration, logger).
    endpoint:
        The Proxy's ``host:port``.
    delivery:
        Builds the delivery strategy (the same factories as the remoting engine's).
    options:
        TLS, namespace and ACL credentials (merged with the configuration's).
    client_id:
        This client's id (default: made by the transport).
    """

    def __init__(
        self,
        state: ConsumerState,
        endpoint: str,
        *,
        delivery: DeliveryFactory,
        options: GrpcOptions | None,
        client_id: str | None,
    ) -> None:
        self.state = state
        self._endpoint = endpoint
        self._make_delivery = delivery
        self._options = options
        self._client_id = client_id
        cfg = state.config
        self.budget = CacheBudget(cfg.pull_threshold_for_all or DEFAULT_MAX_CACHE, MAX_CACHE_BYTES)
        self.session: SimpleConsumer | None = None
        self.delivery: Delivery
        self.settler: GrpcSettler
        self.acks: AckBatcher
        self.renewer: Renewer
        self.fifo = False
        self._tg: anyio.abc.TaskGroup | None = None
        self._receiving = anyio.CancelScope()
        self._closed = False
        #: acks the close could not deliver (see AckBatcher.close)
        self.unsent_acks = 0

    @property
    def started(self) -> bool:
        return self.session is not None and not self._closed

    @property
    def client_id(self) -> str:
        assert self.session is not None
        return self.session.transport.client_id

    # -- lifecycle -----------------------------------------------------------------

    async def start(self) -> None:
        ensure_asyncio("Consumer")
        state = self.state
        cfg = state.config
        subscriptions = {topic: sub.expression for topic, sub in state.subscriptions.items()}
        session = SimpleConsumer(
            state.group, self._endpoint, subscriptions,
            # The Proxy holds a receive 5-20 s.
            await_duration=min(max(cfg.long_poll_timeout, 5.0), 20.0),
            request_timeout=cfg.request_timeout,
            options=with_security(self._options, cfg.credentials, cfg.tls, cfg.namespace),
            client_id=self._client_id, client_type=pb.ClientType.PUSH_CONSUMER,
        )  # fmt: skip
        await session.__aenter__()
        self.session = session
        try:
            self._build(session)
            tg = anyio.create_task_group()
            await tg.__aenter__()
            self._tg = tg
        except BaseException:
            await session.__aexit__(None, None, None)
            raise
        try:
            tg.start_soon(self.acks.run)
            tg.start_soon(self.renewer.run)
            await self.delivery.start(tg)
            tg.start_soon(self._receive)
        except BaseException:
            await self.close(graceful=False)
            raise
        state.log.info("consumer_started", topics=sorted(state.subscriptions), transport="grpc",
                       fifo=self.fifo, max_attempts=self.settler.max_attempts)  # fmt: skip

    def _build(self, session: SimpleConsumer) -> None:
        """The parts, from the Proxy's merged settings (FIFO, retry policy)."""
        state = self.state
        cfg = state.config
        state.log = state.log.bind(client_id=session.transport.client_id)
        sub = session.session.subscription()
        self.fifo = bool(sub is not None and sub.fifo)
        policy = session.session.retry_policy()
        server_max = policy.max_attempts if policy is not None else 0
        self.acks = AckBatcher(session, ACK_DELAY)
        self.settler = GrpcSettler(
            session, self.acks, max_attempts=max_attempts(server_max, cfg.max_reconsume_times),
            backoff=backoff_delays(policy),
            log=state.log,
        )  # fmt: skip
        self.renewer = Renewer(
            session.change_invisible_duration, invisible=cfg.invisible_duration,
            request_timeout=cfg.request_timeout, on_lost=self._lost, log=state.log,
        )  # fmt: skip
        self.delivery = self._make_delivery(
            DeliveryParts(
                state=state, settler=self.settler, ordered=self.fifo, commits=None, locks=None
            )
        )
        self.receiver = Receiver(
            session, PopQueues(self.budget, fifo=self.fifo), self.budget, self.renewer,
            self.settler, self.delivery, state.log,
            batch_size=cfg.pull_batch_size, invisible=cfg.invisible_duration,
        )  # fmt: skip

    def _lost(self, msg: PopMessage) -> None:
        """The Proxy refused a renewal for good: the message is no longer ours."""
        if not msg._settled:
            msg._settled = True
            if msg._pq is not None:
                msg._pq.on_done(msg, 0)

    async def _receive(self) -> None:
        with self._receiving:
            async with anyio.create_task_group() as tg:
                for _ in range(RECEIVERS):
                    tg.start_soon(self.receiver.run)

    async def close(self, *, graceful: bool) -> None:
        """Stop as the module docstring says; idempotent."""
        if self._closed:
            return
        self._closed = True
        state = self.state
        state.closing = True
        self._receiving.cancel()
        bound = max(state.config.request_timeout * 2, 5.0)
        try:
            if self._tg is not None:
                with anyio.CancelScope(shield=True):
                    unstarted = self.delivery.stop()
                    await self._release(unstarted, bound, "unstarted")
                    await self.delivery.drain(graceful=graceful)
                    await self._release(self.renewer.held(), bound, "unsettled")
                    self.unsent_acks = await self.acks.close(bound)
                self._tg.cancel_scope.cancel()
                await self._tg.__aexit__(None, None, None)
        finally:
            self._tg = None
            if self.session is not None:
                await self.session.__aexit__(None, None, None)
            state.log.info("consumer_closed", graceful=graceful, transport="grpc")

    async def _release(self, messages: Sequence[object], bound: float, what: str) -> None:
        pops = [m for m in messages if isinstance(m, PopMessage) and not m._settled]
        if not pops:
            return
        failed = await self.settler.release(pops, bound)
        self.state.log.info("messages_released", what=what, n=len(pops), failed=failed)
