"""stop_on_signals ends its own block on a signal and nothing else (both backends)."""

from __future__ import annotations

import os
import signal

import anyio
import anyio.lowlevel
import pytest

from aiorocket import stop_on_signals

pytestmark = pytest.mark.anyio


async def test_a_signal_ends_the_block_and_the_code_after_it_runs() -> None:
    with anyio.fail_after(10):
        async with stop_on_signals(signal.SIGUSR1) as stop:
            os.kill(os.getpid(), signal.SIGUSR1)
            await anyio.sleep_forever()
    assert stop.signum == signal.SIGUSR1
    await anyio.lowlevel.checkpoint()  # not cancelled: the cancellation stopped at the block


async def test_a_block_that_ends_by_itself_was_not_stopped() -> None:
    async with stop_on_signals() as stop:
        await anyio.lowlevel.checkpoint()
    assert stop.signum is None


class AppError(Exception):
    pass


async def test_the_blocks_own_exception_comes_out_as_raised() -> None:
    """Not wrapped in an ExceptionGroup (before: the task group watching the signals
    wrapped it, so ``except AppError`` around the block missed it)."""
    with pytest.raises(AppError, match="mine"):
        async with stop_on_signals(signal.SIGUSR1):
            raise AppError("mine")


async def test_an_outer_cancellation_still_cancels() -> None:
    with anyio.CancelScope() as outer:
        async with stop_on_signals(signal.SIGUSR1) as stop:
            outer.cancel()
            await anyio.sleep_forever()
        raise AssertionError("the outer cancellation stopped at the block")  # pragma: no cover
    assert outer.cancelled_caught and stop.signum is None
