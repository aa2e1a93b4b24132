"""A worker's graceful stop on SIGTERM (Kubernetes, systemd, ``docker stop``) or Ctrl-C.

Python's default for SIGTERM is to die at once: an ``anyio.run(main)`` consumer then
neither finishes its running handlers nor commits what it handled since the last
periodic commit, nor leaves its group (the broker hands its queues over only once it
notices). ``stop_on_signals`` turns the signal into the end of its own block, and
nothing more: the ``async with consumer`` around it then exits as it does after any
block, normally: the consumer stops taking messages, lets running handlers finish
(within ``shutdown_timeout``), commits and unregisters; a producer flushes:

```python
async def main() -> None:
    consumer = Consumer("orders-billing", handler=bill)
    consumer.subscribe("orders")
    async with consumer, stop_on_signals():  # the clients first, the signals last
        await anyio.sleep_forever()  # until SIGTERM or Ctrl-C (or: async for ...)


anyio.run(main)
```

The order matters: the clients outside, ``stop_on_signals()`` inside. A client whose
``async with`` is left by a cancellation (``stop_on_signals`` around it, or an outer
cancel scope) closes as cancelled: its running handlers are cut and their messages
delivered again. After the first signal the default action is back: a second SIGTERM
or Ctrl-C stops the process at once.
"""

from __future__ import annotations

import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import anyio.abc

__all__ = ["Stop", "stop_on_signals"]

#: what a process manager sends to stop a worker, and Ctrl-C
DEFAULT_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Stop:
    """What ``stop_on_signals`` yields: ``signum``, the signal that ended the block
    (None while none did)."""

    __slots__ = ("signum",)

    def __init__(self) -> None:
        self.signum: int | None = None


@asynccontextmanager
async def stop_on_signals(*signals: signal.Signals) -> AsyncIterator[Stop]:
    """End the block when one of ``signals`` (default SIGTERM and SIGINT) arrives: it
    is cancelled, and the cancellation stops at the block's end, so the code after it
    (and the ``async with`` blocks around it) runs normally. Yields a ``Stop`` whose
    ``signum`` says which signal ended it. The main thread only (it installs signal
    handlers)."""
    wanted = signals or DEFAULT_SIGNALS
    stop = Stop()
    #: the block's own exception, raised after the task group: it would wrap it in an
    #: ExceptionGroup, and the code around expects what the block raised
    raised: BaseException | None = None
    async with anyio.create_task_group() as tg:

        async def watch(*, task_status: anyio.abc.TaskStatus[None]) -> None:
            with anyio.open_signal_receiver(*wanted) as received:
                task_status.started()  # the handlers are in place: the block may begin
                async for signum in received:
                    stop.signum = signum
                    tg.cancel_scope.cancel()
                    return

        await tg.start(watch)
        try:
            yield stop
        except anyio.get_cancelled_exc_class():
            raise  # ours (a signal: stops at the group) or from outside (goes on)
        except BaseException as exc:
            raised = exc
        finally:
            tg.cancel_scope.cancel()  # the block ended: stop watching
    if raised is not None:
        raise raised
