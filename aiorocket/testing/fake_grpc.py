"""A scriptable fake of the RocketMQ 5.x Proxy's gRPC service, for faults a real Proxy
cannot be made to produce on demand (a receive stream that breaks or hangs midway, a
Proxy that goes away and comes back). Needs the ``grpc`` extra; asyncio only.

    async with FakeProxy() as proxy:
        proxy.receive_mode = "unavailable"      # one message, then gRPC UNAVAILABLE
        ... SimpleConsumer("g", proxy.endpoint, {"t": "*"}) ...

It answers Telemetry settings (echoing the client's, as the Proxy merges them),
Heartbeat, QueryRoute, QueryAssignment and NotifyClientTermination with OK;
AckMessage with an OK entry per message (recorded in ``acked``; held while ``ack_gate``
is set and not yet open); ChangeInvisibleDuration with a new receipt handle (recorded
in ``invisible_changes``; held while ``change_gate`` is set and not yet
open); ForwardMessageToDeadLetterQueue with OK (the handles in
``dead_lettered``; held while ``dead_letter_gate`` is set and not yet open); and
ReceiveMessage according to ``receive_mode`` (an auto-renewed receive is refused with
ILLEGAL_INVISIBLE_TIME unless ``auto_renew``, as a Proxy with
``enableProxyAutoRenew=false`` does; a receive from a client whose settings have not
come since the start is refused with INTERNAL_SERVER_ERROR, as the real one; every
receive is refused with ``receive_refusal`` while it is set):
``"ok"`` (Status OK then the queued ``messages``), ``"unavailable"`` (one message, then
the stream ends with gRPC UNAVAILABLE), ``"reset"`` (one message, then the connection
drops), ``"stall"`` (one message, then nothing) or ``"hang"`` (nothing, ever).
SendMessage records each request (``send_requests``, ``wait_sends``), stores the
messages in ``sent`` and answers OK, or never answers while ``send_hangs``. ``restart``
drops every connection, as a Proxy that restarts does. Faults of any call:
``fail_next(rpc, error)`` fails that RPC's next call with a gRPC error (RESOURCE_EXHAUSTED,
say); ``stall_connections()`` leaves every call on the connections open now unanswered
while HTTP/2 still answers PINGs (a half-open Proxy); ``ask_reconnect()`` sends each
client the Proxy's ReconnectEndpointsCommand. ``connections`` counts the client
connections seen, ``receive_attempts`` each ReceiveMessage's ``attempt_id``.

Who is registered (``registered``, by client id) follows the real Proxy
(``ClientActivity``): a settings message registers its client, a Heartbeat registers a
client whose settings it found, NotifyClientTermination removes the settings and the
registration. ``lag`` holds the next Heartbeat or settings message (``"settings"``) for
a while after it arrived, ended early by a NotifyClientTermination, then applies it:
the real Proxy runs the three on one pool of several threads, and may apply a call
after a termination sent later (the order they were applied in: ``applied``).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from functools import partial
from typing import Any, Literal

from aiorocket._extras import needs_extra

with needs_extra("grpc", "aiorocket.testing.fake_grpc (a fake gRPC Proxy)"):
    from grpclib.const import Cardinality, Handler
    from grpclib.const import Status as GrpcStatus
    from grpclib.exceptions import GRPCError
    from grpclib.server import Server, Stream

from aiorocket.grpc import _pb as pb

__all__ = ["FakeProxy"]


def _client_id(stream: Stream[Any, Any]) -> str:
    return str(stream.metadata.get("x-mq-client-id", "")) if stream.metadata else ""


#: the answer of 5.5.0's ReceiveMessageActivity to a client whose settings it does not
#: hold (it reads them first)
SETTINGS_IS_NULL = pb.ReceiveMessageResponse(
    status=pb.Status(code=pb.Code.INTERNAL_SERVER_ERROR, message='"settings" is null')
)

ReceiveMode = Literal["ok", "unavailable", "reset", "hang", "stall"]
_PATH = "/apache.rocketmq.v2.MessagingService/"
_OK = pb.Status(code=pb.Code.OK, message="OK")


class FakeProxy:
    """The fake Proxy (see the module docstring).

    Parameters
    ----------
    port:
        the port to listen on, 0 for any (the same port again after ``restart``).
    """

    def __init__(self, port: int = 0) -> None:
        self.port = port
        self.receive_mode: ReceiveMode = "ok"
        #: SendMessage stores every message (in ``sent``) or, when True, never answers
        self.send_hangs = False
        #: seconds SendMessage waits before it answers (a slow but live Proxy)
        self.send_delay = 0.0
        #: Telemetry ends every stream after the client's first command: with this gRPC
        #: error, or with status OK and no answer (``"end"``)
        self.telemetry_refusal: GRPCError | Literal["end"] | None = None
        self.sent: list[pb.Message] = []
        #: every SendMessage request: when it came (``time.monotonic()``) and its ids
        self.send_requests: list[tuple[float, list[str]]] = []
        self._send_seen = asyncio.Event()
        #: messages ReceiveMessage hands out (each once)
        self.messages: list[pb.Message] = []
        #: settings commands received on Telemetry, and the streams opened
        self.settings_received: list[pb.Settings] = []
        self.telemetry_streams = 0
        #: the client's answers on Telemetry to the commands ``command`` sent
        self.command_answers: list[pb.TelemetryCommand] = []
        self._answered = asyncio.Event()
        self._telemetry_stream: Stream[pb.TelemetryCommand, pb.TelemetryCommand] | None = None
        self.calls: list[str] = []
        #: receipt handles acked, in order; AckMessage waits for ``ack_gate`` when set
        self.acked: list[str] = []
        #: what ``acked`` held when each NotifyClientTermination came (it frees the rest)
        self.acked_at_termination: list[list[str]] = []
        #: set at the first NotifyClientTermination (once it dropped the settings)
        self.termination_seen = asyncio.Event()
        self.ack_gate: asyncio.Event | None = None
        #: the next this many AckMessage calls fail with gRPC UNAVAILABLE
        self.ack_failures = 0
        #: the next this many AckMessage calls answer every entry with this status code
        #: (the call itself OK): (code, calls)
        self.ack_entry_refusal: tuple[pb.Code, int] | None = None
        #: the next this many ChangeInvisibleDuration calls answer this code: (code, calls)
        self.change_refusal: tuple[pb.Code, int] | None = None
        self._acked_seen = asyncio.Event()
        self.ack_started = asyncio.Event()
        #: (receipt handle, seconds) of each ChangeInvisibleDuration
        self.invisible_changes: list[tuple[str, float]] = []
        #: ChangeInvisibleDuration waits for this event when set (before it answers)
        self.change_gate: asyncio.Event | None = None
        #: receipt handles of each ForwardMessageToDeadLetterQueue
        self.dead_lettered: list[str] = []
        #: ForwardMessageToDeadLetterQueue fails with this gRPC error when set
        self.dead_letter_refusal: GRPCError | None = None
        #: ForwardMessageToDeadLetterQueue waits for this event when set (before it
        #: answers, or fails with ``dead_letter_refusal``); set at each such request
        self.dead_letter_gate: asyncio.Event | None = None
        self.dead_letter_started = asyncio.Event()
        #: renew auto-renewed receives itself (else refuse them, as the real one does
        #: when configured so)
        self.auto_renew = True
        self.receive_started = asyncio.Event()
        #: seconds each ReceiveMessage waits before it answers (a Proxy's round trip),
        #: and the receives in flight now and at most so far
        self.receive_delay = 0.0
        #: when set, a receive sends its batch's first message, then waits for this
        #: event before the rest (a Proxy still writing a batch, message by message)
        self.stream_gate: asyncio.Event | None = None
        self.receives_in_flight = 0
        self.max_receives_in_flight = 0
        #: while set, every ReceiveMessage is answered with this status code
        self.receive_refusal: pb.Code | None = None
        #: a consumer's group is FIFO (the settings it is answered with say so)
        self.fifo = False
        #: client ids whose settings came since the (re)start: a receive from another
        #: one is refused as the real Proxy does (counted here)
        self._known: set[str] = set()
        self.receives_without_settings = 0
        self._server: Server | None = None
        self._transports: set[asyncio.BaseTransport] = set()
        #: client connections seen since the first start
        self.connections = 0
        self._seen: set[int] = set()
        #: connections whose calls are never answered (``stall_connections``)
        self._stalled: set[asyncio.BaseTransport] = set()
        #: rpc -> gRPC errors its next calls fail with, in order (``fail_next``)
        self._failures: dict[str, list[GRPCError]] = {}
        #: the attempt_id of each ReceiveMessage (None: the request had none)
        self.receive_attempts: list[str | None] = []
        #: the open Telemetry streams (``ask_reconnect``)
        self._telemetry_open: set[Stream[pb.TelemetryCommand, pb.TelemetryCommand]] = set()
        #: client ids the Proxy lists (as a group's consumer, a topic's producer)
        self.registered: set[str] = set()
        #: "Heartbeat" or "settings" -> seconds the next one is held (module docstring);
        #: ``held`` is set when it arrives
        self.lag: dict[str, float] = {}
        self.held = asyncio.Event()
        #: "Heartbeat", "settings", "NotifyClientTermination", as they were applied
        self.applied: list[str] = []
        self._terminated = asyncio.Event()
        self._lagging: set[asyncio.Task[None]] = set()

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    def __mapping__(self) -> dict[str, Handler]:
        def unary(name: str, req: type[Any], rep: type[Any]) -> tuple[str, Handler]:
            async def handle(stream: Stream[Any, Any]) -> None:
                await self._admit(stream)
                await stream.recv_message()
                self._fail(name)
                self.calls.append(name)
                cid = _client_id(stream)
                if name == "NotifyClientTermination":  # the real one drops the settings
                    self.acked_at_termination.append(list(self.acked))
                    self._drop_settings(cid)
                    self.registered.discard(cid)
                    self.applied.append(name)
                    self.termination_seen.set()
                    self._terminated.set()  # what was held until now
                    self._terminated = asyncio.Event()
                elif name == "Heartbeat":
                    # the real one reads the settings first, then registers the client
                    known = cid in self._known
                    await self._apply(name, cid, partial(self._heartbeat, cid, known))
                await stream.send_message(rep(status=_OK))

            return _PATH + name, Handler(handle, Cardinality.UNARY_UNARY, req, rep)

        def handler(name: str, fn: Any, kind: Cardinality, req: type[Any], rep: type[Any]
                    ) -> tuple[str, Handler]:  # fmt: skip
            return _PATH + name, Handler(fn, kind, req, rep)

        unary_unary, unary_stream = Cardinality.UNARY_UNARY, Cardinality.UNARY_STREAM
        return dict(
            [
                unary("Heartbeat", pb.HeartbeatRequest, pb.HeartbeatResponse),
                unary(
                    "NotifyClientTermination",
                    pb.NotifyClientTerminationRequest,
                    pb.NotifyClientTerminationResponse,
                ),
                handler("AckMessage", self._ack, unary_unary,
                        pb.AckMessageRequest, pb.AckMessageResponse),
                handler("ChangeInvisibleDuration", self._change, unary_unary,
                        pb.ChangeInvisibleDurationRequest, pb.ChangeInvisibleDurationResponse),
                handler("ForwardMessageToDeadLetterQueue", self._dead_letter, unary_unary,
                        pb.ForwardMessageToDeadLetterQueueRequest,
                        pb.ForwardMessageToDeadLetterQueueResponse),
                handler("QueryAssignment", self._assignment, unary_unary,
                        pb.QueryAssignmentRequest, pb.QueryAssignmentResponse),
                handler("Telemetry", self._telemetry, Cardinality.STREAM_STREAM,
                        pb.TelemetryCommand, pb.TelemetryCommand),
                handler("ReceiveMessage", self._receive, unary_stream,
                        pb.ReceiveMessageRequest, pb.ReceiveMessageResponse),
                handler("SendMessage", self._send, unary_unary,
                        pb.SendMessageRequest, pb.SendMessageResponse),
            ]
        )  # fmt: skip

    async def _telemetry(self, stream: Stream[pb.TelemetryCommand, pb.TelemetryCommand]) -> None:
        self.telemetry_streams += 1
        await self._admit(stream)
        if self.telemetry_refusal is not None:
            await stream.recv_message()
            if self.telemetry_refusal == "end":
                return  # trailers with grpc-status OK, nothing said
            raise self.telemetry_refusal
        self._telemetry_open.add(stream)
        self._telemetry_stream = stream
        try:
            async for cmd in stream:
                kind, settings = pb.oneof(cmd, "command")
                if kind == "settings":
                    if self.fifo and settings.subscription is not None:
                        settings.subscription.fifo = True
                    cid = _client_id(stream)
                    await self._apply("settings", cid, partial(self._settings, cid, settings))
                    await stream.send_message(pb.TelemetryCommand(status=_OK, settings=settings))
                else:  # an answer to a command (print stack, verify message)
                    self.command_answers.append(cmd)
                    self._answered.set()
        finally:
            self._telemetry_open.discard(stream)

    def _settings(self, cid: str, settings: pb.Settings) -> None:
        self.settings_received.append(settings)
        self._known.add(cid)
        self.registered.add(cid)
        self.applied.append("settings")

    def _drop_settings(self, cid: str) -> None:
        """A NotifyClientTermination of ``cid`` read: its settings are gone (5.5.0's
        ``ClientActivity.notifyClientTermination`` removes them from the settings
        manager before anything else)."""
        self._known.discard(cid)

    def _heartbeat(self, cid: str, known: bool) -> None:
        if known:
            self.registered.add(cid)
        self.applied.append("Heartbeat")

    async def _apply(self, kind: str, cid: str, apply: Callable[[], None]) -> None:
        """Apply client ``cid``'s call now, or once ``lag`` holds it (the module
        docstring) at its end, whoever stops waiting for it meanwhile (the real one's
        pool runs what it took)."""
        lag = self.lag.pop(kind, None)
        if lag is None:
            apply()
            return

        terminated = self._terminated  # one that comes from now on

        async def held() -> None:
            self.held.set()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(terminated.wait(), lag)
            apply()

        task = asyncio.ensure_future(held())
        self._lagging.add(task)
        task.add_done_callback(self._lagging.discard)
        await asyncio.shield(task)

    async def lag_ended(self) -> None:
        """Until every call ``lag`` held was applied."""
        while self._lagging:
            await asyncio.wait(set(self._lagging))

    async def command(self, cmd: pb.TelemetryCommand) -> pb.TelemetryCommand:
        """Send the client ``cmd`` (a print-stack or verify-message command, as a Proxy
        forwards an operator's request) on its telemetry stream; its answer."""
        assert self._telemetry_stream is not None, "no telemetry stream yet"
        seen = len(self.command_answers)
        await self._telemetry_stream.send_message(cmd)
        while len(self.command_answers) <= seen:
            self._answered.clear()
            await self._answered.wait()
        return self.command_answers[seen]

    async def _ack(self, stream: Stream[pb.AckMessageRequest, pb.AckMessageResponse]) -> None:
        await self._admit(stream)
        req = await stream.recv_message()
        assert req is not None
        self._fail("AckMessage")
        self.calls.append("AckMessage")
        self.ack_started.set()
        if self.ack_failures:
            self.ack_failures -= 1
            raise GRPCError(GrpcStatus.UNAVAILABLE, "fake proxy: ack refused")
        if self.ack_gate is not None:
            await self.ack_gate.wait()
        status, refusal = _OK, self.ack_entry_refusal
        if refusal is not None:
            status = pb.Status(code=refusal[0], message="fake proxy: entry refused")
            self.ack_entry_refusal = (refusal[0], refusal[1] - 1) if refusal[1] > 1 else None
        entries = []
        for entry in req.entries:
            if status is _OK:
                self.acked.append(entry.receipt_handle)
            entries.append(pb.AckMessageResultEntry(
                message_id=entry.message_id, receipt_handle=entry.receipt_handle, status=status
            ))  # fmt: skip
        self._acked_seen.set()
        await stream.send_message(pb.AckMessageResponse(status=_OK, entries=entries))

    async def wait_acked(self) -> None:
        """Wait for the next AckMessage answer."""
        self._acked_seen.clear()
        await self._acked_seen.wait()

    async def wait_acks(self, n: int) -> None:
        """Wait until ``n`` messages in all have been acked (``acked`` holds ``n``)."""
        while len(self.acked) < n:
            await self.wait_acked()

    async def _change(
        self,
        stream: Stream[pb.ChangeInvisibleDurationRequest, pb.ChangeInvisibleDurationResponse],
    ) -> None:
        await self._admit(stream)
        req = await stream.recv_message()
        assert req is not None
        self._fail("ChangeInvisibleDuration")
        self.calls.append("ChangeInvisibleDuration")
        refusal = self.change_refusal
        if refusal is not None:
            self.change_refusal = (refusal[0], refusal[1] - 1) if refusal[1] > 1 else None
            await stream.send_message(pb.ChangeInvisibleDurationResponse(
                status=pb.Status(code=refusal[0], message="fake proxy: change refused")
            ))  # fmt: skip
            return
        if self.change_gate is not None:
            await self.change_gate.wait()
        seconds = req.invisible_duration.total_seconds() if req.invisible_duration else 0.0
        self.invisible_changes.append((req.receipt_handle, seconds))
        await stream.send_message(pb.ChangeInvisibleDurationResponse(
            status=_OK, receipt_handle=f"{req.receipt_handle}+"
        ))  # fmt: skip

    async def _dead_letter(
        self,
        stream: Stream[
            pb.ForwardMessageToDeadLetterQueueRequest, pb.ForwardMessageToDeadLetterQueueResponse
        ],
    ) -> None:
        await self._admit(stream)
        req = await stream.recv_message()
        assert req is not None
        self._fail("ForwardMessageToDeadLetterQueue")
        self.calls.append("ForwardMessageToDeadLetterQueue")
        self.dead_letter_started.set()
        if self.dead_letter_gate is not None:
            await self.dead_letter_gate.wait()
        if self.dead_letter_refusal is not None:
            raise self.dead_letter_refusal
        self.dead_lettered.append(req.receipt_handle)
        await stream.send_message(pb.ForwardMessageToDeadLetterQueueResponse(status=_OK))

    async def _assignment(
        self, stream: Stream[pb.QueryAssignmentRequest, pb.QueryAssignmentResponse]
    ) -> None:
        await self._admit(stream)
        req = await stream.recv_message()
        assert req is not None
        self._fail("QueryAssignment")
        mq = pb.MessageQueue(
            topic=req.topic, id=-1, permission=pb.Permission.READ_WRITE,
            broker=pb.Broker(name="fake-broker", endpoints=req.endpoints),
        )  # fmt: skip
        await stream.send_message(
            pb.QueryAssignmentResponse(status=_OK, assignments=[pb.Assignment(message_queue=mq)])
        )

    async def _send(self, stream: Stream[pb.SendMessageRequest, pb.SendMessageResponse]) -> None:
        await self._admit(stream)
        req = await stream.recv_message()
        assert req is not None
        self.calls.append("SendMessage")
        ids = [m.system_properties.message_id for m in req.messages]
        self.send_requests.append((time.monotonic(), ids))
        self._send_seen.set()
        self._fail("SendMessage")
        if self.send_hangs:
            await asyncio.Event().wait()
        if self.send_delay:
            await asyncio.sleep(self.send_delay)
        entries = []
        for msg in req.messages:
            self.sent.append(msg)
            entries.append(
                pb.SendResultEntry(
                    status=_OK, message_id=msg.system_properties.message_id,
                    offset=len(self.sent) - 1,
                )
            )  # fmt: skip
        await stream.send_message(pb.SendMessageResponse(status=_OK, entries=entries))

    async def _receive(
        self, stream: Stream[pb.ReceiveMessageRequest, pb.ReceiveMessageResponse]
    ) -> None:
        await self._admit(stream)
        req = await stream.recv_message()
        assert req is not None
        self.receive_attempts.append(req.attempt_id)
        self._fail("ReceiveMessage")
        self.receive_started.set()
        if _client_id(stream) not in self._known:
            self.receives_without_settings += 1
            await stream.send_message(SETTINGS_IS_NULL)
            return
        if self.receive_refusal is not None:
            await stream.send_message(pb.ReceiveMessageResponse(status=pb.Status(
                code=self.receive_refusal, message="fake proxy: receive refused"
            )))  # fmt: skip
            return
        if req.auto_renew and not self.auto_renew:
            await stream.send_message(pb.ReceiveMessageResponse(status=pb.Status(
                code=pb.Code.ILLEGAL_INVISIBLE_TIME, message="auto renew is off"
            )))  # fmt: skip
            return
        mode = self.receive_mode
        if mode == "hang":
            await asyncio.Event().wait()
        if self.receive_delay:
            self.receives_in_flight += 1
            self.max_receives_in_flight = max(self.max_receives_in_flight,
                                              self.receives_in_flight)  # fmt: skip
            try:
                await asyncio.sleep(self.receive_delay)
            finally:
                self.receives_in_flight -= 1
        # at most the batch asked for, as the real one (which answers 32 at most)
        n = req.batch_size or len(self.messages)
        batch, self.messages = self.messages[:n], self.messages[n:]
        if not batch:
            await stream.send_message(
                pb.ReceiveMessageResponse(status=pb.Status(code=pb.Code.MESSAGE_NOT_FOUND))
            )
            return
        await stream.send_message(pb.ReceiveMessageResponse(status=_OK))
        for i, msg in enumerate(batch if mode == "ok" else batch[:1]):
            if i == 1 and self.stream_gate is not None:
                await self.stream_gate.wait()
            await stream.send_message(pb.ReceiveMessageResponse(message=msg))
        if mode == "unavailable":
            raise GRPCError(GrpcStatus.UNAVAILABLE, "fake proxy going away")
        if mode == "reset":
            self.drop_connections()
            await asyncio.Event().wait()
        if mode == "stall":
            await asyncio.Event().wait()

    async def wait_sends(self, count: int) -> list[str]:
        """Wait for the ``count``-th SendMessage request; its message ids."""
        while len(self.send_requests) < count:
            self._send_seen.clear()
            await self._send_seen.wait()
        return self.send_requests[count - 1][1]

    async def _admit(self, stream: Stream[Any, Any]) -> None:
        """Note the call's connection; a stalled one never answers. (A failure queued
        for the call's RPC is raised by ``_fail``, once the request is read.)"""
        # grpclib keeps the connection's transport on its protocol stream (private).
        transport = getattr(getattr(stream, "_stream", None), "_transport", None)
        if isinstance(transport, asyncio.BaseTransport):
            self._transports.add(transport)
            if id(transport) not in self._seen:
                self._seen.add(id(transport))
                self.connections += 1
            if transport in self._stalled:
                await asyncio.Event().wait()

    def _fail(self, rpc: str) -> None:
        queued = self._failures.get(rpc)
        if queued:
            raise queued.pop(0)

    def fail_next(self, rpc: str, error: GRPCError, times: int = 1) -> None:
        """The next ``times`` calls of ``rpc`` fail with ``error``."""
        self._failures.setdefault(rpc, []).extend([error] * times)

    def stall_connections(self) -> None:
        """Every call that starts on the client connections open now goes unanswered,
        while HTTP/2 (PINGs) still answers: a half-open Proxy, or
        one behind an intermediary that answers PINGs itself. New connections work."""
        self._stalled |= self._transports

    async def ask_reconnect(self) -> int:
        """Send ReconnectEndpointsCommand on every open Telemetry stream; how many."""
        streams = list(self._telemetry_open)
        for stream in streams:
            await stream.send_message(pb.TelemetryCommand(
                reconnect_endpoints_command=pb.ReconnectEndpointsCommand(nonce="fake")
            ))  # fmt: skip
        return len(streams)

    def drop_connections(self) -> None:
        """Close every client connection at once (TCP close, no HTTP/2 goodbye)."""
        transports, self._transports = self._transports, set()
        for transport in transports:
            transport.close()

    # -- lifecycle -------------------------------------------------------------------

    def _new_server(self) -> Server:
        """The grpclib server of a start (the simulator's Proxy wraps its connections)."""
        return Server([self])

    async def start(self) -> None:
        server = self._new_server()
        await server.start("127.0.0.1", self.port)
        listener: Any = server._server  # an asyncio.Server
        self.port = int(listener.sockets[0].getsockname()[1])
        self._server = server

    async def stop(self) -> None:
        self._known.clear()  # a restarted Proxy knows no client
        if self._server is not None:
            server, self._server = self._server, None
            self.drop_connections()
            server.close()
            await server.wait_closed()

    async def restart(self, down: float = 0.0) -> None:
        """Go away (every stream and connection ends, every client forgotten) and come
        back on the same port ``down`` seconds later."""
        await self.stop()
        await asyncio.sleep(down)
        await self.start()

    async def __aenter__(self) -> FakeProxy:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
