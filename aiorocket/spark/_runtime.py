"""One event loop per Python process, in a background thread, holding cached clients.

Spark calls a data source synchronously (``read()`` must return a plain iterator) and
reuses its Python worker processes across tasks and jobs. So each process runs one
asyncio loop in a daemon thread; clients and producers are opened in it on first use,
kept for the life of the process (later tasks reuse their connections), and callers
block on ``call`` / wait on ``submit`` futures. A forked child (Spark's worker
daemon forks) starts its own loop instead of inheriting a dead thread's.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import os
import threading
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

from aiorocket._loop import first_error
from aiorocket.client.instance import ClientInstance
from aiorocket.spark._options import ClientOptions, WriteOptions

if TYPE_CHECKING:
    # The producer only where one is made (the sink's tasks and commit): the source's
    # planner processes import this module and never send.
    from aiorocket.grpc._producer import GrpcProducer
    from aiorocket.message import MessageExt
    from aiorocket.producer.producer import Producer
    from aiorocket.producer.transaction import TransactionState
    from aiorocket.spark._grpc import Answers

T = TypeVar("T")


class _Runtime:
    def __init__(self) -> None:
        self.pid = os.getpid()
        self.loop = asyncio.new_event_loop()
        self._stop: asyncio.Event | None = None
        self._lock = threading.Lock()
        self._clients: dict[ClientOptions, concurrent.futures.Future[ClientInstance]] = {}
        self._producers: dict[WriteOptions, concurrent.futures.Future[Producer]] = {}
        self._senders: dict[WriteOptions, concurrent.futures.Future[Producer]] = {}
        self._checkers: dict[WriteOptions, concurrent.futures.Future[Producer]] = {}
        self._answers: dict[WriteOptions, Answers] = {}
        self._holders: list[concurrent.futures.Future[None]] = []
        self.thread = threading.Thread(
            target=self.loop.run_forever, name="aiorocket-spark", daemon=True
        )
        self.thread.start()

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the loop and wait for it; what it raised from inside a task
        group comes out as itself (Spark shows the typed error, not the group)."""
        return self.result(self.submit(coro))

    def result(self, future: concurrent.futures.Future[T]) -> T:
        """Wait for ``future`` of :meth:`submit`, raising as :meth:`run` does."""
        try:
            return future.result()
        except BaseException as exc:
            first = first_error(exc)
            if first is exc:
                raise
            raise first from exc

    async def _stop_event(self) -> asyncio.Event:
        if self._stop is None:
            self._stop = asyncio.Event()
        return self._stop

    async def _hold(
        self,
        make: Callable[[], Any],
        ready: concurrent.futures.Future[Any],
    ) -> None:
        """Own the resource ``make`` returns (an async context manager) in one task until
        shutdown. Made in the loop: a client sets up its task group as it is made."""
        stop = await self._stop_event()
        try:
            async with make() as opened:
                ready.set_result(opened)
                await stop.wait()
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc)
            raise

    def _open(self, cache: dict[Any, Any], key: Any, make: Callable[[], Any]) -> Any:
        with self._lock:
            ready = cache.get(key)
            if ready is None or (ready.done() and ready.exception() is not None):
                ready = concurrent.futures.Future()
                cache[key] = ready
                self._holders.append(self.submit(self._hold(make, ready)))
        return ready.result()

    def client(self, opts: ClientOptions) -> ClientInstance:
        return self._open(  # type: ignore[no-any-return]
            self._clients,
            opts,
            lambda: ClientInstance(
                opts.namesrv,
                request_timeout=opts.request_timeout,
                credentials=opts.credentials(),
                tls=opts.tls_setting(),
            ),
        )

    def producer(self, opts: WriteOptions) -> Producer:
        from aiorocket.producer.producer import Producer

        return self._open(  # type: ignore[no-any-return]
            self._producers,
            opts,
            lambda: Producer(
                opts.producer_group,
                opts.client.namesrv or None,
                proxy=opts.proxy,
                send_timeout=opts.send_timeout,
                retries=opts.retries,
                request_timeout=opts.client.request_timeout,
                credentials=opts.client.credentials(),
                tls=opts.client.tls_setting(),
                auto_batch=opts.auto_batch,
                # A sink task sends thousands of rows at once: let more and larger
                # batch requests per topic be under way than an interactive producer.
                batch_in_flight=8,
                batch_max_bytes=256 * 1024,
            ),
        )

    def sender(self, opts: WriteOptions) -> Producer:
        """The executors' producer of half messages (exactly-once): no resend (a lost
        answer would leave a second stored copy) and no auto-batching (the broker takes
        no half messages in batches). Its own group is not the half messages' one, so
        the broker's check-backs go to the driver, not here."""
        from aiorocket.producer.producer import Producer

        return self._open(  # type: ignore[no-any-return]
            self._senders,
            opts,
            lambda: Producer(
                f"{opts.producer_group}-send",
                opts.client.namesrv,
                send_timeout=opts.send_timeout,
                retries=0,
                request_timeout=opts.client.request_timeout,
                credentials=opts.client.credentials(),
                tls=opts.client.tls_setting(),
                auto_batch=False,
            ),
        )

    def checker(self, opts: WriteOptions) -> Producer:
        """The driver's member of the half messages' group: answers check-backs from
        the commit records (exactly-once)."""
        from aiorocket.producer.producer import Producer
        from aiorocket.spark._txn import TxnLog, verdict

        assert opts.txn_log is not None
        client = self.client(opts.client)
        txn_log = TxnLog(opts.txn_log)

        async def check(msg: MessageExt) -> TransactionState:
            return await verdict(client, txn_log, msg)

        return self._open(  # type: ignore[no-any-return]
            self._checkers,
            opts,
            lambda: Producer(
                opts.producer_group,
                opts.client.namesrv,
                request_timeout=opts.client.request_timeout,
                credentials=opts.client.credentials(),
                tls=opts.client.tls_setting(),
                transaction_checker=check,
            ),
        )

    def grpc_sender(self, opts: WriteOptions) -> GrpcProducer:
        """Exactly-once through a Proxy: the executors' sender (``_grpc.sender``)."""
        from aiorocket.spark import _grpc

        return self._open(self._senders, opts, lambda: _grpc.sender(opts))  # type: ignore[no-any-return]

    def grpc_checker(self, opts: WriteOptions) -> tuple[GrpcProducer, Answers]:
        """Exactly-once through a Proxy: the driver's producer (``_grpc.checker``) and
        the answers it gave."""
        from aiorocket.spark import _grpc
        from aiorocket.spark._txn import TxnLog

        assert opts.txn_log is not None
        with self._lock:
            answers = self._answers.setdefault(opts, _grpc.Answers(TxnLog(opts.txn_log)))
        producer = self._open(self._checkers, opts, lambda: _grpc.checker(opts, answers))
        return producer, answers

    def close(self, timeout: float = 10.0) -> None:
        """Close what the runtime holds, then stop its loop and thread and close the loop.

        Whether the thread runs, not whether its loop does yet: just after the runtime
        is made the loop may not have started, and a close that took that for "nothing
        to stop" returned while the thread went on to run the loop forever. The loop is
        stopped whatever the holders' close did (failed, or overran ``timeout``)."""

        async def stop() -> None:
            (await self._stop_event()).set()

        if not self.thread.is_alive():
            return
        try:
            self.submit(stop()).result(timeout)
            concurrent.futures.wait(self._holders, timeout)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(timeout)
            if not self.thread.is_alive():
                self.loop.close()


_runtime: _Runtime | None = None
_runtime_lock = threading.Lock()


def runtime() -> _Runtime:
    """This process's runtime, started on first use (again after a fork)."""
    global _runtime
    with _runtime_lock:
        if _runtime is None or _runtime.pid != os.getpid():
            _runtime = _Runtime()
        return _runtime


def call(fn: Callable[[ClientInstance], Awaitable[T]], opts: ClientOptions,
         timeout: float | None = None) -> T:  # fmt: skip
    """Run ``fn(client)`` on the process's loop with the cached client; wait for it."""
    rt = runtime()
    client = rt.client(opts)

    async def run() -> T:
        return await fn(client)

    return rt.submit(run()).result(timeout)


@atexit.register
def _close_at_exit() -> None:
    if _runtime is not None and _runtime.pid == os.getpid():
        _runtime.close(timeout=5.0)
