"""ACL credentials and TLS for remoting connections.

ACL. A broker with authentication on (RocketMQ 5.x ``authenticationEnabled``, ACL 2.0,
or 4.x ``aclEnable`` with ``plain_acl.yml``, ACL 1.0; a 5.x broker migrates 1.0 accounts
with ``migrateAuthFromV1Enabled``) checks a signature on every request. Both versions
check the same one, the one the Java client's ``AclClientRPCHook`` computes: the request's
header fields get ``AccessKey`` (and ``SecurityToken`` when there is one); the values of
all header fields except ``Signature``, sorted by field name and concatenated, followed by
the body, are signed with HMAC-SHA1 under the secret key; the base64 of the digest
becomes the ``Signature`` field. A request the broker refuses comes back as
``NO_PERMISSION`` (16): [`AccessDeniedError`][aiorocket.errors.AccessDeniedError].

TLS. RocketMQ servers (NameServer, broker) accept TLS on their remoting port next to
plain TCP by default (``tls.server.mode=permissive``) or only TLS (``enforcing``).
``tls=True`` verifies the server's certificate against the system's CAs and its host
name; pass an ``ssl.SSLContext`` for a private CA (``tls_context``). A failed
handshake raises [`TlsError`][aiorocket.errors.TlsError].
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import ssl
from dataclasses import dataclass, field

from aiorocket.errors import ConfigError
from aiorocket.protocol.command import RemotingCommand

__all__ = ["Credentials", "TlsSetting", "check_security", "resolve_tls", "tls_context"]

ACCESS_KEY = "AccessKey"
SECRET_KEY = "SecretKey"
SECURITY_TOKEN = "SecurityToken"
SIGNATURE = "Signature"

#: what the clients' ``tls`` setting accepts: off, on with the system's CAs, or a context.
TlsSetting = bool | ssl.SSLContext


def signature(secret_key: str, ext_fields: dict[str, str], body: bytes) -> str:
    """The base64 HMAC-SHA1 over the sorted header values (``Signature`` excluded) + body."""
    content = "".join(v for k, v in sorted(ext_fields.items()) if k != SIGNATURE).encode()
    digest = hmac.new(secret_key.encode(), content + body, hashlib.sha1).digest()
    return base64.b64encode(digest).decode("ascii")


@dataclass(frozen=True, slots=True)
class Credentials:
    """An ACL identity: signs every remoting request a client sends.

    Parameters
    ----------
    access_key:
        The user name (ACL 2.0) or access key (ACL 1.0).
    secret_key:
        The password / secret key; never sent, only used to sign. Hidden from ``repr``.
    security_token:
        An optional session token (e.g. from a cloud STS), sent and signed with each request.
    """

    access_key: str
    secret_key: str = field(repr=False)
    security_token: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        for name in ("access_key", "secret_key"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise ConfigError(f"Credentials.{name} must be a non-empty string")
        token = self.security_token
        if token is not None and (not isinstance(token, str) or not token):
            raise ConfigError("Credentials.security_token must be a non-empty string or None")

    @classmethod
    def from_env(cls, prefix: str = "ROCKETMQ_") -> Credentials | None:
        """``$ROCKETMQ_ACCESS_KEY`` / ``_SECRET_KEY`` / ``_SECURITY_TOKEN``, or None if unset."""
        access = os.environ.get(prefix + "ACCESS_KEY")
        secret = os.environ.get(prefix + "SECRET_KEY")
        if not access or not secret:
            return None
        return cls(access, secret, os.environ.get(prefix + "SECURITY_TOKEN") or None)

    def sign(self, cmd: RemotingCommand) -> None:
        """Add ``AccessKey`` (, ``SecurityToken``) and ``Signature`` to ``cmd``'s header."""
        ext = cmd.ext_fields
        ext[ACCESS_KEY] = self.access_key
        if self.security_token is not None:
            ext[SECURITY_TOKEN] = self.security_token
        ext[SIGNATURE] = signature(self.secret_key, ext, cmd.body)


def tls_context(
    cafile: str | os.PathLike[str] | None = None,
    *,
    certfile: str | os.PathLike[str] | None = None,
    keyfile: str | os.PathLike[str] | None = None,
    verify: bool = True,
) -> ssl.SSLContext:
    """A client TLS context: the server's certificate checked against ``cafile`` (else the
    system's CAs) and its host name, unless ``verify=False`` (tests only: anyone on the path
    could read and change the traffic). ``certfile``/``keyfile``: a client certificate, for
    brokers with ``tls.server.need.client.auth=require``."""
    ctx = ssl.create_default_context(cafile=os.fspath(cafile) if cafile is not None else None)
    if certfile is not None:
        ctx.load_cert_chain(os.fspath(certfile), os.fspath(keyfile) if keyfile else None)
    if not verify:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


def resolve_tls(tls: TlsSetting | None) -> ssl.SSLContext | None:
    """The context a ``tls`` setting stands for (``True``: the system's CAs), or None."""
    if tls is None or tls is False:
        return None
    if tls is True:
        return tls_context()
    if isinstance(tls, ssl.SSLContext):
        return tls
    raise ConfigError(f"tls must be a bool or an ssl.SSLContext, got {tls!r}")


def check_security(credentials: object, tls: object) -> None:
    """Validate the ``credentials``/``tls`` settings of a client config (ConfigError)."""
    if credentials is not None and not isinstance(credentials, Credentials):
        raise ConfigError(
            f"credentials must be an aiorocket.security.Credentials, got {credentials!r}"
        )
    if not isinstance(tls, bool | ssl.SSLContext):
        raise ConfigError(f"tls must be a bool or an ssl.SSLContext, got {tls!r}")
