"""The gRPC producer engine: a [`Producer`][aiorocket.producer.Producer] whose endpoint is
a 5.x Proxy.

``GrpcEngine`` is the ``ProducerBackend`` over [`aiorocket.grpc`][]: it wraps the
transport's ``GrpcProducer`` (sends, batches, half messages, the session) and adds what
belongs to the producer's API: the features that exist on the remoting transport only
(``selector=``, oneway sends) raise ``UnsupportedTransportError`` naming it,
``start_send`` takes an in-flight slot before spawning, and a transaction runs the
local transaction and the checker with the producer's ``TransactionState``. Importing
this module imports the ``grpc`` extra: the producer does it at start only.
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from contextlib import AsyncExitStack
from types import TracebackType

import anyio.abc

from aiorocket._log import get_logger
from aiorocket._send_result import SendResult
from aiorocket._trace import Tracer
from aiorocket.errors import ConfigError
from aiorocket.grpc._batcher import GrpcBatcher
from aiorocket.grpc._producer import GrpcProducer
from aiorocket.grpc._trace import GrpcTraceSender
from aiorocket.grpc._transport import GrpcOptions, GrpcTransport
from aiorocket.message import Message, MessageExt
from aiorocket.producer.backend import ResultCallback, report, unsupported
from aiorocket.producer.config import ProducerConfig
from aiorocket.producer.selectors import QueueSelector
from aiorocket.producer.transaction import (
    LocalTransaction,
    TransactionChecker,
    TransactionResult,
    TransactionState,
)

__all__ = ["GrpcEngine"]


class GrpcEngine:
    """The gRPC engine of a producer (see the module docstring)."""

    def __init__(
        self,
        group: str,
        endpoint: str,
        *,
        config: ProducerConfig,
        checker: TransactionChecker | None,
        options: GrpcOptions | None,
        client_id: str | None,
        topics: Sequence[str],
        tracer: Tracer | None = None,
    ) -> None:
        self.endpoint = endpoint
        self._tracer = tracer
        #: the running tracer (its flush), unwound by the close before the session's
        self._stack: AsyncExitStack | None = None
        self._checker = checker
        self._topics = tuple(topics)
        self._grpc = GrpcProducer(
            group, endpoint, config=config, options=options, client_id=client_id,
            on_orphan=None if checker is None else self._verdict, topics=topics,
        )  # fmt: skip
        self.log = get_logger("producer", group=group, client_id=self.transport.client_id)

    @property
    def transport(self) -> GrpcTransport:
        return self._grpc.transport

    @property
    def in_flight(self) -> int:
        return self._grpc.in_flight

    @property
    def batcher(self) -> GrpcBatcher | None:
        return self._grpc.batcher

    async def start(self) -> None:
        if self._checker is not None and not self._topics:
            self.log.warning(
                "transaction_topics_undeclared",
                advice="pass topics=[...]: the Proxy asks a producer about the orphaned "
                "transactions of the topics it declared only, so the half messages a "
                "previous run left are checked only after a send to their topic",
            )
        await self._grpc.start()
        if self._tracer is not None:
            try:
                async with AsyncExitStack() as stack:
                    sender = GrpcTraceSender(self.transport)
                    await stack.enter_async_context(self._tracer.running(sender))
                    self._stack = stack.pop_all()
            except BaseException:
                await self._grpc.close(None, None, None)
                raise

    async def close(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        stack, self._stack = self._stack, None
        try:
            if stack is not None:
                await stack.aclose()  # the last traces, before the connection closes
        finally:
            await self._grpc.close(exc_type, exc, tb)

    async def recall(self, topic: str, recall_handle: str) -> str:
        return await self._grpc.recall(topic, recall_handle)

    # -- sending -------------------------------------------------------------------

    async def send(
        self, msg: Message, *, timeout: float | None, sharding_key: object,
        selector: QueueSelector | None, selector_arg: object,
    ) -> SendResult:  # fmt: skip
        _no_selector(selector)
        return await self._grpc.send(msg, timeout=timeout, sharding_key=sharding_key)

    def start_send(
        self, task_group: anyio.abc.TaskGroup, msg: Message, *,
        on_result: ResultCallback | None, timeout: float | None, sharding_key: object,
        selector: QueueSelector | None, selector_arg: object,
    ) -> Awaitable[None] | None:  # fmt: skip
        return self._start(task_group, msg, on_result, timeout, sharding_key, selector)

    async def _start(
        self, task_group: anyio.abc.TaskGroup, msg: Message, on_result: ResultCallback | None,
        timeout: float | None, sharding_key: object, selector: QueueSelector | None,
    ) -> None:  # fmt: skip
        _no_selector(selector)
        await self._grpc.acquire()
        try:
            task_group.start_soon(self._send_in_slot, msg, on_result, timeout, sharding_key)
        except BaseException:
            self._grpc.release()
            raise

    async def _send_in_slot(
        self, msg: Message, on_result: ResultCallback | None, timeout: float | None,
        sharding_key: object,
    ) -> None:  # fmt: skip
        try:
            result = await self._grpc.send(
                msg, timeout=timeout, sharding_key=sharding_key, held=True
            )
        finally:
            self._grpc.release()
        await report(on_result, result)

    async def send_oneway(
        self, msg: Message, *, timeout: float | None, sharding_key: object,
        selector: QueueSelector | None, selector_arg: object,
    ) -> None:  # fmt: skip
        raise unsupported("send_oneway", "remoting")

    async def send_batch(
        self, messages: Sequence[Message], *, timeout: float | None, sharding_key: object,
        selector: QueueSelector | None, selector_arg: object,
    ) -> list[SendResult]:  # fmt: skip
        _no_selector(selector)
        return await self._grpc.send_batch(messages, timeout=timeout, sharding_key=sharding_key)

    # -- transactions --------------------------------------------------------------

    async def send_in_transaction(
        self, msg: Message, local_transaction: LocalTransaction, *, timeout: float | None
    ) -> TransactionResult:
        if self._checker is None:
            raise ConfigError("a transactional send needs transaction_checker= on the producer")
        result = await self._grpc.send_half(msg, timeout=timeout)
        # If the local transaction raises, nothing is ended: the Proxy's recovery
        # command asks the checker later (Java sends nothing for UNKNOWN either).
        state = await local_transaction(msg, result)
        if not isinstance(state, TransactionState):
            raise ConfigError(f"local transaction returned {state!r}, not a state")
        if state is not TransactionState.UNKNOWN:
            commit = state is TransactionState.COMMIT
            await self._grpc.end(msg.topic, result.msg_id, result.transaction_id or "", commit)
        return TransactionResult(result, state)

    async def _verdict(self, msg: MessageExt) -> bool | None:
        """The checker's answer about an orphaned half message, as the transport takes it."""
        assert self._checker is not None
        state = await self._checker(msg)
        if state is TransactionState.COMMIT:
            return True
        if state is TransactionState.ROLLBACK:
            return False
        return None


def _no_selector(selector: QueueSelector | None) -> None:
    if selector is not None:  # the Proxy picks the queue
        raise unsupported("choosing the queue (selector=)", "remoting")
