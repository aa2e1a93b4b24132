"""What this process is doing, as text: every task of the event loop (asyncio or trio)
with the chain of coroutines it is suspended in and what it awaits, then every other
thread's stack (synchronous handlers run in worker threads).

It answers the operators' "jstack" requests: ``mqadmin consumerStatus -s`` and the
Dashboard (the ``jstack`` field of ConsumerRunningInfo over remoting; the Proxy's
print-stack command over gRPC). Java answers with its threads' stacks; an asyncio
client's threads say little (one runs the loop), its tasks say what each part waits
for: a pull's answer, a handler's await, an ack.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from types import CodeType, FrameType
from typing import Any

import sniffio

__all__ = ["process_stacks"]

#: the answer's size at most (it travels in one response body)
MAX_CHARS = 256 * 1024
#: awaited frames shown per task at most (the innermost ones past it are cut)
MAX_DEPTH = 40


def process_stacks(max_chars: int = MAX_CHARS) -> str:
    """The tasks of the running loop (when called from one), then the other threads."""
    parts: list[str] = []
    try:
        library = sniffio.current_async_library()
    except sniffio.AsyncLibraryNotFoundError:
        library = None
    if library == "asyncio":
        parts += _asyncio_tasks()
    elif library == "trio":
        parts += _trio_tasks()
    parts += _threads()
    text = "\n".join(parts)
    if len(text) > max_chars:
        text = text[:max_chars] + f"\n... cut at {max_chars} characters"
    return text


def _where(code: CodeType, line: int | None) -> str:
    name = getattr(code, "co_qualname", code.co_name)  # 3.11+
    return f"    at {name} ({code.co_filename}:{line})"


def _awaits(coro: Any) -> Iterator[str]:
    """The chain a suspended coroutine waits in, outermost first, then what it awaits."""
    depth = 0
    while coro is not None and depth < MAX_DEPTH:
        frame: FrameType | None = (
            getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
            or getattr(coro, "ag_frame", None)
        )  # fmt: skip
        code = (
            getattr(coro, "cr_code", None)
            or getattr(coro, "gi_code", None)
            or getattr(coro, "ag_code", None)
        )
        if code is None:  # a future, an event's waiter...: what the chain waits for
            yield f"    awaiting {_short(coro)}"
            return
        yield _where(code, frame.f_lineno if frame is not None else None)
        coro = (
            getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
            or getattr(coro, "ag_await", None)
        )  # fmt: skip
        depth += 1
    if coro is not None:
        yield "    ..."


def _short(obj: object) -> str:
    text = repr(obj)
    return text if len(text) <= 200 else text[:200] + "..."


def _asyncio_tasks() -> list[str]:
    import asyncio

    out = []
    tasks = sorted(asyncio.all_tasks(), key=lambda t: t.get_name())
    current = asyncio.current_task()
    for task in tasks:
        state = " (this one: answering)" if task is current else ""
        lines = [f'"{task.get_name()}" asyncio task{state}']
        lines += list(_awaits(task.get_coro()))
        out.append("\n".join(lines) + "\n")
    return [f"{len(tasks)} asyncio tasks\n", *out]


def _trio_tasks() -> list[str]:
    import trio

    out = []

    def walk(task: trio.lowlevel.Task) -> None:
        lines = [f'"{task.name}" trio task']
        lines += list(_awaits(task.coro))
        out.append("\n".join(lines) + "\n")
        for nursery in task.child_nurseries:
            for child in sorted(nursery.child_tasks, key=lambda t: t.name):
                walk(child)

    walk(trio.lowlevel.current_root_task())  # type: ignore[arg-type]
    return [f"{len(out)} trio tasks\n", *out]


def _threads() -> list[str]:
    frames = sys._current_frames()
    me = threading.get_ident()
    out = []
    for thread in threading.enumerate():
        frame = frames.get(thread.ident or -1)
        if frame is None or thread.ident == me:
            continue  # the loop's own thread is the tasks above
        lines = [f'"{thread.name}" thread{" (daemon)" if thread.daemon else ""}']
        stack: list[str] = []
        f: FrameType | None = frame
        while f is not None and len(stack) < MAX_DEPTH:
            stack.append(_where(f.f_code, f.f_lineno))
            f = f.f_back
        out.append("\n".join(lines + stack) + "\n")
    return out
