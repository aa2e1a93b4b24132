"""A client's session with the Proxy: Telemetry settings sync, heartbeats, routes, close.

The Proxy knows a client only through the settings it sent on its ``Telemetry`` stream:
Heartbeat answers UNRECOGNIZED_CLIENT_TYPE and ReceiveMessage fails without them. So
``Session.__aenter__`` opens the stream, sends the settings and waits (bounded) for
the Proxy's merged settings before anything else. A background task keeps the stream:
it applies settings the Proxy pushes later, hands server commands (orphaned
transactions) to the registered handler, and reopens the stream with exponential
backoff when it breaks. Heartbeats go every ``heartbeat_interval``. Closing stops both
tasks, sends NotifyClientTermination (bounded) and closes the connection.

The termination is the last word the Proxy hears from a client. The Proxy runs
Telemetry's messages, Heartbeat and NotifyClientTermination on one pool of several
threads (``GrpcMessagingApplication``: ``clientManagerThreadPoolExecutor``), so the order
they were sent in does not decide the order they are applied in, and a settings message
(``ClientActivity.processAndWriteClientSettings``: registers the producer or consumer
and stores the settings again) or a heartbeat (``ClientActivity.heartbeat``: registers
it again when it read the settings before the termination removed them) applied after
the termination lists the closed client again: a consumer among its group's members, a
transactional producer called back for its checks, until the Proxy expires it. So once
the close begins no settings message, no heartbeat and no new telemetry stream go out,
and the termination waits (at most ``request_timeout``) for the settings the Proxy has
not answered yet and the heartbeats under way: both are answered once applied.

Two ways to a new connection besides a lost one (as the Java client 5.2.1 does,
rocketmq-clients#1309/#1310): the Proxy's ReconnectEndpointsCommand moves the client to
a new connection (calls under way finish on the old one; the telemetry stream moves at
once), and heartbeats that time out ``HEARTBEAT_FAILURES`` times in a row abandon the
connection (at most once per ``RECOVERY_COOLDOWN``): one that takes calls and answers
none while its HTTP/2 PINGs are answered, which the keepalive cannot tell from a live
one (a Proxy whose gRPC executor is stuck, an intermediary that answers PINGs itself).
"""

from __future__ import annotations

import platform
import socket
import time
from collections.abc import Awaitable, Callable, Coroutine
from contextlib import AsyncExitStack
from datetime import timedelta
from types import TracebackType
from typing import Any, cast

import anyio
import anyio.abc
import anyio.lowlevel
import sniffio
from grpclib.client import Stream

from aiorocket._log import get_logger
from aiorocket._stacks import process_stacks
from aiorocket._tasks import BackgroundTasks, close_bound
from aiorocket.errors import (
    ClientClosedError,
    ConnectionClosedError,
    ProxyUnavailableError,
    RequestTimeoutError,
    RocketMQError,
    UnsupportedTransportError,
)
from aiorocket.grpc import _pb as pb
from aiorocket.grpc._release_hold import ReleaseHold
from aiorocket.grpc._transport import GrpcTransport, check_status
from aiorocket.namespace import wrap

__all__ = [
    "LiteDropHandler",
    "OrphanHandler",
    "Session",
    "VerifyHandler",
    "ensure_asyncio",
]

#: Handles one RecoverOrphanedTransactionCommand (the producer answers it).
OrphanHandler = Callable[[pb.RecoverOrphanedTransactionCommand], Coroutine[Any, Any, None]]
#: Told the lite topic the Proxy dropped from this (lite) consumer's subscriptions.
LiteDropHandler = Callable[[str], None]
#: Runs the message of a VerifyMessageCommand (the Proxy's consume-message-directly,
#: ``mqadmin queryMsgById -d``) through the handler: OK, or FAILED_TO_CONSUME_MESSAGE.
VerifyHandler = Callable[[pb.Message], Coroutine[Any, Any, "pb.Code"]]

_ROUTE_TTL = 30.0
#: seconds between attempts to reopen the telemetry stream while a call waits for it
#: (a refused connection costs little; the Proxy's first answer comes this much sooner)
_RETRY_WHILE_AWAITED = 0.25
#: seconds before the telemetry stream's first reopening attempt after it broke,
#: doubled per attempt (up to 2**6 times) and at most ``_STREAM_BACKOFF_MAX``
_STREAM_BACKOFF, _STREAM_BACKOFF_MAX = 0.5, 30.0
#: NotifyClientTermination attempts to end the Proxy's hold after a broken receive
_RELEASE_ATTEMPTS = 6
#: heartbeats timed out in a row that abandon the connection (the Java client: 2)
HEARTBEAT_FAILURES = 2
#: seconds after abandoning a connection for failed heartbeats before the next time
#: (the Java client: 30 s): a Proxy slow for every connection is not helped by more
RECOVERY_COOLDOWN = 30.0


def ensure_asyncio(what: str) -> None:
    """grpclib runs on asyncio only: fail clearly anywhere else (trio)."""
    try:
        lib = sniffio.current_async_library()
    except sniffio.AsyncLibraryNotFoundError:
        lib = "none"
    if lib != "asyncio":
        raise UnsupportedTransportError(
            f"{what} over gRPC needs asyncio (grpclib is asyncio-only), running on {lib}; "
            "use the remoting transport (namesrv=...) on trio"
        )


def backoff_delays(policy: pb.RetryPolicy | None) -> Callable[[int], float]:
    """Delay before attempt ``n`` (1 = first retry) by the server's retry policy."""
    kind, strategy = ("", None) if policy is None else pb.oneof(policy, "strategy")
    strategy = cast(Any, strategy)
    if kind == "customized_backoff":
        steps = [d.total_seconds() for d in strategy.next] or [1.0]
        return lambda n: steps[min(n, len(steps)) - 1]
    initial, cap, mult = 0.01, 1.0, 2.0
    if kind == "exponential_backoff":
        exp = strategy
        initial = exp.initial.total_seconds() or initial
        cap = exp.max.total_seconds() or cap
        mult = exp.multiplier or mult
    return lambda n: float(min(cap, initial * mult ** max(0, n - 1)))


class Session:
    """The settings, heartbeat and route side of one gRPC client.

    Parameters
    ----------
    transport:
        the connection to the Proxy (closed with the session).
    client_type:
        PRODUCER or SIMPLE_CONSUMER/PUSH_CONSUMER.
    pub_sub:
        the ``Publishing`` (topics) or ``Subscription`` (group, filters) settings.
    group:
        the consumer group (heartbeats, termination); ``None`` for producers.
    heartbeat_interval:
        seconds between heartbeats (Java: 10 s).
    on_orphan:
        called with each orphaned-transaction command (producers).
    """

    def __init__(
        self,
        transport: GrpcTransport,
        client_type: pb.ClientType,
        pub_sub: pb.Publishing | pb.Subscription,
        *,
        group: str | None = None,
        heartbeat_interval: float = 10.0,
        on_orphan: OrphanHandler | None = None,
        version: str = "",
    ) -> None:
        self.transport = transport
        self.client_type = client_type
        self.pub_sub = pub_sub
        self.group = group
        self.heartbeat_interval = heartbeat_interval
        self.on_orphan = on_orphan
        #: a lite consumer's: the Proxy's NotifyUnsubscribeLiteCommand
        self.on_lite_dropped: LiteDropHandler | None = None
        #: called each time the Proxy has this client's settings again on a new
        #: connection, or after they were dropped (not at the start): a lite consumer
        #: sends its lite subscriptions again (the Proxy drops them with the old stream)
        self.on_reconnected: Callable[[], None] | None = None
        #: a push consumer's: sends the acks it owes, before ``release_held``'s
        #: termination frees every message the Proxy gave it (``_owed_first``)
        self.before_release: Callable[[], Awaitable[None]] | None = None
        #: a push consumer's handler for VerifyMessageCommand (None: NOT_IMPLEMENTED,
        #: as Java's clients other than the push consumer answer)
        self.on_verify: VerifyHandler | None = None
        #: the verify answers, written from their own tasks, one at a time
        self._reply_lock = anyio.Lock()
        self.version = version
        self.log = get_logger(
            "grpc", client_id=transport.client_id, endpoint=transport.endpoint, group=group
        )
        #: the Proxy's merged settings (after start).
        self.settings: pb.Settings | None = None
        self._settings_seen = anyio.Event()
        #: set while the Proxy has this client's settings on the current connection
        #: (replaced by an unset one when the telemetry stream breaks): see ``wait_ready``
        self._ready = anyio.Event()
        #: connections on which the Proxy got this client's settings so far (one more
        #: after each reconnect), and the event set when one is lost or a new one is up
        #: (``_changed``): see ``wait_new``
        self.connections = 0
        self._change = anyio.Event()
        #: cuts the telemetry loop's backoff short: a call waits for the session
        self._wake = anyio.Event()
        self._waiting = 0
        self._down_since: float | None = None
        #: why the telemetry stream last broke (for the errors of calls that wait for it)
        self.last_error: RocketMQError | None = None
        self._stream: Stream[pb.TelemetryCommand, pb.TelemetryCommand] | None = None
        self._routes: dict[str, tuple[float, list[pb.MessageQueue]]] = {}
        self._tg: anyio.abc.TaskGroup | None = None
        #: the started session's parts, unwound by the close (aiorocket._tasks)
        self._stack: AsyncExitStack | None = None
        self._closed = False
        self._start_error: RocketMQError | None = None
        #: releases of held messages begun (``release_held``), to coalesce concurrent ones
        self._releases = 0
        self._release_lock = anyio.Lock()
        #: the current telemetry stream's scope (``reconnect`` ends it)
        self._stream_scope: anyio.CancelScope | None = None
        #: when failed heartbeats last abandoned the connection (``RECOVERY_COOLDOWN``)
        self._recovered_at: float | None = None
        #: set when the close begins: no settings, heartbeat or telemetry stream from then
        self._leaving = False
        #: what the termination waits for (module docstring): heartbeats under way, and
        #: a stream per settings message sent on it not answered yet; ``_quiet`` is set
        #: at each end of one
        self._heartbeats = 0
        #: a heartbeat timed out once the close began (its connection likely silent)
        self._heartbeat_lost = False
        self._unanswered: list[Stream[pb.TelemetryCommand, pb.TelemetryCommand]] = []
        self._quiet = anyio.Event()
        #: when the close must be over (``close_bound`` after it began)
        self._close_deadline: float | None = None
        #: where a release of held messages stands (``release_held``), and the receives
        #: let go while ``ready`` not written yet (``admit``): the termination waits for
        #: them; ``_all_written`` is set as each is written or given up
        self._release = ReleaseHold()
        self._all_written = anyio.Event()

    # -- lifecycle -----------------------------------------------------------------

    async def __aenter__(self) -> Session:
        ensure_asyncio("this client")
        # One stack (aiorocket._tasks): a failed start unwinds it here, the close later.
        try:
            async with AsyncExitStack() as stack:
                stack.push_async_callback(self._end)
                tg = self._tg = await stack.enter_async_context(BackgroundTasks())
                tg.start_soon(self._telemetry_loop)
                # Set by the Proxy's settings, or by the first failure to open the stream:
                # an unreachable endpoint fails now, not after the timeout.
                with anyio.move_on_after(self.transport.request_timeout):
                    await self._settings_seen.wait()
                if self.settings is None:
                    raise self._start_error or ProxyUnavailableError(
                        f"no settings from the Proxy {self.transport.endpoint} "
                        f"within {self.transport.request_timeout}s"
                    )
                await self.heartbeat()
                tg.start_soon(self._heartbeat_loop)
                self._stack = stack.pop_all()
        finally:
            self._closed = self._stack is None
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._stop()

    async def _stop(self) -> None:
        """Stop sending settings and heartbeats, wait for those under way (bounded),
        stop the background tasks, then end the session (``_end``); idempotent."""
        self._closed = True
        stack, self._stack = self._stack, None
        if stack is not None:
            self._leaving = True
            timeout = self.transport.request_timeout
            self._close_deadline = anyio.current_time() + close_bound(timeout)
            # The telemetry loop still reads the answers meanwhile. Shielded as the
            # termination is (the close releases what the Proxy holds for the client
            # even when its caller is cancelled); the wait (a request timeout at most)
            # and the termination share the close's bound.
            with (
                anyio.CancelScope(shield=True),
                anyio.move_on_after(timeout) as scope,
            ):
                await self._under_way_ended()
            if scope.cancelled_caught or self._heartbeat_lost:
                # A call under way got no answer in its time: the connection is likely
                # silent, the termination (by client id) goes on a new one.
                self.transport.abandon()
            await stack.aclose()

    async def _under_way_ended(self) -> None:
        """Until no heartbeat is under way and the Proxy answered every settings message
        sent on a stream still open."""
        while self._heartbeats or self._unanswered:
            self._quiet = anyio.Event()
            self.log.debug("awaiting_calls", heartbeats=self._heartbeats,
                           settings=len(self._unanswered))  # fmt: skip
            await self._quiet.wait()

    async def _end(self) -> None:
        """Tell the Proxy this client is gone (when it knew us), close the connection;
        by the close's deadline (``close_bound`` from its start)."""
        deadline = self._close_deadline
        if deadline is None:  # a start that failed: no wait before
            deadline = anyio.current_time() + close_bound(self.transport.request_timeout)
        try:
            if self.settings is not None:
                with anyio.CancelScope(shield=True, deadline=deadline):
                    await self._terminate()
        finally:
            self.transport.close()

    async def _terminate(self) -> None:
        # Two tries, as the remoting unregister's: a termination lost with its connection
        # (silent: it timed out; or broken) is sent once more, on a new one (it names the
        # client, not the connection). Left listed, the client is a member of its group
        # until the Proxy expires it. Each try is bounded by its own request timeout.
        for last in (False, True):
            try:
                await self.notify_termination()
            except (ConnectionClosedError, RequestTimeoutError) as err:
                if not last:
                    self.log.info("termination_notice_retried", error=str(err))
                    self.transport.abandon()
                    continue
                self.log.warning("termination_notice_failed", error=str(err))
            except RocketMQError as err:
                self.log.warning("termination_notice_failed", error=str(err))
            break

    @property
    def closed(self) -> bool:
        return self._closed

    # -- telemetry -----------------------------------------------------------------

    def local_settings(self) -> pb.Settings:
        ua = pb.UA(
            language=pb.Language.PYTHON,
            version=self.version,
            platform=platform.platform(),
            hostname=socket.gethostname(),
        )
        settings = pb.Settings(
            client_type=self.client_type,
            access_point=self.transport.endpoints(),
            request_timeout=timedelta(seconds=self.transport.request_timeout),
            user_agent=ua,
        )
        if isinstance(self.pub_sub, pb.Publishing):
            settings.publishing = self.pub_sub
        else:
            settings.subscription = self.pub_sub
        return settings

    async def _telemetry_loop(self) -> None:
        attempt = 0
        while not self._leaving:  # a stream opened then would carry settings
            scope = self._stream_scope = anyio.CancelScope()
            try:
                with scope:
                    async with self.transport.bidi_stream(
                        "Telemetry", pb.TelemetryCommand, pb.TelemetryCommand
                    ) as stream:
                        self._stream = stream
                        await self._send_settings(stream)
                        async for cmd in stream:
                            attempt = 0
                            await self._on_command(stream, cmd)
                        if self.settings is None:
                            self._start_error = ProxyUnavailableError(
                                f"the Proxy {self.transport.endpoint} closed the telemetry stream"
                            )
                            self._settings_seen.set()
            except RocketMQError as exc:
                if self._leaving:
                    return  # closing: no new stream, and nothing to report
                if self.settings is None:
                    self._start_error = exc
                    self._settings_seen.set()
                self.last_error = exc
                # Once per outage at WARNING: while calls wait, the retries come fast.
                log = self.log.warning if self._ready.is_set() or attempt == 0 else self.log.debug
                log("telemetry_stream_broken", error=str(exc), attempt=attempt)
            finally:
                ended, self._stream = self._stream, None
                self._stream_scope = None
                self._forget(ended)
                if self._ready.is_set():
                    self._ready = anyio.Event()
                    self._down_since = time.monotonic()
                    self._changed()
            if scope.cancel_called:
                continue  # ``reconnect``: the new connection at once
            attempt += 1
            delay = min(_STREAM_BACKOFF_MAX, _STREAM_BACKOFF * 2 ** min(attempt, 6))
            if self._waiting:
                delay = min(delay, _RETRY_WHILE_AWAITED)
            with anyio.move_on_after(delay):
                await self._wake.wait()
            self._wake = anyio.Event()

    @property
    def ready(self) -> bool:
        """The Proxy has this client's settings on the current connection."""
        return self._ready.is_set()

    def admit(self) -> Callable[[], None]:
        """Let a settings-dependent request (a receive) go: the caller saw ``ready``
        and has not awaited since. Returns ``written``, to be called once its request
        is written to the connection, or given up (again: harmless).

        Until then a release's termination waits for it (``_admitted_written``): it
        would otherwise reach the Proxy after the termination dropped this client's
        settings, and be refused (5.5.0: INTERNAL_SERVER_ERROR, ``"settings" is
        null``). Between the check and the write lie the connection's opening and its
        stream slots."""
        self._release.admit()
        done = False

        def written() -> None:
            nonlocal done
            if not done:
                done = True
                self._release.written()
                self._all_written.set()

        return written

    async def wait_ready(self) -> None:
        """Until the Proxy has this client's settings on the current connection.

        After the connection was lost (a Proxy restart) the Proxy knows the client only
        once the new telemetry stream has carried its settings: a receive sent before
        that fails (5.5.0: INTERNAL_SERVER_ERROR, ``"settings" is null``). A caller
        waiting here also makes the telemetry loop retry now, and then every
        ``_RETRY_WHILE_AWAITED`` s, instead of after its growing backoff: consumers
        receive again within about that much of the Proxy's return.
        """
        while not self._ready.is_set():  # (replaced by a release's hold: again)
            await self._ready_changed()

    async def _ready_changed(self) -> None:
        """Until the current ``ready`` event is set; the telemetry loop retries now."""
        self._waiting += 1
        try:
            self._wake.set()
            await self._ready.wait()
        finally:
            self._waiting -= 1

    async def wait_new(self, since: int) -> None:
        """Until the Proxy has this client's settings on a connection after the
        ``since``-th (``connections``): a reconnect. While no connection is up, waits as
        ``wait_ready`` does (the telemetry loop then retries promptly)."""
        while self.connections == since:
            if self._ready.is_set():
                await self._change.wait()  # until it is lost (or a new one is up)
            else:
                await self.wait_ready()

    def _changed(self) -> None:
        self._change.set()
        self._change = anyio.Event()

    async def resync_settings(self) -> None:
        """Send the (changed) local settings, wait for the Proxy's answer, heartbeat.

        Without a stream the reconnecting loop sends them; the heartbeat still goes.
        Refused (ClientClosedError) once the close began.
        """
        stream = self._stream
        if stream is not None:
            self._settings_seen = seen = anyio.Event()
            with self.transport.boundary("Telemetry", None):
                await self._send_settings(stream)
            with anyio.move_on_after(self.transport.request_timeout):
                await seen.wait()
        await self.heartbeat()

    async def _send_settings(
        self, stream: Stream[pb.TelemetryCommand, pb.TelemetryCommand]
    ) -> None:
        """The local settings on ``stream``, counted unanswered until the Proxy's
        settings come back on it (or it ends): the close waits for them."""
        if self._leaving:
            raise ClientClosedError("client is closing: no more settings")
        self._unanswered.append(stream)  # before the write: it may go out if cancelled
        try:
            await stream.send_message(pb.TelemetryCommand(settings=self.local_settings()))
        finally:
            if stream is not self._stream:  # it ended meanwhile: no answer will come
                self._forget(stream)

    def _forget(self, stream: Stream[pb.TelemetryCommand, pb.TelemetryCommand] | None) -> None:
        """``stream`` ended: no answer to wait for on it."""
        if stream in self._unanswered:
            self._unanswered = [s for s in self._unanswered if s is not stream]
            self._quiet.set()

    async def _on_command(
        self, stream: Stream[pb.TelemetryCommand, pb.TelemetryCommand], cmd: pb.TelemetryCommand
    ) -> None:
        # A refusal (an ACL failure, say) comes as a command with only a status. A status
        # left unset (CODE_UNSPECIFIED) on a server command is no refusal.
        if cmd.status is not None and cmd.status.code != pb.Code.CODE_UNSPECIFIED:
            check_status(cmd.status, "Telemetry")
        kind, value = pb.oneof(cmd, "command")
        if kind == "settings":
            if stream in self._unanswered:  # applied: the Proxy answers after it
                self._unanswered.remove(stream)
                self._quiet.set()
            self.settings = value
            self._settings_seen.set()
            # While held, the termination still to go would drop these settings: the
            # release lets receives go after it (``_notify_and_register``).
            if not self._ready.is_set() and not self._release.holds_receives:
                if self._down_since is not None:
                    down = round(time.monotonic() - self._down_since, 3)
                    self.log.info("telemetry_stream_restored", down_s=down)
                    self._down_since = None
                self._ready.set()
                self.connections += 1
                self._changed()
                if self._release.awaiting:
                    # In the same step: the receives woken with the release (a Proxy
                    # back) find the session held, not one whose termination is near.
                    self._hold()
                if self.connections > 1 and self.on_reconnected is not None:
                    self.on_reconnected()
        elif kind == "recover_orphaned_transaction_command":
            if self.on_orphan is not None and self._tg is not None:
                self._tg.start_soon(self.on_orphan, value)
        elif kind == "notify_unsubscribe_lite_command":
            self.log.info("lite_unsubscribed_by_proxy", lite_topic=value.lite_topic)
            if self.on_lite_dropped is not None and value.lite_topic:
                self.on_lite_dropped(value.lite_topic)
        elif kind == "reconnect_endpoints_command":
            self.log.info("proxy_asked_reconnect", nonce=value.nonce)
            self.reconnect()
        elif kind == "print_thread_stack_trace_command":
            # mqadmin consumerStatus -s and the Dashboard, through the Proxy: what each
            # task of this process awaits (aiorocket._stacks), as Java answers its threads.
            stacks = process_stacks()
            self.log.info("stacks_printed", nonce=value.nonce, chars=len(stacks))
            reply = pb.ThreadStackTrace(nonce=value.nonce, thread_stack_trace=stacks)
            async with self._reply_lock:
                await stream.send_message(
                    pb.TelemetryCommand(status=pb.Status(code=pb.Code.OK), thread_stack_trace=reply)
                )
        elif kind == "verify_message_command":
            if self.on_verify is None or self._tg is None:
                await self._verified(stream, value.nonce, pb.Code.NOT_IMPLEMENTED, "not supported")
            else:  # the handler may take long: the telemetry stream is read meanwhile
                self._tg.start_soon(self._verify, stream, value)

    async def _verify(
        self, stream: Stream[pb.TelemetryCommand, pb.TelemetryCommand],
        cmd: pb.VerifyMessageCommand,
    ) -> None:  # fmt: skip
        assert self.on_verify is not None
        msg_id = cmd.message.system_properties.message_id
        try:
            code = await self.on_verify(cmd.message)
        except Exception as exc:  # an operator's command must not fail the session's tasks
            self.log.warning("verify_failed", msg_id=msg_id, error=repr(exc))
            code = pb.Code.INTERNAL_ERROR
        self.log.info("message_verified", msg_id=msg_id, code=code.name)
        try:
            await self._verified(stream, cmd.nonce, code, "")
        except Exception as exc:  # the stream broke meanwhile: the Proxy's call times out
            self.log.warning("verify_answer_failed", error=repr(exc))

    async def _verified(
        self, stream: Stream[pb.TelemetryCommand, pb.TelemetryCommand], nonce: str,
        code: pb.Code, message: str,
    ) -> None:  # fmt: skip
        answer = pb.TelemetryCommand(
            status=pb.Status(code=code, message=message),
            verify_message_result=pb.VerifyMessageResult(nonce=nonce),
        )
        async with self._reply_lock:
            await stream.send_message(answer)

    # -- unary helpers -------------------------------------------------------------

    def resource(self, name: str) -> pb.Resource:
        namespace = self.transport.namespace
        return pb.Resource(resource_namespace=namespace, name=wrap(namespace, name))

    def _group_resource(self) -> pb.Resource | None:
        return None if self.group is None else self.resource(self.group)

    async def heartbeat(self) -> None:
        """One heartbeat; refused (ClientClosedError) once the close began."""
        if self._leaving:
            raise ClientClosedError("client is closing: no more heartbeats")
        req = pb.HeartbeatRequest(group=self._group_resource(), client_type=self.client_type)
        await anyio.lowlevel.checkpoint_if_cancelled()  # the shield below hides it
        self._heartbeats += 1
        try:
            # Shielded: sent, it may be applied whoever stops waiting for it, so the close
            # waits for its answer. The call's own deadline (request_timeout, connecting
            # included) bounds it.
            with anyio.CancelScope(shield=True):
                resp = await self.transport.unary("Heartbeat", req, pb.HeartbeatResponse)
        except RequestTimeoutError:
            self._heartbeat_lost = self._heartbeat_lost or self._leaving
            raise
        finally:
            self._heartbeats -= 1
            self._quiet.set()
        check_status(resp.status, "Heartbeat")

    async def _heartbeat_loop(self) -> None:
        timeouts = 0  # in a row
        while True:
            await anyio.sleep(self.heartbeat_interval)
            if self._leaving:
                return
            if self._release.quiets_heartbeats:
                # The release sends its own heartbeat after the settings; one of ours
                # could reach the Proxy between its termination and those settings:
                # refused (UNRECOGNIZED_CLIENT_TYPE).
                continue
            try:
                await self.heartbeat()
                timeouts = 0
            except RequestTimeoutError as exc:
                timeouts += 1
                self.log.warning("heartbeat_failed", error=str(exc), timeouts=timeouts)
                if timeouts >= HEARTBEAT_FAILURES and self._abandon_connection():
                    timeouts = 0
            except RocketMQError as exc:
                timeouts = 0  # an answer, or a connection already lost
                self.log.warning("heartbeat_failed", error=str(exc))

    def _abandon_connection(self) -> bool:
        """Drop a connection whose heartbeats time out (the next calls open a new one,
        the telemetry stream goes there at once), unless it was done less than
        ``RECOVERY_COOLDOWN`` ago."""
        now = time.monotonic()
        if self._recovered_at is not None and now - self._recovered_at < RECOVERY_COOLDOWN:
            return False
        self._recovered_at = now
        abandoned = self.transport.abandon()
        self.log.warning("connection_abandoned", reason="heartbeats timed out",
                         failures=HEARTBEAT_FAILURES, abandoned=abandoned)  # fmt: skip
        self._wake.set()
        return True

    def reconnect(self) -> None:
        """Move to a new connection (the Proxy's ReconnectEndpointsCommand): calls under
        way finish on the current one, the calls to come and the telemetry stream (at
        once; receives wait for the settings on it) go to a new one."""
        self.transport.retire()
        if self._stream_scope is not None:
            self._stream_scope.cancel()

    async def notify_termination(self) -> None:
        req = pb.NotifyClientTerminationRequest(group=self._group_resource())
        resp = await self.transport.unary(
            "NotifyClientTermination", req, pb.NotifyClientTerminationResponse
        )
        check_status(resp.status, "NotifyClientTermination")

    def start_soon(self, fn: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Run ``fn`` in the background, owned by this session (its close ends it);
        nothing when the session is not running. ``fn`` handles its own errors."""
        if self._tg is not None and not self._closed:
            self._tg.start_soon(fn)

    def release_held_soon(self) -> None:
        """``release_held`` in the background: the caller has messages to hand on
        meanwhile."""
        self.start_soon(self.release_held)

    async def release_held(self) -> None:
        """End the Proxy's auto-renewal of every message it gave this client in the group,
        then register again so that receiving goes on.

        A 5.5.0 Proxy renews auto-renewed receipt handles under (client channel, group)
        until that client unregisters or its heartbeats expire (proxy
        ``DefaultReceiptHandleManager``: ``clearGroup`` on ``CLIENT_UNREGISTER``, each
        handle made visible after ``invisibleTimeMillisWhenClear``, 1 s by default). The
        messages it wrote to a receive stream that broke before they arrived are known
        to nobody else: without this they stay invisible for ``renewMaxTimeMillis``
        (3 h). NotifyClientTermination is the only per-client release the Proxy offers;
        it also frees what this client is still handling, which may then come back
        (duplicates of the in-flight window; their later acks are refused or ignored),
        and those whose ack is still owed, which go first (``_owed_first``). It also
        drops this client's settings, so they go again at once on the telemetry stream,
        then a heartbeat registers the consumer again. Receives wait from before the
        acks until those settings are answered (``_hold``), and the termination waits
        for the requests of those let go before (``admit``): a receive that reaches the
        Proxy between the termination and the settings is refused. Concurrent calls for
        one break coalesce: a release begun after a caller's call started covers it.
        """
        begun = self._releases
        async with self._release_lock:
            if self._releases != begun:
                return
            self._releases += 1
            for attempt in range(_RELEASE_ATTEMPTS):
                # The notice removes the settings this client sent on the current
                # connection: they must be there first, to be sent again after it.
                await self._until_held()
                try:
                    await self._notify_and_register()
                    self.log.info("held_messages_released", attempt=attempt)
                    return
                except RocketMQError as err:
                    if not err.retriable or attempt == _RELEASE_ATTEMPTS - 1:
                        self.log.warning("held_messages_release_failed", error=str(err))
                        return
                    self.log.debug("held_messages_release_retry", error=str(err))
                await anyio.sleep(min(5.0, 0.5 * 2**attempt))

    async def _owed_first(self) -> None:
        """The acks the consumer owes, sent before the termination (``before_release``).

        The termination frees every handle the Proxy gave this client, those of
        messages whose handler succeeded and whose ack is still owed too (queued, or
        waiting for its retry after a refusal or a lost connection): handed out again,
        such a message is handled twice, outside the in-flight window (the simulator's
        grpc_receive seed 42000: m-2's ack refused, then its connection silent, the
        release at the reconnect freed it before the ack's retry was due). Bounded as a
        close is: an ack still not taken by then waits for its retry, and its message
        is released with the rest.
        """
        send = self.before_release
        if send is None:
            return
        with anyio.move_on_after(close_bound(self.transport.request_timeout)):
            await send()

    async def _until_held(self) -> None:
        """Until the Proxy has this client's settings, with the hold (``_hold``) taken
        in the same step as they came: no receive woken by them goes first."""
        self._release.begin()
        try:
            while self._release.awaiting and not self._ready.is_set():
                await self._ready_changed()
        except BaseException:
            self._unhold()  # (when taken for this release, which does not come)
            raise
        self._hold()  # (taken already when the settings came while it waited)

    def _hold(self) -> None:
        """From now until the release's end no receive goes (``ready`` is False): one
        would race the termination. No heartbeat of the loop either."""
        if self._release.holds_receives:
            return
        if self._ready.is_set():
            self._ready = anyio.Event()
            self._release.hold(self._ready)
        else:  # the settings are not there: their stream's event stays
            self._release.hold(None)

    def _unhold(self) -> None:
        """The release's end: receives go on, unless the settings are not there: a
        stream that broke meanwhile is the telemetry loop's to mark, and settings sent
        on the current one and not answered yet (sent again after the termination, or a
        new stream's after a Proxy restart) are ``_on_command``'s, which lets receives
        go when their answer comes. Let go before it, a receive reaches a Proxy that
        dropped the settings (the termination) or never had them: refused."""
        unready = self._release.end()
        stream = self._stream
        if (
            unready is not None
            and self._ready is unready
            and stream is not None
            and stream not in self._unanswered
        ):
            unready.set()

    async def _admitted_written(self) -> None:
        """Until the receives let go before the hold have their requests written
        (``admit``); bounded by a request timeout (a connection that never opens)."""
        with anyio.move_on_after(self.transport.request_timeout):
            while self._release.unwritten:
                self._all_written = anyio.Event()
                await self._all_written.wait()

    async def _notify_and_register(self) -> None:
        """The owed acks, NotifyClientTermination, then the settings and a heartbeat
        again. Receives wait throughout (``_hold``), decided before the first await:
        one that goes between the termination and the new settings is refused, and a
        receive woken with this release (a Proxy back) had the acks' flush to go in.
        The acks do not wait for ``ready`` (the Proxy takes an ack without settings)."""
        self._hold()  # (``_until_held`` took it: the owed acks' await is no gap)
        try:
            await self._owed_first()
            await self._admitted_written()
            try:
                await self.notify_termination()
            finally:
                # Settings answered from here came after the termination: they count.
                self._release.terminated()
            try:
                await self.resync_settings()
            except ClientClosedError:
                pass  # the close began: not registered again, by design
            except RocketMQError as err:
                # Not retried here: the telemetry loop sends the settings on its next
                # stream, the heartbeat loop registers again.
                self.log.warning("reregistration_failed", error=str(err))
        finally:
            # Receives go on now, or when the settings sent again are answered.
            self._unhold()

    async def query_route(self, topic: str, *, fresh: bool = False) -> list[pb.MessageQueue]:
        """The topic's queues (cached for 30 s, as the Java client refreshes them)."""
        if self._closed:
            raise ClientClosedError("client is closed")
        now = time.monotonic()
        hit = self._routes.get(topic)
        if hit is not None and not fresh and now - hit[0] < _ROUTE_TTL:
            return hit[1]
        req = pb.QueryRouteRequest(topic=self.resource(topic), endpoints=self.transport.endpoints())
        resp = await self.transport.unary("QueryRoute", req, pb.QueryRouteResponse)
        check_status(resp.status, "QueryRoute")
        self._routes[topic] = (now, resp.message_queues)
        return resp.message_queues

    def retry_policy(self) -> pb.RetryPolicy | None:
        return None if self.settings is None else self.settings.backoff_policy

    def subscription(self) -> pb.Subscription | None:
        if self.settings is None:
            return None
        kind, value = pb.oneof(self.settings, "pub_sub")
        return value if kind == "subscription" else None
