"""The Proxy's operator commands to a gRPC consumer (issue 42), on the fake Proxy: the
print-stack command (``mqadmin consumerStatus -s`` and the Dashboard, which a Proxy
forwards as PrintThreadStackTraceCommand) answered with what each task awaits, and the
verify-message command (consume-message-directly) run through the handler, as Java's
push consumer answers them. Before: a fixed "(asyncio client)" and NOT_IMPLEMENTED.
The real Proxy forwards consume-directly: tests/integration/test_consumer_status.py."""

from __future__ import annotations

import anyio
import pytest

pytest.importorskip("grpclib")

from aiorocket.consumer import ConsumerMessage
from aiorocket.grpc import SimpleConsumer
from aiorocket.grpc import _pb as pb
from aiorocket.testing.fake_grpc import FakeProxy
from tests.unit.test_grpc_pop_runtime import _message, _one_message_consumer

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_print_stack_answers_what_each_task_awaits() -> None:
    entered = anyio.Event()

    async def handler_waiting_here(msg: ConsumerMessage) -> None:
        entered.set()
        await anyio.sleep_forever()

    async with FakeProxy() as proxy:
        consumer = _one_message_consumer(proxy, handler_waiting_here, shutdown_timeout=0.1)
        async with consumer:
            with anyio.fail_after(10):
                await entered.wait()
                answer = await proxy.command(pb.TelemetryCommand(
                    print_thread_stack_trace_command=pb.PrintThreadStackTraceCommand(nonce="n1")
                ))  # fmt: skip
    assert answer.status.code == pb.Code.OK
    assert answer.thread_stack_trace.nonce == "n1"
    stacks = answer.thread_stack_trace.thread_stack_trace or ""
    assert "asyncio tasks" in stacks
    # the handler's task, down to what it awaits
    assert "handler_waiting_here" in stacks and "sleep_forever" in stacks, stacks[:2000]


async def test_verify_message_runs_the_handler() -> None:
    seen: list[bytes] = []
    fail = False
    delivered = anyio.Event()

    async def handle(msg: ConsumerMessage) -> bool:
        seen.append(msg.body)
        delivered.set()
        return not fail

    async with FakeProxy() as proxy:
        consumer = _one_message_consumer(proxy, handle)
        async with consumer:
            with anyio.fail_after(10):
                await delivered.wait()  # the one message of the fake Proxy

                async def verify(nonce: str) -> pb.TelemetryCommand:
                    return await proxy.command(pb.TelemetryCommand(
                        verify_message_command=pb.VerifyMessageCommand(
                            nonce=nonce, message=_message(7)),
                    ))  # fmt: skip

                ok = await verify("v1")
                fail = True
                failed = await verify("v2")
    assert ok.status.code == pb.Code.OK and ok.verify_message_result.nonce == "v1"
    assert failed.status.code == pb.Code.FAILED_TO_CONSUME_MESSAGE
    assert failed.verify_message_result.nonce == "v2"
    assert seen == [b"m0", b"m7", b"m7"]
    assert proxy.acked == ["rh0"]  # the verified copies are not acked


async def test_a_session_without_a_handler_says_not_implemented() -> None:
    async with FakeProxy() as proxy, SimpleConsumer("g", proxy.endpoint, {"t": "*"}):
        with anyio.fail_after(10):
            answer = await proxy.command(pb.TelemetryCommand(
                verify_message_command=pb.VerifyMessageCommand(nonce="v", message=_message(1))
            ))  # fmt: skip
    assert answer.status.code == pb.Code.NOT_IMPLEMENTED


async def test_verify_of_a_message_that_does_not_decode_fails_it_and_keeps_the_consumer() -> None:
    """A VerifyMessageCommand whose message body does not decode (labelled GZIP, not
    compressed) is answered FAILED_TO_CONSUME_MESSAGE and the consumer goes on. Before,
    the decode error escaped the session's background task: the session's task group
    failed and cancelled the application's ``async with consumer`` (an operator's
    ``queryMsgById -d`` took the consumer down)."""
    delivered = anyio.Event()

    async def handle(msg: ConsumerMessage) -> None:
        delivered.set()

    bad = _message(9)
    bad.body = b"not compressed"
    bad.system_properties.body_encoding = pb.Encoding.GZIP
    async with FakeProxy() as proxy:
        consumer = _one_message_consumer(proxy, handle)
        async with consumer:
            with anyio.fail_after(10):
                await delivered.wait()
                answer = await proxy.command(pb.TelemetryCommand(
                    verify_message_command=pb.VerifyMessageCommand(nonce="v", message=bad)
                ))  # fmt: skip
                good = await proxy.command(pb.TelemetryCommand(
                    verify_message_command=pb.VerifyMessageCommand(nonce="w", message=_message(3))
                ))  # fmt: skip
    assert answer.status.code == pb.Code.FAILED_TO_CONSUME_MESSAGE
    assert answer.verify_message_result.nonce == "v"
    assert good.status.code == pb.Code.OK


async def test_a_verify_handler_that_raises_is_answered_internal_error() -> None:
    """The session's guard under any ``on_verify``: its failure is an answer, not a
    failed background task of the session."""

    async def broken(message: pb.Message) -> pb.Code:
        raise RuntimeError("boom")

    async with FakeProxy() as proxy, SimpleConsumer("g", proxy.endpoint, {"t": "*"}) as c:
        c.session.on_verify = broken
        with anyio.fail_after(10):
            answer = await proxy.command(pb.TelemetryCommand(
                verify_message_command=pb.VerifyMessageCommand(nonce="v", message=_message(1))
            ))  # fmt: skip
            second = await proxy.command(pb.TelemetryCommand(
                verify_message_command=pb.VerifyMessageCommand(nonce="w", message=_message(2))
            ))  # fmt: skip
    assert answer.status.code == second.status.code == pb.Code.INTERNAL_ERROR
