"""ACL request signing and the security settings, without a broker."""

from __future__ import annotations

import ssl

import pytest

from aiorocket.consumer import Consumer
from aiorocket.errors import ConfigError
from aiorocket.producer import Producer
from aiorocket.protocol.command import RemotingCommand
from aiorocket.security import Credentials, resolve_tls, signature, tls_context


def test_signature_matches_the_java_signer_test_vector() -> None:
    # apache/rocketmq AclSignerTest: calSignature("RocketMQ", "12345678").
    expected = "IUc8rrO/0gDch8CjObLQsW2rsiA="
    assert signature("12345678", {"b": "MQ", "a": "Rocket"}, b"") == expected
    assert signature("12345678", {"a": "Rocket"}, b"MQ") == expected  # body after the values
    assert signature("12345678", {"a": "Rocket", "Signature": "old"}, b"MQ") == expected


def test_sign_adds_access_key_token_and_signature_over_sorted_fields() -> None:
    creds = Credentials("ak", "sk", security_token="tok")
    cmd = RemotingCommand.request(10, {"topic": "t", "queueId": "1"}, b"body")
    creds.sign(cmd)
    assert cmd.ext_fields["AccessKey"] == "ak"
    assert cmd.ext_fields["SecurityToken"] == "tok"
    # Sorted by name: AccessKey, SecurityToken, queueId, topic.
    assert cmd.ext_fields["Signature"] == signature("sk", {"x": "aktok1t"}, b"body")
    creds.sign(cmd)  # re-signing (a retry) gives the same header
    assert cmd.ext_fields["Signature"] == signature("sk", {"x": "aktok1t"}, b"body")


def test_secret_is_not_in_repr_and_empty_values_are_refused() -> None:
    assert "sk-secret" not in repr(Credentials("ak", "sk-secret", "token-secret"))
    assert "token-secret" not in repr(Credentials("ak", "sk-secret", "token-secret"))
    for bad in (("", "s"), ("a", ""), ("a", "s", "")):
        with pytest.raises(ConfigError):
            Credentials(*bad)


def test_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ROCKETMQ_ACCESS_KEY", raising=False)
    assert Credentials.from_env() is None
    monkeypatch.setenv("ROCKETMQ_ACCESS_KEY", "ak")
    monkeypatch.setenv("ROCKETMQ_SECRET_KEY", "sk")
    assert Credentials.from_env() == Credentials("ak", "sk")


def test_tls_settings() -> None:
    assert resolve_tls(False) is None
    default = resolve_tls(True)
    assert default is not None and default.verify_mode is ssl.CERT_REQUIRED
    assert default.check_hostname
    assert tls_context(verify=False).verify_mode is ssl.CERT_NONE
    with pytest.raises(ConfigError):
        Consumer("g", "127.0.0.1:9876", tls="yes")
    with pytest.raises(ConfigError):
        Producer("g", "127.0.0.1:9876", credentials=("ak", "sk"))
