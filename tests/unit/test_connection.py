"""Connection and pool behaviour against a scripted in-process server."""

from __future__ import annotations

import struct

import anyio
import pytest

from aiorocket.errors import ConnectionClosedError, RequestTimeoutError, ResponseTooLargeError
from aiorocket.protocol.codes import ResponseCode
from aiorocket.protocol.command import RemotingCommand
from aiorocket.protocol.frame import MAX_FRAME_LENGTH, encode_command
from aiorocket.remoting.connection import Connection
from aiorocket.remoting.dispatcher import RequestDispatcher
from aiorocket.remoting.pool import ConnectionPool
from aiorocket.testing.fake_remoting import FakeRemotingServer, ServerSession, echo_handler

pytestmark = pytest.mark.anyio


async def test_out_of_order_responses_reach_their_requests() -> None:
    release = anyio.Event()

    async def handler(session: ServerSession, cmd: RemotingCommand) -> None:
        if cmd.ext_fields.get("slow") == "1":
            await release.wait()
        await session.send(RemotingCommand.response_to(cmd, ext_fields=dict(cmd.ext_fields)))
        if cmd.ext_fields.get("slow") == "0":
            release.set()

    async with FakeRemotingServer(handler) as server, ConnectionPool() as pool:
        results: dict[str, str] = {}

        async def call(tag: str, slow: str) -> None:
            resp = await pool.request(
                server.address, RemotingCommand.request(1, {"tag": tag, "slow": slow}), 5
            )
            results[tag] = resp.ext_fields["tag"]

        async with anyio.create_task_group() as tg:
            tg.start_soon(call, "first", "1")
            await anyio.wait_all_tasks_blocked()
            tg.start_soon(call, "second", "0")
        assert results == {"first": "first", "second": "second"}


async def test_timeout_leaves_the_pool_usable() -> None:
    async def handler(session: ServerSession, cmd: RemotingCommand) -> None:
        if cmd.code == 2:
            return  # never answer
        await echo_handler(session, cmd)

    async with FakeRemotingServer(handler) as server, ConnectionPool() as pool:
        with pytest.raises(RequestTimeoutError):
            await pool.request(server.address, RemotingCommand.request(2), 0.2)
        resp = await pool.request(server.address, RemotingCommand.request(1, {"a": "b"}), 5)
        assert resp.ext_fields == {"a": "b"}
        conn = await pool.get(server.address)
        assert conn.pending_count == 0


async def test_peer_close_fails_pending_at_once() -> None:
    async def handler(session: ServerSession, cmd: RemotingCommand) -> None:
        await session.close()

    async with FakeRemotingServer(handler) as server, ConnectionPool() as pool:
        with anyio.fail_after(5):  # far below the request timeout: failure must be prompt
            with pytest.raises(ConnectionClosedError):
                await pool.request(server.address, RemotingCommand.request(1), 60)


@pytest.mark.parametrize(
    "garbage",
    [
        pytest.param(struct.pack(">i", MAX_FRAME_LENGTH + 10) + b"\0" * 8, id="oversized"),
        pytest.param(struct.pack(">ii", 12, 8) + b"{not json", id="bad-json"),
        pytest.param(struct.pack(">ii", 6, 100) + b"{}", id="header-overrun"),
        pytest.param(struct.pack(">ii", 6, (9 << 24) | 2) + b"{}", id="serialize-type"),
    ],
)
async def test_garbage_closes_only_that_connection(garbage: bytes) -> None:
    async def bad(session: ServerSession, cmd: RemotingCommand) -> None:
        await session.send_raw(garbage)

    async with (
        FakeRemotingServer(bad) as bad_server,
        FakeRemotingServer() as good_server,
        ConnectionPool() as pool,
    ):
        good_conn = await pool.get(good_server.address)

        async def slow_good_request() -> None:
            resp = await good_conn.request(RemotingCommand.request(1, {"ok": "1"}), 5)
            assert resp.ext_fields == {"ok": "1"}

        with anyio.fail_after(5):
            with pytest.raises(ConnectionClosedError):
                await pool.request(bad_server.address, RemotingCommand.request(1), 60)
            await slow_good_request()
        assert not good_conn.closed
        assert bad_server.address not in pool.addresses


async def test_truncated_frame_then_hangup_fails_request() -> None:
    async def handler(session: ServerSession, cmd: RemotingCommand) -> None:
        data = encode_command(RemotingCommand.response_to(cmd, body=b"x" * 100))
        await session.send_raw(data[:-10])
        await session.close()

    async with FakeRemotingServer(handler) as server, ConnectionPool() as pool:
        with anyio.fail_after(5), pytest.raises(ConnectionClosedError):
            await pool.request(server.address, RemotingCommand.request(1), 60)


async def test_pool_reconnects_after_failure() -> None:
    calls = 0

    async def handler(session: ServerSession, cmd: RemotingCommand) -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            await session.close()
        else:
            await echo_handler(session, cmd)

    async with FakeRemotingServer(handler) as server, ConnectionPool() as pool:
        with pytest.raises(ConnectionClosedError):
            await pool.request(server.address, RemotingCommand.request(1), 5)
        resp = await pool.request(server.address, RemotingCommand.request(1, {"x": "y"}), 5)
        assert resp.ext_fields == {"x": "y"}
        assert len(server.sessions) == 2


async def test_connect_refused_is_typed() -> None:
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    await listener.aclose()
    async with ConnectionPool() as pool:
        with pytest.raises(ConnectionClosedError):
            await pool.request(f"127.0.0.1:{port}", RemotingCommand.request(1), 5)


async def test_server_request_dispatch_and_unknown_code() -> None:
    answers: list[RemotingCommand] = []
    got_oneway = anyio.Event()
    dispatcher = RequestDispatcher()

    async def on_check(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return RemotingCommand.response_to(cmd, ext_fields={"seen": cmd.ext_fields["v"]})

    async def on_notify(conn: Connection, cmd: RemotingCommand) -> None:
        got_oneway.set()

    dispatcher.register(39, on_check)
    dispatcher.register(40, on_notify)
    all_answered = anyio.Event()

    async def handler(session: ServerSession, cmd: RemotingCommand) -> None:
        if cmd.is_response:
            answers.append(cmd)
            if len(answers) == 2:
                all_answered.set()
            return
        await session.send(RemotingCommand(code=39, opaque=9001, ext_fields={"v": "42"}))
        await session.send(RemotingCommand(code=12345, opaque=9002))
        await session.send(RemotingCommand(code=40, opaque=9003, flag=2))
        await echo_handler(session, cmd)

    async with FakeRemotingServer(handler) as server, ConnectionPool(dispatcher) as pool:
        await pool.request(server.address, RemotingCommand.request(1), 5)
        with anyio.fail_after(5):
            await all_answered.wait()
            await got_oneway.wait()
    by_opaque = {a.opaque: a for a in answers}
    assert by_opaque[9001].code == ResponseCode.SUCCESS
    assert by_opaque[9001].ext_fields == {"seen": "42"}
    assert by_opaque[9002].code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    assert 9003 not in by_opaque  # oneway requests get no answer


async def test_pool_close_fails_pending_requests() -> None:
    async def silent(session: ServerSession, cmd: RemotingCommand) -> None:
        return

    async with FakeRemotingServer(silent) as server:
        errors: list[BaseException] = []
        with anyio.fail_after(5):
            async with ConnectionPool() as pool:
                conn = await pool.get(server.address)

                async def call() -> None:
                    try:
                        await conn.request(RemotingCommand.request(1), 60)
                    except ConnectionClosedError as exc:
                        errors.append(exc)

                async with anyio.create_task_group() as tg:
                    tg.start_soon(call)
                    await anyio.wait_all_tasks_blocked()
                    await pool.aclose_connections()
        assert len(errors) == 1


async def test_short_timeout_fires_while_a_long_request_waits() -> None:
    async def silent(session: ServerSession, cmd: RemotingCommand) -> None:
        return

    # The connection must outlive the timeout for the long request to keep waiting.
    pool = ConnectionPool(close_on_timeout=False)
    async with FakeRemotingServer(silent) as server, pool:
        conn = await pool.get(server.address)
        async with anyio.create_task_group() as tg:
            # A long poll is pending: the sweeper sleeps towards its far deadline...
            tg.start_soon(conn.request, RemotingCommand.request(11), 600.0)
            await anyio.wait_all_tasks_blocked()
            # ...and must still wake for a request that expires much sooner.
            with anyio.fail_after(5), pytest.raises(RequestTimeoutError):
                await conn.request(RemotingCommand.request(1), 0.2)
            tg.cancel_scope.cancel()
        assert conn.pending_count == 0


async def test_timeout_replaces_a_stalled_connection_and_fails_its_pending_requests() -> None:
    """A half-open socket: the peer accepted, then neither reads nor answers any more.

    One timed-out request closes the connection: a long poll pending on it fails at once
    (retriable) instead of waiting out its own timeout, and the next request goes out on
    a new connection that answers.
    """

    async def handler(session: ServerSession, cmd: RemotingCommand) -> None:
        if session is server.sessions[0]:
            session.stall()
            return
        await echo_handler(session, cmd)

    async with FakeRemotingServer(handler) as server, ConnectionPool() as pool:
        with anyio.fail_after(10):  # far below the long poll's timeout: nothing waits it out
            failures: list[BaseException] = []

            async def long_poll() -> None:
                try:
                    await pool.request(server.address, RemotingCommand.request(11), 60)
                except ConnectionClosedError as exc:
                    failures.append(exc)

            async with anyio.create_task_group() as tg:
                tg.start_soon(long_poll)
                await anyio.wait_all_tasks_blocked()
                with pytest.raises(RequestTimeoutError):
                    await pool.request(server.address, RemotingCommand.request(1), 0.5)
            assert len(failures) == 1 and "timeout" in str(failures[0])
            resp = await pool.request(server.address, RemotingCommand.request(1, {"a": "b"}), 5)
        assert resp.ext_fields == {"a": "b"}
        assert len(server.sessions) == 2


async def test_a_timeout_within_the_minimum_keeps_the_connection() -> None:
    """A tiny timeout is the caller's budget running out, not a stuck connection."""

    async def handler(session: ServerSession, cmd: RemotingCommand) -> None:
        if cmd.code == 2:
            return
        await echo_handler(session, cmd)

    async with FakeRemotingServer(handler) as server, ConnectionPool() as pool:
        conn = await pool.get(server.address)
        with pytest.raises(RequestTimeoutError):
            await conn.request(RemotingCommand.request(2), 0.05)
        assert not conn.closed
        await conn.request(RemotingCommand.request(1), 5)
        assert len(server.sessions) == 1


async def test_an_answer_over_the_frame_limit_fails_its_request_alone() -> None:
    big_sent = anyio.Event()

    async def handler(session: ServerSession, cmd: RemotingCommand) -> None:
        if cmd.ext_fields.get("big") == "1":
            body = bytes(MAX_FRAME_LENGTH + 1)
            await session.send(RemotingCommand.response_to(cmd, body=body))
            big_sent.set()
        else:
            await big_sent.wait()  # answered after the big one, on the same connection
            await session.send(RemotingCommand.response_to(cmd, ext_fields={"ok": "1"}))

    async with FakeRemotingServer(handler) as server, ConnectionPool() as pool:
        conn = await pool.get(server.address)
        small: list[RemotingCommand] = []

        async def small_request() -> None:
            small.append(await conn.request(RemotingCommand.request(1), 10))

        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                tg.start_soon(small_request)
                with pytest.raises(ResponseTooLargeError) as caught:
                    await conn.request(RemotingCommand.request(1, {"big": "1"}), 10)
        assert caught.value.size == MAX_FRAME_LENGTH + 1
        assert small[0].ext_fields == {"ok": "1"}
        assert not conn.closed and await pool.get(server.address) is conn
        assert len(server.sessions) == 1


def test_server_requests_are_served_in_a_loop_not_started_by_anyio() -> None:
    """Under uvicorn or aiohttp's runner the loop is started by ``asyncio.run`` (not
    ``anyio.run``): a request from the broker, which arrives in a protocol callback, must
    still be served (it used to fail the connection with anyio's NoEventLoopError)."""
    import asyncio

    served = []

    async def main() -> None:
        dispatcher = RequestDispatcher()
        answered = asyncio.Event()

        async def on_check(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
            served.append(cmd.opaque)
            return RemotingCommand.response_to(cmd)

        dispatcher.register(39, on_check)

        async def handler(session: ServerSession, cmd: RemotingCommand) -> None:
            if cmd.is_response:
                answered.set()
                return
            if not answered.is_set():
                await session.send(RemotingCommand(code=39, opaque=7001))
            await echo_handler(session, cmd)

        async with FakeRemotingServer(handler) as server, ConnectionPool(dispatcher) as pool:
            await pool.request(server.address, RemotingCommand.request(1), 5)
            await asyncio.wait_for(answered.wait(), 5)
            # the connection is still usable
            await pool.request(server.address, RemotingCommand.request(1), 5)

    asyncio.run(main())
    assert served == [7001]


async def test_disconnect_listeners_hear_of_a_lost_connection_once_before_its_replacement() -> None:
    """A request timeout closes the connection at once, while its reader ends later: the
    listeners hear of the loss as it is closed, before the timeout reaches the caller
    (pull_remoting 44028: an application's commit retried at once checked its queues
    before the loss was reported, then stored an old offset on the new connection), not
    after the replacement is made, and only once."""

    async def handler(session: ServerSession, cmd: RemotingCommand) -> None:
        if cmd.code != 2:  # code 2 is never answered
            await echo_handler(session, cmd)

    events: list[str] = []
    second_loss = anyio.Event()

    def lost(address: str) -> None:
        events.append("lost")
        if events.count("lost") == 2:
            second_loss.set()

    async with FakeRemotingServer(handler) as server, ConnectionPool() as pool:
        pool.add_connect_listener(lambda address: events.append("connected"))
        pool.add_disconnect_listener(lost)
        await pool.request(server.address, RemotingCommand.request(1), 5)
        with pytest.raises(RequestTimeoutError):
            await pool.request(server.address, RemotingCommand.request(2), 0.2)
        assert events == ["connected", "lost"]  # before the timeout reached the caller
        await pool.request(server.address, RemotingCommand.request(1), 5)
        for session in list(server.sessions):
            await session.close()  # the server closes it: the reader sees the end
        with anyio.fail_after(5):
            await second_loss.wait()
        await pool.request(server.address, RemotingCommand.request(1), 5)
        assert events == ["connected", "lost", "connected", "lost", "connected"]
    assert events[-1] == "connected"  # closing the pool is not a lost connection


def test_a_bound_method_handler_is_unregistered_by_another_reference_to_it() -> None:
    """A component registers ``self.on_x`` and unregisters ``self.on_x`` at its close:
    two bound-method objects, equal but not the same (the remoting lite source's notice
    handler, the producer's check-back and reply handlers stayed registered)."""

    class Component:
        async def on_x(self, conn: Connection, cmd: RemotingCommand) -> None:
            return None

    dispatcher = RequestDispatcher()
    mine, other = Component(), Component()
    dispatcher.register(41, mine.on_x)
    dispatcher.unregister(41, other.on_x)  # another component's: kept
    assert dispatcher._handlers.get(41) == mine.on_x
    dispatcher.unregister(41, mine.on_x)
    assert 41 not in dispatcher._handlers


async def test_a_stall_check_gives_up_twice_or_waits_while_it_says_no() -> None:
    """A guard ("Round 18": the stall fields live on a request with a stall check only):
    given up when ``give_up`` says so at the check and again after the grace, the
    connection open; asked again every period while it says no, then answered; a
    request without one beside them, answered as before."""
    from aiorocket.errors import BrokerStalledError

    release = anyio.Event()

    async def handler(session: ServerSession, cmd: RemotingCommand) -> None:
        if cmd.code == 2:
            return  # never answer
        if cmd.code == 3:
            await release.wait()
        await echo_handler(session, cmd)

    asked: list[str] = []

    def yes() -> bool:
        asked.append("yes")
        return True

    def no() -> bool:
        asked.append("no")
        if len([a for a in asked if a == "no"]) == 3:
            release.set()
        return False

    async with FakeRemotingServer(handler) as server, ConnectionPool() as pool:
        conn = await pool.get(server.address)
        with anyio.fail_after(5):
            with pytest.raises(BrokerStalledError):
                await conn.request(RemotingCommand.request(2), 4, stall=(0.05, yes))
            assert asked == ["yes", "yes"] and not conn.closed and conn.pending_count == 0
            asked.clear()
            resp = await conn.request(RemotingCommand.request(3, {"a": "b"}), 4, stall=(0.05, no))
            assert resp.ext_fields == {"a": "b"} and asked[:3] == ["no", "no", "no"]
            plain = await conn.request(RemotingCommand.request(1, {"c": "d"}), 4)
            assert plain.ext_fields == {"c": "d"} and conn.pending_count == 0
