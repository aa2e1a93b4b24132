"""The one lifecycle shape of a component that owns background tasks.

A component (a client instance, a gRPC session, the pop runtime, ...) starts its
background tasks in a task group it enters in ``start``/``__aenter__`` and leaves in
``close``/``__aexit__``. Entered and left by hand, an exception between the two (a
failed step of the close, a failed start after the group was entered) skips the exit:
the group's cancel scope stays open, the components under it then exit theirs out of
order ("Attempted to exit a cancel scope that isn't the current task's current cancel
scope"), and the caller's enclosing scopes break too.

So each such component builds its parts in one ``contextlib.AsyncExitStack``, entered
once: the start enters them in order inside ``async with AsyncExitStack() as stack:``
and keeps ``stack.pop_all()`` when every part is up (a failure unwinds what was
entered, then raises); the close unwinds the kept stack (``aclose``), which runs every
exit in reverse order even when one of them raises. ``BackgroundTasks`` is the task
group's entry in that stack.
"""

from __future__ import annotations

from types import TracebackType

import anyio
import anyio.abc

__all__ = ["BackgroundTasks"]


class BackgroundTasks:
    """A task group for background tasks: leaving it cancels them and waits for them.

    The exception the stack is unwinding with (the body's, or a later exit's) is not
    handed to the task group: it would come back wrapped in an ``ExceptionGroup``, and
    callers expect to catch what was raised. A background task's own failure still
    propagates (as the task group raises it).
    """

    def __init__(self) -> None:
        # The task group is made on entry, not here: anyio needs a running event loop to
        # make one, and components are built outside any (the Spark runtime builds its
        # client instance in a plain thread; tests/integration/test_construction_without_loop.py).
        self._tg: anyio.abc.TaskGroup | None = None

    async def __aenter__(self) -> anyio.abc.TaskGroup:
        tg = self._tg = anyio.create_task_group()
        await tg.__aenter__()
        return tg

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        tg, self._tg = self._tg, None
        if tg is None:
            return  # never entered
        tg.cancel_scope.cancel()
        await tg.__aexit__(None, None, None)
