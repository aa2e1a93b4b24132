"""Requests the server sends to the client (NOTIFY_CONSUMER_IDS_CHANGED, running info...)
are served without harming the connection, whatever runs the event loop."""

from __future__ import annotations

import asyncio

import anyio
import pytest

from aiorocket.protocol.codes import RemotingFlag
from aiorocket.protocol.command import RemotingCommand
from aiorocket.remoting.connection import Connection
from aiorocket.testing.fake_remoting import FakeRemotingServer, ServerSession

ASK = 307  # GET_CONSUMER_RUNNING_INFO: the broker wants an answer
NOTIFY = 40  # NOTIFY_CONSUMER_IDS_CHANGED: oneway


async def _scenario() -> tuple[list[int], list[RemotingCommand], bool]:
    answers: list[RemotingCommand] = []
    answered = anyio.Event()

    async def server(session: ServerSession, cmd: RemotingCommand) -> None:
        if cmd.is_response:
            answers.append(cmd)
            answered.set()
            return
        notify = RemotingCommand.request(NOTIFY, {"consumerGroup": "g"})
        notify.flag |= int(RemotingFlag.ONEWAY)
        await session.send(notify)
        ask = RemotingCommand.request(ASK, {"clientId": "c"})
        ask.opaque = 4242
        await session.send(ask)
        await session.send(RemotingCommand.response_to(cmd))

    served: list[int] = []

    async def handler(conn: Connection, request: RemotingCommand) -> RemotingCommand | None:
        served.append(request.code)
        return None if request.is_oneway else RemotingCommand.response_to(request, body=b"ok")

    async with FakeRemotingServer(server) as srv:
        conn = await Connection.connect(srv.address, handler)
        async with anyio.create_task_group() as tg:
            await tg.start(conn.run)
            with anyio.fail_after(5):
                await conn.request(RemotingCommand.request(10, {}), timeout=3)
                await answered.wait()
                await conn.request(RemotingCommand.request(10, {}), timeout=3)
            still_open = not conn.closed
            await conn.aclose()
    return served, answers, still_open


def _check(served: list[int], answers: list[RemotingCommand], still_open: bool) -> None:
    assert still_open
    assert NOTIFY in served and ASK in served
    assert answers[0].opaque == 4242 and answers[0].body == b"ok"


def test_served_under_plain_asyncio_run() -> None:
    """An application started with plain asyncio.run (found by benchmarks/soak.py,
    fixed on main at the same time by the services work): the frames arrive in the
    transport's data_received callback, outside any task, where anyio cannot tell the
    running library without anyio.run's marker; starting the handler task there raised
    NoEventLoopError and aborted the connection at the broker's first request."""
    _check(*asyncio.run(_scenario()))


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
async def test_served_under_anyio(anyio_backend: str) -> None:
    _check(*await _scenario())
