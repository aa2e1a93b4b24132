"""Client settings from prefixed environment variables, so that a container needs no
code change between environments.

Every field of [`ConsumerConfig`][aiorocket.consumer.ConsumerConfig] (for consumers) and
[`ProducerConfig`][aiorocket.producer.ProducerConfig] (for producers) may be set as
``<PREFIX><FIELD NAME IN CAPITALS>``, e.g. with the default prefixes:

```sh
AIOROCKET_CONSUMER_CONSUME_CONCURRENCY=50
AIOROCKET_CONSUMER_CONSUME_FROM_WHERE=CONSUME_FROM_FIRST_OFFSET   # or FIRST_OFFSET
AIOROCKET_CONSUMER_SHUTDOWN_TIMEOUT=20
AIOROCKET_PRODUCER_AUTO_BATCH=true
```

and, for both, the ACL identity and TLS (``AIOROCKET_ACCESS_KEY``,
``AIOROCKET_SECRET_KEY``, ``AIOROCKET_SECURITY_TOKEN``, ``AIOROCKET_TLS=true``); the
NameServer comes from ``AIOROCKET_NAMESRV_ADDR`` as everywhere. Values are converted
to the field's type (integers, numbers, booleans ``true/false/1/0/yes/no/on/off``,
enum names or values, ``none`` for optional fields) and validated like keyword
settings; a bad value raises [`ConfigError`][aiorocket.errors.ConfigError] naming the variable.
"""

from __future__ import annotations

import enum
import os
import types
import typing
from collections.abc import Mapping
from dataclasses import fields
from typing import Any, Union

from aiorocket.consumer.config import ConsumerConfig
from aiorocket.errors import ConfigError
from aiorocket.producer.config import ProducerConfig
from aiorocket.security import Credentials

__all__ = ["CONSUMER_PREFIX", "PRODUCER_PREFIX", "consumer_settings", "producer_settings"]

CONSUMER_PREFIX = "AIOROCKET_CONSUMER_"
PRODUCER_PREFIX = "AIOROCKET_PRODUCER_"
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}
#: fields set by the shared variables below, never per client kind
_SECURITY = {"credentials", "tls"}


def consumer_settings(
    prefix: str = CONSUMER_PREFIX, environ: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """[`ConsumerConfig`][aiorocket.consumer.ConsumerConfig] fields set in the environment, as
    keyword settings (``Consumer(group, **consumer_settings())``), validated."""
    return _settings(ConsumerConfig, prefix, os.environ if environ is None else environ)


def producer_settings(
    prefix: str = PRODUCER_PREFIX, environ: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """[`ProducerConfig`][aiorocket.producer.ProducerConfig] fields set in the environment, as
    keyword settings (``Producer(group, **producer_settings())``), validated."""
    return _settings(ProducerConfig, prefix, os.environ if environ is None else environ)


def _settings(config_type: Any, prefix: str, environ: Mapping[str, str]) -> dict[str, Any]:
    hints = typing.get_type_hints(config_type)
    out: dict[str, Any] = {}
    source: dict[str, str] = {}
    for f in fields(config_type):
        if f.name in _SECURITY:
            continue
        var = prefix + f.name.upper()
        raw = environ.get(var)
        if raw is None:
            continue
        out[f.name] = _convert(raw, hints[f.name], var)
        source[f.name] = var
    known = {prefix + f.name.upper() for f in fields(config_type)}
    unknown = sorted(k for k in environ if k.startswith(prefix) and k not in known)
    if unknown:
        raise ConfigError(f"unknown setting {unknown[0]} (no such field in {config_type.__name__})")
    security = _security(environ)
    try:
        config = config_type(**out, **security)
        config.validate()
    except ConfigError as exc:
        named = [var for name, var in source.items() if name in str(exc)]
        where = ", ".join(named) or ", ".join(source.values()) or "AIOROCKET_* security"
        raise ConfigError(f"{where}: {exc}") from None
    return {**out, **security}


def _security(environ: Mapping[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    access = environ.get("AIOROCKET_ACCESS_KEY")
    secret = environ.get("AIOROCKET_SECRET_KEY")
    if (access is None) != (secret is None):
        raise ConfigError("AIOROCKET_ACCESS_KEY and AIOROCKET_SECRET_KEY go together")
    if access is not None and secret is not None:
        token = environ.get("AIOROCKET_SECURITY_TOKEN") or None
        out["credentials"] = Credentials(access, secret, token)
    tls = environ.get("AIOROCKET_TLS")
    if tls is not None:
        out["tls"] = _bool(tls, "AIOROCKET_TLS")
    return out


def _bool(raw: str, var: str) -> bool:
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ConfigError(f"{var}: expected a boolean (true/false), got {raw!r}")


def _convert(raw: str, hint: Any, var: str) -> Any:
    args = typing.get_args(hint)
    if typing.get_origin(hint) in (Union, types.UnionType):
        if type(None) in args and raw.strip().lower() in ("", "none", "null"):
            return None
        (hint,) = [a for a in args if a is not type(None)][:1] or (str,)
    if hint is bool:
        return _bool(raw, var)
    if hint is int:
        try:
            return int(raw.strip())
        except ValueError:
            raise ConfigError(f"{var}: expected an integer, got {raw!r}") from None
    if hint is float:
        try:
            return float(raw.strip())
        except ValueError:
            raise ConfigError(f"{var}: expected a number, got {raw!r}") from None
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        value = raw.strip()
        for member in hint:
            if value.upper() in (member.name, str(member.value).upper()):
                return member
        choices = ", ".join(m.name for m in hint)
        raise ConfigError(f"{var}: expected one of {choices}, got {raw!r}")
    return raw
