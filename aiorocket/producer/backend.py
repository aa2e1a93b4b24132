"""What a transport's producer engine provides to ``aiorocket.producer.Producer``.

The producer picks its engine once, at construction: the remoting one
(``aiorocket.producer.remoting.RemotingProducer``, NameServer and brokers) or the
gRPC one (``aiorocket.producer.over_grpc.GrpcEngine``, a 5.x Proxy). Both implement
``ProducerBackend``, so the public methods forward without asking which transport
they run on. A feature only one transport has is refused by the other engine with
``UnsupportedTransportError`` (``unsupported``).
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Literal, Protocol

import anyio.abc

from aiorocket.client.results import SendResult
from aiorocket.errors import ConfigError, UnsupportedTransportError
from aiorocket.message import Message
from aiorocket.producer.prepare import check_topic
from aiorocket.producer.selectors import QueueSelector
from aiorocket.producer.transaction import LocalTransaction, TransactionResult

if TYPE_CHECKING:
    from aiorocket.grpc._batcher import GrpcBatcher
    from aiorocket.producer.accumulate import AutoBatcher

__all__ = ["ProducerBackend", "ResultCallback", "declared_topics", "unsupported"]

ResultCallback = Callable[[SendResult], "Awaitable[None] | None"]


class ProducerBackend(Protocol):
    """A started-once producer engine of one transport (see the module docstring)."""

    @property
    def in_flight(self) -> int:
        """Requests holding an in-flight slot."""
        ...

    @property
    def batcher(self) -> AutoBatcher | GrpcBatcher | None:
        """The auto-batcher, once started with auto-batching on."""
        ...

    async def start(self) -> None:
        """Connect and start the background tasks; raises if started before."""
        ...

    async def close(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Let what is in flight end (bounded by ``shutdown_timeout``), then disconnect."""
        ...

    def send(
        self, msg: Message, *, timeout: float | None, sharding_key: object,
        selector: QueueSelector | None, selector_arg: object,
    ) -> Awaitable[SendResult]: ...  # fmt: skip

    def start_send(
        self, task_group: anyio.abc.TaskGroup, msg: Message, *,
        on_result: ResultCallback | None, timeout: float | None, sharding_key: object,
        selector: QueueSelector | None, selector_arg: object,
    ) -> Awaitable[None] | None:  # fmt: skip
        """None once ``msg`` is handed over without a coroutine (an auto-batched message
        while a slot is free: the common case of a loop of ``start_send``); else what
        to await to hand it over (a slot, the unbatched send's task)."""
        ...

    async def send_oneway(
        self, msg: Message, *, timeout: float | None, sharding_key: object,
        selector: QueueSelector | None, selector_arg: object,
    ) -> None: ...  # fmt: skip

    async def send_batch(
        self, messages: Sequence[Message], *, timeout: float | None, sharding_key: object,
        selector: QueueSelector | None, selector_arg: object,
    ) -> list[SendResult]: ...  # fmt: skip

    async def send_in_transaction(
        self, msg: Message, local_transaction: LocalTransaction, *, timeout: float | None
    ) -> TransactionResult: ...

    async def recall(self, topic: str, recall_handle: str) -> str:
        """Withdraw a timer message before its delivery time; its message id."""
        ...


def unsupported(feature: str, only_on: Literal["remoting", "grpc"]) -> UnsupportedTransportError:
    """The error for ``feature``, which only the ``only_on`` transport has."""
    if only_on == "remoting":
        where = "the remoting transport (a NameServer address)"
        this = "this producer talks to a gRPC Proxy"
    else:
        where = "the gRPC transport (a Proxy endpoint: proxy='host:port')"
        this = "this producer talks to a NameServer and brokers (remoting)"
    return UnsupportedTransportError(f"{feature} exists only on {where}; {this}")


def declared_topics(topics: Sequence[str]) -> tuple[str, ...]:
    """``Producer(topics=...)``: checked names, each once, in order."""
    if isinstance(topics, str):  # one topic given bare would be split into letters
        raise ConfigError(f"topics must be a list of topic names, got the string {topics!r}")
    for topic in topics:
        check_topic(topic)
    return tuple(dict.fromkeys(topics))


async def report(on_result: ResultCallback | None, result: SendResult) -> None:
    """Hand ``result`` to a ``ProducerBackend.start_send`` callback (sync or async)."""
    if on_result is not None:
        ret = on_result(result)
        if inspect.isawaitable(ret):
            await ret
