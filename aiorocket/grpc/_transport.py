"""The gRPC transport to a RocketMQ 5.x Proxy, on grpclib (asyncio only).

One ``GrpcTransport`` owns one HTTP/2 connection (grpclib ``Channel``) to one Proxy
endpoint. Every call carries the metadata the Proxy requires (client id, language,
protocol, version, a fresh request id; namespace and the signed ``authorization``
header when configured) and a deadline. Errors are mapped here, once, to
[`aiorocket.errors`][] types:

* a Proxy ``Status`` other than OK → ``ProxyResponseError`` (``check_status``);
* gRPC status DEADLINE_EXCEEDED, or the deadline passing → ``RequestTimeoutError``;
* refused / unreachable / broken connection, gRPC UNAVAILABLE → ``ProxyUnavailableError``;
* any other gRPC status (UNIMPLEMENTED, ...) → ``GrpcStatusError``.

* gRPC RESOURCE_EXHAUSTED → ``ProxyResponseError`` TOO_MANY_REQUESTS, retriable: a
  Proxy or an intermediary throttling at the gRPC layer is throttling as the Proxy's own
  status says it (the callers back off and try again), not a failure for good.

grpclib reconnects by itself: a call after a lost connection opens a new one. Callers
that loop (telemetry, heartbeats, sends) add their own backoff. A connection that stops
answering while a call is open is abandoned after an unanswered HTTP/2 PING
(``aiorocket.grpc._keepalive``), so that the next call opens a new one; the session
abandons one whose calls time out while its PINGs are answered (``abandon``), and moves
to a new one when the Proxy asks (``retire``).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import itertools
import ssl
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Any, Protocol, TypeVar

import anyio
import h2.exceptions
from grpclib.client import Stream
from grpclib.const import Cardinality
from grpclib.const import Status as GrpcStatus
from grpclib.exceptions import GRPCError, ProtocolError, StreamTerminatedError
from grpclib.metadata import USER_AGENT, encode_timeout

from aiorocket._host import make_client_id
from aiorocket._version import __version__
from aiorocket.errors import (
    ConfigError,
    GrpcStatusError,
    ProxyResponseError,
    ProxyUnavailableError,
    RequestTimeoutError,
)
from aiorocket.grpc import _pb as pb
from aiorocket.grpc._channel import CoalescingChannel
from aiorocket.grpc._h2stream import WireStream
from aiorocket.grpc._h2wire import WireConnection
from aiorocket.grpc._keepalive import DEFAULT_KEEPALIVE, Keepalive, KeepaliveSettings
from aiorocket.grpc._unary import reply_of
from aiorocket.security import Credentials

__all__ = ["GrpcOptions", "GrpcTransport", "check_status", "parse_endpoint", "with_security"]

_SERVICE = "/apache.rocketmq.v2.MessagingService/"
_OK_CODES = frozenset({pb.Code.OK, pb.Code.MULTIPLE_RESULTS})
#: grpclib enforces a deadline by a bare ``task.cancel()`` that anyio's cancel scopes
#: cannot tell from a cancellation of the task itself. So the deadline is enforced here
#: by ``anyio.fail_after``; grpclib gets it this much later, only to send the
#: ``grpc-timeout`` header the Proxy needs (its timer never fires first).
_GRACE = 1.0

Req = TypeVar("Req")
Rep = TypeVar("Rep")


@dataclass(frozen=True, slots=True)
class GrpcOptions:
    """Connection options of a gRPC (Proxy) client.

    ``tls``: ``False`` plaintext h2c (default, what the Apache Proxy accepts), ``True``
    TLS verified with the system CAs, a CA bundle path, or an ``ssl.SSLContext``.
    ``namespace``: every topic and group name is sent as ``<namespace>%<name>`` (as well
    as in each resource's namespace field and the ``x-mq-namespace`` header).
    ``credentials``: [`aiorocket.security.Credentials`][] (ACL access key, secret,
    optional session token): every call carries the signed ``authorization`` header.
    ``keepalive``: when a connection that owes a call its answer has been silent for
    ``interval`` seconds, one HTTP/2 PING; no answer within ``timeout`` and the
    connection is abandoned, its calls fail and the next call opens a new one
    (``aiorocket.grpc._keepalive``; None: never).
    """

    tls: bool | str | ssl.SSLContext = False
    namespace: str = ""
    credentials: Credentials | None = None
    keepalive: KeepaliveSettings | None = DEFAULT_KEEPALIVE


def with_security(
    options: GrpcOptions | None,
    credentials: Credentials | None,
    tls: bool | ssl.SSLContext,
    namespace: str = "",
) -> GrpcOptions:
    """``options`` with the client config's ``credentials``/``tls``/``namespace`` (the
    settings both transports share); set in both places differently is a
    ``ConfigError``."""
    opts = options or GrpcOptions()
    if namespace:
        if opts.namespace and opts.namespace != namespace:
            raise ConfigError("namespace given twice (config and grpc_options) differently")
        opts = replace(opts, namespace=namespace)
    if credentials is not None:
        if opts.credentials is not None and opts.credentials != credentials:
            raise ConfigError("credentials given twice (config and grpc_options) differently")
        opts = replace(opts, credentials=credentials)
    if tls:
        if opts.tls and opts.tls is not tls:
            raise ConfigError("tls given twice (config and grpc_options) differently")
        opts = replace(opts, tls=tls)
    return opts


def parse_endpoint(endpoint: str) -> tuple[str, int]:
    """``host:port`` (also ``[v6]:port``) → (host, port)."""
    raw = endpoint.strip()
    for prefix in ("http://", "https://", "grpc://"):
        if raw.startswith(prefix):
            raw = raw[len(prefix) :]
    host, sep, port = raw.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ConfigError(f"Proxy endpoint must be 'host:port', got {endpoint!r}")
    return host.strip("[]"), int(port)


class StatusLike(Protocol):
    """A ``Status``: the betterproto message or the fast decoders' plain one."""

    @property
    def code(self) -> int: ...
    @property
    def message(self) -> str: ...


#: Proxy answers worth another attempt (``ProxyResponseError.retriable``): throttling
#: and server-side trouble.
RETRIABLE_PROXY_CODES = frozenset(
    {
        pb.Code.TOO_MANY_REQUESTS,
        pb.Code.INTERNAL_ERROR,
        pb.Code.INTERNAL_SERVER_ERROR,
        pb.Code.HA_NOT_AVAILABLE,
        pb.Code.PROXY_TIMEOUT,
        pb.Code.MASTER_PERSISTENCE_TIMEOUT,
        pb.Code.SLAVE_PERSISTENCE_TIMEOUT,
        pb.Code.REQUEST_TIMEOUT,
    }
)


def check_status(status: StatusLike | None, rpc: str) -> None:
    """Raise ``ProxyResponseError`` unless the Proxy's ``status`` is OK."""
    if status is None:
        return
    code = status.code
    if code in _OK_CODES:
        return
    num = int(code)
    try:
        name = pb.Code(num).name
    except ValueError:
        name = "CODE"
    raise ProxyResponseError(
        num, status.message, name=name, rpc=rpc, retriable=num in RETRIABLE_PROXY_CODES
    )


def _tls_context(tls: bool | str | ssl.SSLContext | None) -> ssl.SSLContext | None:
    if tls is None or tls is False:
        return None
    if isinstance(tls, ssl.SSLContext):
        ctx = tls
    elif tls is True:
        ctx = ssl.create_default_context(purpose=ssl.Purpose.SERVER_AUTH)
    else:  # a CA bundle file
        ctx = ssl.create_default_context(purpose=ssl.Purpose.SERVER_AUTH, cafile=tls)
    ctx.set_alpn_protocols(["h2"])
    return ctx


class GrpcTransport:
    """One connection to a Proxy endpoint, with the RocketMQ call conventions.

    Parameters
    ----------
    endpoint:
        ``host:port`` of the Proxy's gRPC listener.
    client_id:
        sent as ``x-mq-client-id`` on every call.
    tls:
        ``False``/``None`` plaintext (h2c, which the Apache Proxy accepts); ``True`` TLS
        verified against the system CAs; a path to a CA bundle; or an ``SSLContext``.
    namespace:
        sent as ``x-mq-namespace`` when set.
    credentials:
        ACL credentials: each call then carries ``x-mq-date-time`` and the
        ``MQv2-HMAC-SHA1`` ``authorization`` header signed over it.
    request_timeout:
        the default deadline of a call (seconds).
    """

    def __init__(
        self,
        endpoint: str,
        *,
        client_id: str,
        tls: bool | str | ssl.SSLContext | None = False,
        namespace: str = "",
        credentials: Credentials | None = None,
        request_timeout: float = 3.0,
        version: str = "",
        keepalive: KeepaliveSettings | None = DEFAULT_KEEPALIVE,
    ) -> None:
        self.endpoint = endpoint
        self.host, self.port = parse_endpoint(endpoint)
        self.client_id = client_id
        self.namespace = namespace
        self.credentials = credentials
        self.request_timeout = request_timeout
        self._version = version or __version__
        self._ssl = _tls_context(tls)
        self._keepalive = keepalive
        self._channel: CoalescingChannel | None = None
        #: the unary calls' own connection (``aiorocket.grpc._h2wire``), and the lock
        #: under which one is opened
        self._wire: WireConnection | None = None
        self._wire_lock: asyncio.Lock | None = None
        #: unary connections left for a new one (GOAWAY, ``retire``) while calls finish
        self._old_wires: list[WireConnection] = []
        #: a keepalive's abandonment is being passed on (``_keepalive_abandoned``)
        self._abandoning = False
        #: ``close`` calls: a connection opened across one is closed, not kept
        self._closes = 0
        #: calls under way (any kind): while one is open, a silent connection is suspect
        self._calls = 0
        #: loop time each open unary call started (a prompt answer is owed): the
        #: keepalive's second PING of a silence waits for one of these
        self._prompt: dict[int, float] = {}
        self._prompt_ids = itertools.count()
        #: connections left for a new one (``retire``), closed once their calls ended
        self._retired: list[CoalescingChannel] = []
        #: the headers every call carries unchanged, and the request ids' random prefix
        self._constant_md = (
            ("x-mq-language", "PYTHON"),
            ("x-mq-protocol", "v2"),
            ("x-mq-client-version", self._version),
            ("x-mq-client-id", client_id),
        )
        #: a unary call's constant request headers, per RPC (``_unary_headers``)
        self._unary_head: dict[str, list[tuple[bytes, bytes]]] = {}
        self._id_prefix = str(uuid.uuid4())[:24]
        self._id_count = itertools.count()

    @classmethod
    def create(
        cls,
        endpoint: str,
        options: GrpcOptions | None,
        *,
        client_id: str | None,
        request_timeout: float,
    ) -> GrpcTransport:
        """A transport with ``options`` (TLS, namespace, credentials) and a default id."""
        opts = options or GrpcOptions()
        return cls(
            endpoint,
            client_id=client_id or make_client_id(),
            request_timeout=request_timeout,
            tls=opts.tls,
            namespace=opts.namespace,
            credentials=opts.credentials,
            keepalive=opts.keepalive,
        )

    @property
    def channel(self) -> CoalescingChannel:
        if self._channel is None:
            self._channel = CoalescingChannel(
                self.host, self.port, ssl=self._ssl, keepalive=self._keepalive,
                busy=lambda: self._calls > 0, waiting_since=self._waiting_since,
                abandoned=self._keepalive_abandoned,
            )  # fmt: skip
        return self._channel

    def _waiting_since(self) -> float | None:
        return min(self._prompt.values()) if self._prompt else None

    async def _unary_connection(self) -> WireConnection:
        """The unary calls' connection: the current one, or a new one if there is none
        or it takes no more calls (lost, GOAWAY, retired)."""
        if self._wire_lock is None:
            self._wire_lock = asyncio.Lock()
        async with self._wire_lock:
            wire = self._wire
            if wire is not None and wire.usable():
                return wire
            if wire is not None and len(wire):
                self._old_wires.append(wire)  # its calls finish there
            self._wire = None
            self._old_wires = [w for w in self._old_wires if w.usable() or len(w)]
            loop = asyncio.get_running_loop()
            closes = self._closes
            _, wire = await loop.create_connection(
                lambda: WireConnection(keepalive=self._keepalive, busy=lambda: self._calls > 0,
                                       waiting_since=self._waiting_since,
                                       abandoned=self._keepalive_abandoned),
                self.host, self.port, ssl=self._ssl,
            )  # fmt: skip
            if self._ssl is not None:
                ssl_object = wire.raw.get_extra_info("ssl_object") if wire.raw else None
                alpn = ssl_object.selected_alpn_protocol() if ssl_object else None
                if alpn != "h2":
                    wire.close()
                    raise ProtocolError(f"the server did not agree to HTTP/2 (ALPN: {alpn})")
            if closes != self._closes:  # the transport closed meanwhile
                wire.close()
                raise StreamTerminatedError("Channel closed")
            self._wire = wire
            return wire

    def _keepalive_abandoned(self) -> None:
        """One of the two connections (streams', unary calls') went unanswered and was
        dropped: the other takes the same path (``Keepalive.sibling_abandoned``). Each
        is looked at once (the sibling dropped in turn calls here again)."""
        if self._abandoning:
            return
        self._abandoning = True
        try:
            for keepalive in self._keepalives():
                if not keepalive.abandoned:
                    keepalive.sibling_abandoned()
        finally:
            self._abandoning = False

    def _keepalives(self) -> list[Keepalive]:
        protocol = None if self._channel is None else self._channel.protocol
        found = [] if protocol is None or protocol.keepalive is None else [protocol.keepalive]
        if self._wire is not None and self._wire.keepalive is not None:
            found.append(self._wire.keepalive)
        return found

    def _probe(self) -> None:
        """A call timed out: is the connection still there? (A PING will tell.)"""
        for keepalive in self._keepalives():
            keepalive.probe()

    def close(self) -> None:
        self._closes += 1
        for channel in self._retired:
            channel.close()
        self._retired.clear()
        if self._channel is not None:
            self._channel.close()
            self._channel = None
        for wire in self._old_wires:
            wire.close()
        self._old_wires.clear()
        if self._wire is not None:
            self._wire.close()
            self._wire = None

    def abandon(self) -> bool:
        """Drop the current connections now (their calls fail at once; the next call
        opens new ones): they take calls but answer none. False if there were none."""
        dropped = self._channel is not None and self._channel.abort()
        wire = self._wire
        return (wire is not None and wire.abort()) or dropped

    def retire(self) -> None:
        """Open new connections for the calls to come; the calls under way finish on
        the current ones, which are closed once they have (the Proxy's reconnect
        command: it rebalances its connections, nothing is wrong with these)."""
        if self._channel is not None:
            self._retired.append(self._channel)
            self._channel = None
            self._close_retired()
        wire, self._wire = self._wire, None
        if wire is not None:
            wire.retire()
            if len(wire):
                self._old_wires.append(wire)

    def _close_retired(self) -> None:
        for channel in [c for c in self._retired if c.idle()]:
            self._retired.remove(channel)
            channel.close()

    def endpoints(self) -> pb.Endpoints:
        """This endpoint as the ``Endpoints`` message QueryRoute/QueryAssignment carry."""
        scheme = pb.AddressScheme.DOMAIN_NAME
        try:
            import ipaddress

            ip = ipaddress.ip_address(self.host)
            scheme = pb.AddressScheme.IPv4 if ip.version == 4 else pb.AddressScheme.IPv6
        except ValueError:
            pass
        return pb.Endpoints(scheme=scheme, addresses=[pb.Address(host=self.host, port=self.port)])

    def request_id(self) -> str:
        """A new ``x-mq-request-id``: UUID-shaped, this transport's random prefix and a
        count (unique without a ``uuid4()`` per call, which reads the OS's random source
        with a system call)."""
        return f"{self._id_prefix}{next(self._id_count) & 0xFFFFFFFFFFFF:012x}"

    def metadata(self) -> list[tuple[str, str]]:
        return [*self._constant_md, ("x-mq-request-id", self.request_id()), *self._scoped_md()]

    def _scoped_md(self) -> list[tuple[str, str]]:
        """The namespace and the signature headers (none without them)."""
        md: list[tuple[str, str]] = []
        if self.namespace:
            md.append(("x-mq-namespace", self.namespace))
        cred = self.credentials
        if cred is not None:
            stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
            sign = hmac.new(cred.secret_key.encode(), stamp.encode(), hashlib.sha1).hexdigest()
            md.append(("x-mq-date-time", stamp))
            md.append(
                (
                    "authorization",
                    f"MQv2-HMAC-SHA1 Credential={cred.access_key}, "
                    f"SignedHeaders=x-mq-date-time, Signature={sign}",
                )
            )
            if cred.security_token:
                md.append(("x-mq-session-token", cred.security_token))
        return md

    # -- calls ---------------------------------------------------------------------

    def _call(
        self,
        rpc: str,
        cardinality: Cardinality,
        request_type: type[Req],
        reply_type: type[Rep],
        timeout: float | None,
    ) -> Stream[Req, Rep]:
        return self.channel.request(
            _SERVICE + rpc, cardinality, request_type, reply_type,
            timeout=None if timeout is None else timeout + _GRACE, metadata=self.metadata(),
        )  # fmt: skip

    async def unary(
        self,
        rpc: str,
        request: Any,
        reply_type: type[Rep],
        *,
        timeout: float | None = None,
    ) -> Rep:
        """One request, one reply; the whole call (connecting included) within ``timeout``.

        On the unary calls' own connection (``aiorocket.grpc._h2wire``), not grpclib's
        ``Stream``: a single-message send is one of these calls."""
        limit = self.request_timeout if timeout is None else timeout
        # What _open_call(prompt=True), boundary() and anyio.fail_after do, inline: a
        # send is one of these calls, and their generator context managers (fail_after's
        # two nested ones with a backend lookup) were a measurable share of it.
        self._calls += 1
        key = next(self._prompt_ids)
        loop = asyncio.get_running_loop()
        started = self._prompt[key] = loop.time()
        baseline = _cancelling()
        try:
            # anyio's clock on asyncio is the loop's
            with anyio.CancelScope(deadline=started + limit) as scope:
                wire = self._wire
                if wire is None or not wire.usable():
                    wire = await self._unary_connection()
                # the Proxy's deadline: what is left of ours, and the grace (see _GRACE)
                left = started + limit - loop.time() + _GRACE
                call = await wire.call(
                    self._unary_headers(rpc, left), request.SerializeToString()
                )
            if scope.cancelled_caught:  # only its deadline cancels it
                raise TimeoutError
            reply = reply_of(call, reply_type)
        except _MAPPED as exc:
            raise self._mapped(exc, rpc, limit, baseline) from exc
        finally:
            self._calls -= 1
            del self._prompt[key]
            if self._retired:
                self._close_retired()
        if reply is None:
            raise ProxyUnavailableError(f"{rpc}: the Proxy closed the call without reply")
        return reply

    def _unary_headers(self, rpc: str, timeout: float) -> list[tuple[bytes, bytes]]:
        """A unary call's request headers, as grpclib's ``client.Stream`` sends them
        (in bytes: what h2 and the header encoder take)."""
        head = self._unary_head.get(rpc)
        if head is None:
            channel = self.channel
            head = self._unary_head[rpc] = [
                (b":method", b"POST"), (b":scheme", channel._scheme.encode()),
                (b":path", (_SERVICE + rpc).encode()),
                (b":authority", channel._authority.encode()), (b"te", b"trailers"),
                (b"content-type", b"application/grpc"), (b"user-agent", USER_AGENT.encode()),
                *((k.encode(), v.encode()) for k, v in self._constant_md),
            ]  # fmt: skip
        headers = [
            *head, (b"grpc-timeout", encode_timeout(timeout).encode()),
            (b"x-mq-request-id", self.request_id().encode()),
        ]  # fmt: skip
        if self.namespace or self.credentials is not None:
            headers.extend((k.encode(), v.encode()) for k, v in self._scoped_md())
        return headers

    @contextmanager
    def _open_call(self, *, prompt: bool = False) -> Iterator[None]:
        """A call is open: the connection's keepalive watches while any is. ``prompt``:
        its answer is due at once (not a long poll, not a session stream)."""
        self._calls += 1
        key = next(self._prompt_ids)
        if prompt:
            self._prompt[key] = asyncio.get_running_loop().time()
        try:
            yield
        finally:
            self._calls -= 1
            self._prompt.pop(key, None)
            if self._retired:
                self._close_retired()

    @asynccontextmanager
    async def server_stream(
        self, rpc: str, request: Any, reply_type: type[Rep], *, timeout: float
    ) -> AsyncIterator[WireStream[Rep]]:
        """A server-streaming call: yields the open stream after sending ``request``.

        On the unary calls' own connection (``aiorocket.grpc._h2wire``, read by
        ``_h2stream``), not grpclib's ``Stream``: every receive is one of these calls.
        The block must read the stream to its end; the call then checks that it ended
        with the server's trailers: a connection that drops midway is an error here,
        not a short but seemingly complete answer.
        """
        # What _open_call(), boundary() and anyio.fail_after do, inline (as ``unary``):
        # their three generator context managers and fail_after's backend lookup were
        # ~40 Python calls of each (benchmarks/README.md, issue 43, goal 5b, round 7).
        self._calls += 1
        baseline = _cancelling()
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            # anyio's clock on asyncio is the loop's
            with anyio.CancelScope(deadline=started + timeout) as scope:
                wire = self._wire
                if wire is None or not wire.usable():
                    wire = await self._unary_connection()
                # the Proxy's deadline: what is left of ours, and the grace (see _GRACE)
                left = started + timeout - loop.time() + _GRACE
                call = await wire.open(self._unary_headers(rpc, left), request.SerializeToString())
                try:
                    stream = WireStream(call, reply_type)
                    yield stream
                    await stream.finish()
                finally:
                    wire.leave(call)  # reset if left before its end
            # as fail_after: only its deadline cancels this scope
            if scope.cancelled_caught and loop.time() >= scope.deadline:
                raise TimeoutError
        except _MAPPED as exc:
            raise self._mapped(exc, rpc, timeout, baseline) from exc
        finally:
            self._calls -= 1
            if self._retired:
                self._close_retired()

    @asynccontextmanager
    async def bidi_stream(
        self, rpc: str, request_type: type[Req], reply_type: type[Rep]
    ) -> AsyncIterator[Stream[Req, Rep]]:
        """A bidirectional stream that lives as long as the block (Telemetry).

        It has no gRPC deadline on purpose: it is the client's session and lasts as long
        as the client; every read the caller waits for is bounded by the caller.
        """
        with self._open_call(), self.boundary(rpc, None):
            async with self._call(
                rpc, Cardinality.STREAM_STREAM, request_type, reply_type, None
            ) as stream:
                yield stream
                # The Proxy ended the stream (the block read to its end). End ours too:
                # then the call's status is read and raised (an ACL refusal, say),
                # instead of grpclib's "Outgoing stream was not ended".
                with contextlib.suppress(ProtocolError):  # already ended
                    await stream.end()

    @contextmanager
    def boundary(self, rpc: str, timeout: float | None) -> Iterator[None]:
        """Map grpclib, h2 and socket errors raised inside to aiorocket errors."""
        baseline = _cancelling()
        try:
            yield
        except _MAPPED as exc:
            raise self._mapped(exc, rpc, timeout, baseline) from exc

    def _mapped(
        self, exc: BaseException, rpc: str, timeout: float | None, baseline: int
    ) -> Exception:
        """The aiorocket error for one of the ``_MAPPED`` errors of a call."""
        _uncancel_to(baseline)
        where = f"{rpc} to {self.endpoint}"
        if isinstance(exc, GRPCError):
            if exc.status is GrpcStatus.RESOURCE_EXHAUSTED:
                return ProxyResponseError(
                    int(pb.Code.TOO_MANY_REQUESTS), f"gRPC RESOURCE_EXHAUSTED: {exc.message or ''}",
                    name="TOO_MANY_REQUESTS", rpc=rpc, retriable=True,
                )  # fmt: skip
            if exc.status is GrpcStatus.DEADLINE_EXCEEDED:
                self._probe()
                return RequestTimeoutError(f"{where}: no answer within {timeout}s")
            if exc.status is GrpcStatus.UNAVAILABLE:
                return ProxyUnavailableError(f"{where}: {exc.message}")
            return GrpcStatusError(exc.status.value, exc.status.name, exc.message, rpc=rpc)
        if isinstance(exc, (asyncio.TimeoutError, TimeoutError)):
            self._probe()
            return RequestTimeoutError(f"{where}: no answer within {timeout}s")
        return ProxyUnavailableError(f"{where}: {type(exc).__name__}: {exc}")


#: the grpclib, h2, socket and timeout errors a call maps to aiorocket's (``_mapped``)
_MAPPED = (
    GRPCError,
    asyncio.TimeoutError,
    TimeoutError,
    OSError,
    StreamTerminatedError,
    ProtocolError,
    h2.exceptions.ProtocolError,
    ssl.SSLError,
)


def _cancelling() -> int:
    counter = getattr(asyncio.current_task(), "cancelling", None)  # Python 3.11+
    return int(counter()) if counter is not None else 0


def _uncancel_to(baseline: int) -> None:
    """Undo the bare ``task.cancel()`` calls grpclib makes to wake a task whose
    connection was lost (it turns the CancelledError into StreamTerminatedError but
    leaves the task's cancel request count raised). Left raised, anyio's cancel scopes
    would take the task for cancelled from outside and cancel it later (Python 3.11+)."""
    task: Any = asyncio.current_task()
    if task is None or not hasattr(task, "uncancel"):
        return
    while task.cancelling() > baseline:
        task.uncancel()
