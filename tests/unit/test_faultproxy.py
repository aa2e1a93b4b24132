"""The fault-injecting TCP proxy of aiorocket.testing, against a loopback echo server."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import anyio.abc
import pytest

from aiorocket.testing.faultproxy import FaultProxy

pytestmark = pytest.mark.anyio


async def _echo(stream: anyio.abc.SocketStream) -> None:
    async with stream:
        try:
            async for data in stream:
                await stream.send(data)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass


@pytest.fixture
async def proxy() -> AsyncIterator[FaultProxy]:
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    async with anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, _echo)
        async with FaultProxy(f"127.0.0.1:{port}") as p:
            yield p
        tg.cancel_scope.cancel()


async def _connect(proxy: FaultProxy) -> anyio.abc.SocketStream:
    host, _, port = proxy.address.rpartition(":")
    return await anyio.connect_tcp(host, int(port))


async def _roundtrip(stream: anyio.abc.SocketStream, data: bytes) -> bytes:
    await stream.send(data)
    got = b""
    while len(got) < len(data):
        got += await stream.receive()
    return got


async def test_forwards_both_ways(proxy: FaultProxy) -> None:
    async with await _connect(proxy) as s:
        assert await _roundtrip(s, b"hello" * 1000) == b"hello" * 1000
    assert proxy.accepted == 1


async def test_drop_resets_open_connections(proxy: FaultProxy) -> None:
    async with await _connect(proxy) as s:
        await _roundtrip(s, b"x")
        proxy.drop()
        with anyio.fail_after(5), pytest.raises((anyio.BrokenResourceError, anyio.EndOfStream)):
            await s.receive()


async def test_stall_is_half_open_and_new_connections_work(proxy: FaultProxy) -> None:
    async with await _connect(proxy) as stalled:
        await _roundtrip(stalled, b"x")
        proxy.stall()
        await stalled.send(b"ping")
        with anyio.move_on_after(0.5) as scope:  # neither data nor EOF comes back
            await stalled.receive()
        assert scope.cancelled_caught
        async with await _connect(proxy) as fresh:
            with anyio.fail_after(5):
                assert await _roundtrip(fresh, b"y") == b"y"
        proxy.resume_stalled()
        with anyio.fail_after(5):
            assert await stalled.receive() == b"ping"


async def test_stall_new_connections_too(proxy: FaultProxy) -> None:
    proxy.stall(new=True)
    async with await _connect(proxy) as s:
        await s.send(b"z")
        with anyio.move_on_after(0.3) as scope:
            await s.receive()
        assert scope.cancelled_caught


async def test_latency_delays_each_direction(proxy: FaultProxy) -> None:
    proxy.latency = 0.2
    async with await _connect(proxy) as s:
        start = anyio.current_time()
        await _roundtrip(s, b"x")
        assert anyio.current_time() - start >= 0.4  # there and back


async def test_bandwidth_throttles(proxy: FaultProxy) -> None:
    proxy.bandwidth = 2 * 1024 * 1024  # 2 MiB/s each way
    data = b"b" * (512 * 1024)
    async with await _connect(proxy) as s:
        start = anyio.current_time()
        await _roundtrip(s, data)
        assert anyio.current_time() - start >= 0.2  # 0.25 s each way at the limit
    proxy.heal()
    assert proxy.bandwidth is None


async def test_refuse_resets_new_connections(proxy: FaultProxy) -> None:
    proxy.refuse = True
    async with await _connect(proxy) as s:
        with (
            anyio.fail_after(5),
            pytest.raises(
                (anyio.BrokenResourceError, anyio.EndOfStream, anyio.ClosedResourceError)
            ),
        ):
            await s.send(b"x")
            await s.receive()


async def test_drop_can_reset_the_servers_side_later() -> None:
    """``drop(server_after=s)``: the client's side is reset at once, the server's side
    only ``s`` seconds later (a server that learns of the break after the client)."""
    ended = anyio.Event()

    async def serve(stream: anyio.abc.SocketStream) -> None:
        await _echo(stream)
        ended.set()

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    async with anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, serve)
        async with FaultProxy(f"127.0.0.1:{port}") as proxy, await _connect(proxy) as s:
            await _roundtrip(s, b"x")
            proxy.drop(server_after=0.5)
            dropped = anyio.current_time()
            with anyio.fail_after(5), pytest.raises((anyio.BrokenResourceError, anyio.EndOfStream)):
                await s.receive()
            assert not ended.is_set()
            with anyio.fail_after(5):
                await ended.wait()
            assert anyio.current_time() - dropped >= 0.5
        tg.cancel_scope.cancel()
