"""The frame transports under a connection: write coalescing, backpressure, garbage."""

from __future__ import annotations

import asyncio
import math
import time
from typing import Any

import anyio
import pytest

from aiorocket.errors import ProtocolError
from aiorocket.protocol.command import RemotingCommand
from aiorocket.protocol.frame import encode_command
from aiorocket.remoting.connection import parse_address
from aiorocket.remoting.pool import ConnectionPool
from aiorocket.remoting.wire import ProtocolWire, StreamWire, open_wire
from aiorocket.testing.fake_remoting import FakeRemotingServer, ServerSession

pytestmark = pytest.mark.anyio
asyncio_only = pytest.mark.parametrize("anyio_backend", ["asyncio"])


class RecordingTransport(asyncio.Transport):
    """Keeps what the wire writes; reports closing like a real transport."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.closing = False
        self.aborted = False

    def write(self, data: Any) -> None:
        self.writes.append(bytes(data))

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True

    def abort(self) -> None:
        self.closing = self.aborted = True

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass


def frame(code: int) -> bytes:
    return encode_command(RemotingCommand.request(code))


def connected() -> tuple[ProtocolWire, RecordingTransport]:
    wire, transport = ProtocolWire(), RecordingTransport()
    wire.connection_made(transport)
    return wire, transport


@asyncio_only
async def test_asyncio_gets_the_protocol_wire_other_backends_the_stream() -> None:
    async def handler(session: ServerSession, cmd: RemotingCommand) -> None:
        await session.send(RemotingCommand.response_to(cmd))

    async with FakeRemotingServer(handler) as server:
        wire = await open_wire(*parse_address(server.address))
        assert isinstance(wire, ProtocolWire)
        got: list[RemotingCommand] = []
        answered = anyio.Event()

        def on_command(cmd: RemotingCommand) -> None:
            got.append(cmd)
            answered.set()

        async with anyio.create_task_group() as tg:

            async def read() -> None:
                with pytest.raises(anyio.EndOfStream):
                    await wire.run(on_command)

            tg.start_soon(read)
            wire.write(frame(7))
            with anyio.fail_after(5):
                await answered.wait()
            await server.sessions[0].close()
        assert [c.code for c in got] == [0] and got[0].is_response


@pytest.mark.parametrize(
    "anyio_backend", [pytest.param(("asyncio", {"use_uvloop": True}), id="uvloop")]
)
async def test_connections_run_on_uvloop_too() -> None:
    """uvloop's transports are not asyncio.Transport instances; the protocol wire takes
    them all the same (uvicorn runs FastAPI services on uvloop when it is installed)."""
    pytest.importorskip("uvloop")

    async def handler(session: ServerSession, cmd: RemotingCommand) -> None:
        await session.send(RemotingCommand.response_to(cmd, ext_fields=dict(cmd.ext_fields)))

    async with FakeRemotingServer(handler) as server, ConnectionPool() as pool:
        conn = await pool.get(server.address)
        assert isinstance(conn._wire, ProtocolWire)
        replies: list[int] = []
        async with anyio.create_task_group() as tg:
            for i in range(20):

                async def call(i: int = i) -> None:
                    resp = await pool.request(
                        server.address, RemotingCommand.request(1, {"i": str(i)}), 5
                    )
                    replies.append(int(resp.ext_fields["i"]))

                tg.start_soon(call)
        assert sorted(replies) == list(range(20))


@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_trio_connects_through_the_stream_wire() -> None:
    async with FakeRemotingServer() as server:
        wire = await open_wire(*parse_address(server.address))
        assert isinstance(wire, StreamWire)
        await wire.aclose()


@asyncio_only
async def test_frames_of_one_iteration_leave_in_one_write() -> None:
    wire, transport = connected()
    wire.write(frame(1))
    wire.write(frame(2))
    wire.write(frame(3))
    assert transport.writes == []  # not yet: more may come in this iteration
    await asyncio.sleep(0)
    assert transport.writes == [frame(1) + frame(2) + frame(3)]
    wire.write(frame(4))
    await asyncio.sleep(0)
    assert transport.writes[1:] == [frame(4)]


async def _burst_after_a_read(write_first: bool) -> list[list[bytes]]:
    """A pull task parked on its answer writes frame 2 when woken; a handler worker
    queued before the read re-queues itself (its next burst) while the pull task waits
    its turn. What the transport had been given when that burst ran (``write_first``:
    frame 1 written before the read, its write queued ahead of the pull task)."""
    loop = asyncio.get_running_loop()
    wire, transport = connected()
    answered = loop.create_future()
    seen_by_worker: list[list[bytes]] = []
    burst_ran = anyio.Event()

    async def pull_task() -> None:
        await answered
        wire.write(frame(2))

    def worker_burst() -> None:
        def next_burst() -> None:
            seen_by_worker.append(list(transport.writes))
            burst_ran.set()

        loop.call_soon(next_burst)

    async with anyio.create_task_group() as tg:
        tg.start_soon(pull_task)
        tg.start_soon(wire.run, lambda cmd: answered.set_result(None))
        await anyio.wait_all_tasks_blocked()
        if write_first:
            wire.write(frame(1))
        loop.call_soon(worker_burst)
        wire.data_received(encode_command(RemotingCommand.response_to(RemotingCommand.request(1))))
        await burst_ran.wait()
        tg.cancel_scope.cancel()
    return seen_by_worker


@asyncio_only
async def test_what_the_tasks_a_read_woke_write_leaves_before_later_callbacks() -> None:
    """The pull leaves before the worker's next burst, not after it (issue 43, goal 4)."""
    assert await _burst_after_a_read(write_first=False) == [[frame(2)]]


@asyncio_only
async def test_a_flush_pending_before_the_read_does_not_take_its_flush_point() -> None:
    """A frame written before the read is sent by its own write, queued ahead of the
    woken task; what that task writes still leaves before the callbacks behind it."""
    assert await _burst_after_a_read(write_first=True) == [[frame(1), frame(2)]]


@asyncio_only
async def test_a_read_that_wakes_no_writer_writes_nothing() -> None:
    wire, transport = connected()
    wire._on_command = lambda cmd: None
    wire.data_received(frame(1))
    await asyncio.sleep(0)
    assert transport.writes == []
    wire.write(frame(2))  # the flush point has passed: a write of its own
    await asyncio.sleep(0)
    assert transport.writes == [frame(2)]


@asyncio_only
async def test_a_batch_is_stamped_when_handed_to_the_transport_and_a_read_when_read() -> None:
    """A request's write is when its batch left (not when it was queued: a loaded loop
    runs the flush late) and its answer's read when the bytes came off the socket, one
    clock read each (the producer's fault table takes the broker's latency from them)."""
    loop = asyncio.get_running_loop()
    wire, transport = connected()
    wire._on_command = lambda cmd: None
    sent = wire.write(frame(1))
    assert wire.write(frame(2)) is sent and math.isnan(sent.at)  # one batch, not yet out
    queued = loop.time()
    time.sleep(0.01)  # noqa: ASYNC251 - the loop kept busy before the flush runs
    await asyncio.sleep(0)
    assert transport.writes == [frame(1) + frame(2)] and sent.at >= queued + 0.01
    assert wire.write(frame(3)) is not sent  # a later batch, its own stamp
    assert math.isnan(wire.read_at)
    wire.data_received(frame(4)[:5])  # a part of a frame: nothing read yet
    assert math.isnan(wire.read_at)
    before = loop.time()
    wire.data_received(frame(4)[5:])
    assert before <= wire.read_at <= loop.time()


@asyncio_only
async def test_frames_queued_when_the_transport_closes_are_dropped_not_raised() -> None:
    wire, transport = connected()
    wire.write(frame(1))
    transport.closing = True
    await asyncio.sleep(0)
    assert transport.writes == []
    with pytest.raises(anyio.BrokenResourceError):
        wire.write(frame(2))


@asyncio_only
async def test_writers_wait_while_the_transport_is_paused() -> None:
    wire, _ = connected()
    wire.pause_writing()
    assert wire.paused
    resumed = False

    async def writer() -> None:
        nonlocal resumed
        await wire.drain()
        resumed = True

    async with anyio.create_task_group() as tg:
        tg.start_soon(writer)
        await anyio.wait_all_tasks_blocked()
        assert not resumed
        wire.resume_writing()
    assert resumed and not wire.paused


@asyncio_only
async def test_connection_loss_releases_paused_writers() -> None:
    wire, _ = connected()
    wire.pause_writing()
    async with anyio.create_task_group() as tg:
        tg.start_soon(wire.drain)
        await anyio.wait_all_tasks_blocked()
        wire.connection_lost(ConnectionResetError("gone"))
    assert not wire.paused


@asyncio_only
async def test_frames_before_run_are_delivered_first_and_in_order() -> None:
    wire, _ = connected()
    data = encode_command(RemotingCommand.response_to(RemotingCommand.request(5)))
    wire.data_received(frame(1) + data[:10])
    wire.data_received(data[10:])
    got: list[int] = []
    async with anyio.create_task_group() as tg:

        async def read() -> None:
            with pytest.raises(anyio.EndOfStream):
                await wire.run(lambda cmd: got.append(cmd.code))

        tg.start_soon(read)
        await anyio.wait_all_tasks_blocked()
        wire.data_received(frame(3))
        wire.connection_lost(None)
    assert got == [1, 0, 3]


@asyncio_only
async def test_garbage_aborts_the_transport_and_run_raises_protocol_error() -> None:
    wire, transport = connected()
    wire.data_received(b"\xff\xff\xff\xff garbage")
    assert transport.aborted
    wire.connection_lost(None)  # what abort() leads to
    with pytest.raises(ProtocolError):
        await wire.run(lambda cmd: None)


@asyncio_only
async def test_peer_reset_is_raised_by_run() -> None:
    wire, _ = connected()
    wire.connection_lost(ConnectionResetError("reset by peer"))
    with pytest.raises(ConnectionResetError):
        await wire.run(lambda cmd: None)
