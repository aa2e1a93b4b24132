"""An aiorocket client kept open in a task of its own.

aiorocket's clients are ``async with`` blocks (their task groups must be left in the task
that entered them), while FastStream opens and closes a broker's parts in separate calls,
possibly from different tasks (it stops subscribers concurrently). A ``Resident`` enters
the client in a dedicated task and leaves it there when asked.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

from aiorocket._log import get_logger

__all__ = ["Resident"]

_log = get_logger("faststream")


class Resident:
    """Runs ``async with client`` in its own task between ``open()`` and ``close()``."""

    def __init__(
        self,
        client: AbstractAsyncContextManager[Any],
        name: str,
        on_failure: Callable[[BaseException], None] | None = None,
    ) -> None:
        self.client = client
        self.name = name
        #: what ended the client while it was open (it died: not closed by ``close``)
        self.failure: BaseException | None = None
        self._on_failure = on_failure
        self._task: asyncio.Task[None] | None = None
        self._leave: asyncio.Event | None = None

    @property
    def alive(self) -> bool:
        """Open: entered, not left, and not ended by a failure."""
        return self._task is not None and not self._task.done()

    async def open(self) -> None:
        """Enter the client; raises what entering raised."""
        entered: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._leave = asyncio.Event()
        self._task = asyncio.create_task(self._run(entered), name=self.name)
        await entered

    async def _run(self, entered: asyncio.Future[None]) -> None:
        assert self._leave is not None
        try:
            async with self.client:
                entered.set_result(None)
                await self._leave.wait()
        except BaseException as exc:
            if not entered.done():
                entered.set_exception(exc)
                return
            self.failure = exc
            if not isinstance(exc, asyncio.CancelledError):
                _log.error("client_failed", client=self.name, error=repr(exc))
            if self._on_failure is not None:
                self._on_failure(exc)
            raise

    async def close(self) -> None:
        """Leave the client (a consumer drains its running handlers first)."""
        task, self._task = self._task, None
        if task is None or self._leave is None:
            return
        self._leave.set()
        with contextlib.suppress(Exception):  # already logged by _run
            await task
