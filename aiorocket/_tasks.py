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

Its tasks are stopped by their owner only, never by the caller's cancellation. A plain
task group entered in ``start`` lives inside the cancel scopes of the task that started
the component: the application's task cancelled from outside (``async with consumer``
or ``consumer.run()`` in a task the application cancels) cancels every background task
at once, the connections' readers among them, and the close, which runs shielded to
settle or release what the component holds, then finds its connections gone: the
messages it held stayed invisible until their invisible time ended, a leaving member
could not unregister or unlock its queues (issue 40, found by the simulator). So the
tasks run in a task group under a shielded scope, held by one task of the owner's
group: the caller's cancellation reaches the caller's own code, and the close (which
runs shielded) releases what it holds over live connections, then stops the tasks
itself (``__aexit__``). A failed start stops them the same way: its stack unwinds.
"""

from __future__ import annotations

from types import TracebackType

import anyio
import anyio.abc

__all__ = ["BackgroundTasks", "close_bound"]


def close_bound(request_timeout: float) -> float:
    """How long each network step of a client's close may take, for every client and
    transport: a remoting unregister or a gRPC termination (a request under way awaited
    first, then a try; or two tries, each with its own request timeout), one broker's
    offset commits, a pop consumer's releases and last acks; at least 5 s.

    Not ``shutdown_timeout``: that bounds the application's work in flight (running
    handlers, a producer's batched sends), which may be set short, or 0, by an
    application that wants no drain, while the close's goodbye to the servers still has
    to go (a producer left listed is called back for its transactions, a consumer
    keeps its queues, until the broker expires it: 2 min). The Java clients bound
    their unregister by the request timeout too (``MQClientInstance.unregisterClient``:
    ``mqClientApiTimeout``), never by a shutdown setting."""
    return max(2 * request_timeout, 5.0)


class BackgroundTasks:
    """A task group for background tasks: leaving it cancels them and waits for them.

    The group the tasks run in is shielded from the cancellation of the task that
    entered it (module docstring): only leaving this context, or one of the tasks
    failing, stops them.

    The exception the stack is unwinding with (the body's, or a later exit's) is not
    handed to the task group: it would come back wrapped in an ``ExceptionGroup``, and
    callers expect to catch what was raised. A background task's own failure still
    propagates (as the task group raises it) and cancels the code inside the context,
    as a plain task group's does.
    """

    def __init__(self) -> None:
        # The task groups are made on entry, not here: anyio needs a running event loop
        # to make one, and components are built outside any (the Spark runtime builds its
        # client instance in a plain thread; tests/integration/test_construction_without_loop.py).
        #: the owner's side: one task, which holds ``_tg``; left by ``__aexit__``
        self._holder: anyio.abc.TaskGroup | None = None
        #: where the background tasks run, shielded
        self._tg: anyio.abc.TaskGroup | None = None

    async def __aenter__(self) -> anyio.abc.TaskGroup:
        holder = anyio.create_task_group()
        await holder.__aenter__()
        try:
            # Shielded: a cancellation arriving now would cut the holder before it is
            # under its shield; the wait is one task switch.
            with anyio.CancelScope(shield=True):
                tg: anyio.abc.TaskGroup = await holder.start(self._hold)
        except BaseException:
            holder.cancel_scope.cancel()
            await holder.__aexit__(None, None, None)
            raise
        self._holder, self._tg = holder, tg
        return tg

    @staticmethod
    async def _hold(*, task_status: anyio.abc.TaskStatus[anyio.abc.TaskGroup]) -> None:
        with anyio.CancelScope(shield=True):
            async with anyio.create_task_group() as tg:
                task_status.started(tg)
                await anyio.sleep_forever()  # until __aexit__ cancels tg

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        holder, tg = self._holder, self._tg
        self._holder = self._tg = None
        if holder is None or tg is None:
            return  # never entered
        tg.cancel_scope.cancel()
        try:
            await holder.__aexit__(None, None, None)
        except BaseException as exc:
            # A task failed: the holder raises the tasks' group inside a group of its
            # own; raise the tasks' group, as a plain task group would. (By its shape:
            # BaseExceptionGroup is a builtin from 3.11 only.)
            inside = getattr(exc, "exceptions", None)
            if isinstance(inside, tuple) and len(inside) == 1 and \
                    isinstance(getattr(inside[0], "exceptions", None), tuple):  # fmt: skip
                raise inside[0] from None
            raise
