"""The exception hierarchy's one table from broker response code to exception class and
``retriable`` (aiorocket.errors), and the clients that decide retries by it."""

from __future__ import annotations

import pytest

from aiorocket import errors
from aiorocket.errors import (
    AccessDeniedError,
    BrokerResponseError,
    ConfigError,
    ConnectionClosedError,
    ConsumerNotOnlineError,
    GroupNotFoundError,
    ProxyResponseError,
    RequestTimeoutError,
    RocketMQError,
    ServiceNotAvailableError,
    SystemBusyError,
    TlsError,
    TopicNotExistError,
    error_for_response,
)
from aiorocket.protocol.codes import ResponseCode
from aiorocket.testing._maven import BrokerSetupError


@pytest.mark.parametrize(
    ("code", "cls", "retriable"),
    [
        (ResponseCode.SYSTEM_ERROR, BrokerResponseError, True),
        (ResponseCode.SYSTEM_BUSY, SystemBusyError, True),
        (ResponseCode.SERVICE_NOT_AVAILABLE, ServiceNotAvailableError, True),
        (ResponseCode.TOPIC_NOT_EXIST, TopicNotExistError, True),
        (ResponseCode.NO_PERMISSION, AccessDeniedError, False),
        (ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, GroupNotFoundError, False),
        (ResponseCode.CONSUMER_NOT_ONLINE, ConsumerNotOnlineError, False),
        (ResponseCode.QUERY_NOT_FOUND, BrokerResponseError, False),  # not in the table
        (99_999, BrokerResponseError, False),  # unknown to us
    ],
)
def test_response_code_gives_class_and_retriable(code: int, cls: type, retriable: bool) -> None:
    exc = error_for_response(code, "why", request_code=10)
    assert type(exc) is cls
    assert exc.retriable is retriable
    assert (exc.code, exc.remark, exc.request_code) == (code, "why", 10)
    # int(): str() of an IntEnum member is its name on Python 3.10 (its number from 3.11)
    assert str(int(code)) in str(exc) and "why" in str(exc)


def test_a_response_error_made_directly_follows_the_table_too() -> None:
    assert BrokerResponseError(ResponseCode.SYSTEM_BUSY, None).retriable
    assert not BrokerResponseError(ResponseCode.NO_PERMISSION, None).retriable


@pytest.mark.parametrize(
    ("exc", "retriable"),
    [
        (ConnectionClosedError("gone"), True),
        (RequestTimeoutError("slow"), True),
        (errors.NameServerUnavailableError("none"), True),
        (errors.ProxyUnavailableError("none"), True),
        (TlsError("bad certificate"), False),  # retrying does not change the certificate
        (ConfigError("bad value"), False),
        (errors.MessageTooLargeError("big"), False),
        (errors.ClientClosedError("closed"), False),
        (errors.CommitFailedError("stale"), False),  # the same commit is refused again
        (errors.NoRouteError("no route"), False),
        (ProxyResponseError(42900, "slow down", retriable=True), True),
        (ProxyResponseError(40402, "no topic"), False),
    ],
)
def test_retriable_of_the_other_errors(exc: RocketMQError, retriable: bool) -> None:
    assert exc.retriable is retriable


def test_every_exception_of_the_module_is_a_rocketmq_error() -> None:
    classes = [v for v in vars(errors).values() if isinstance(v, type) and issubclass(v, Exception)]
    assert len(classes) > 20
    assert all(issubclass(c, RocketMQError) for c in classes)


def test_the_test_harness_setup_errors_are_apart() -> None:
    # A broken local broker setup must not be swallowed by `except RocketMQError`.
    assert not issubclass(BrokerSetupError, RocketMQError)
