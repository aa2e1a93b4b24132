"""Broker features that came with a RocketMQ release, and the release a broker runs.

Every remoting answer carries the version of the server that sent it (``version``: the
ordinal of Java's ``MQVersion.Version``, e.g. 407 for 4.9.7, 513 for 5.5.0). A feature is
either a request of its own (POP, recall, lite subscriptions), which an older broker
refuses, or a message property (timer, priority), which an older broker ignores: it
stores the message and delivers it at once, as a plain one. Both are checked against
``since`` in the client layer (aiorocket.client.broker), which raises
[`UnsupportedBrokerFeatureError`][aiorocket.errors.UnsupportedBrokerFeatureError].
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "LITE",
    "POP",
    "PRIORITY",
    "RECALL",
    "TIMER",
    "BrokerFeature",
    "feature_of_properties",
    "feature_of_request",
    "is_4x",
    "version_name",
]


@dataclass(frozen=True, slots=True)
class BrokerFeature:
    name: str
    #: the first release with it ("5.0.0") and its version code.
    since: str
    since_code: int


#: MQVersion ordinals: 5.0.0 is 413, and from there each x.y.z release is the odd code
#: after its x.y.z-SNAPSHOT, 20 codes per minor line (5.3.2 = 477, 5.4.0 = 493).
_V5_0_0_SNAPSHOT = 412
#: 4.9.0-SNAPSHOT; 4.9.z = 393 + 2z (4.9.7 = 407).
_V4_9_0_SNAPSHOT = 392


def version_code(version: str) -> int:
    """The code of release ``version`` ("5.3.2" -> 477): 4.9.x and 5.x."""
    major, minor, patch = (int(p) for p in version.split("."))
    if major == 4 and minor == 9:
        return _V4_9_0_SNAPSHOT + 2 * patch + 1
    if major == 5:
        return _V5_0_0_SNAPSHOT + 20 * minor + 2 * patch + 1
    raise ValueError(f"no version code known for RocketMQ {version}")


def version_name(code: int) -> str:
    """The release of version code ``code`` ("5.3.3" for 479), or "version code N"."""
    if code >= _V5_0_0_SNAPSHOT:
        minor, rest = divmod(code - _V5_0_0_SNAPSHOT, 20)
        patch, release = divmod(rest, 2)
        return f"5.{minor}.{patch}" + ("" if release else "-SNAPSHOT")
    if code >= _V4_9_0_SNAPSHOT:
        patch, release = divmod(code - _V4_9_0_SNAPSHOT, 2)
        return f"4.9.{patch}" + ("" if release else "-SNAPSHOT")
    return f"version code {code}"


def is_4x(code: int) -> bool:
    """A server that says it runs a 4.x release (0, a server that does not say: no)."""
    return 0 < code < _V5_0_0_SNAPSHOT


def _feature(name: str, since: str) -> BrokerFeature:
    return BrokerFeature(name, since, version_code(since))


POP = _feature("POP consumption", "5.0.0")
TIMER = _feature("timer messages (a delivery time or delay in ms/s)", "5.0.0")
RECALL = _feature("message recall", "5.3.2")
PRIORITY = _feature("priority messages", "5.4.0")
LITE = _feature("lite topics", "5.5.0")

#: The request codes of each feature (aiorocket.client.pop, .recall, .lite).
_BY_REQUEST = {
    **dict.fromkeys((200050, 200051, 200052, 200053, 200151), POP),
    370: RECALL,
    **dict.fromkeys((200070, 200071, 200072, 200073, 200079), LITE),
}
#: Message properties an older broker would ignore (stored, then delivered at once).
#: (DELAY, the 4.x delay level, is not here: every release has it.)
_BY_PROPERTY = (
    ("TIMER_DELIVER_MS\x01", TIMER),
    ("TIMER_DELAY_SEC\x01", TIMER),
    ("TIMER_DELAY_MS\x01", TIMER),
    ("_SYS_MSG_PRIORITY_\x01", PRIORITY),
    ("__LITE_TOPIC\x01", LITE),
)


def feature_of_request(request_code: int) -> BrokerFeature | None:
    return _BY_REQUEST.get(request_code)


def feature_of_properties(properties: str) -> BrokerFeature | None:
    """The newest feature an encoded property string needs, if any (a property name
    starts the string or follows a ``\\x02``)."""
    if "TIMER_" not in properties and "_SYS_MSG_PRIORITY_" not in properties and (
        "__LITE_TOPIC" not in properties
    ):
        return None  # the common case: one scan each
    needed: BrokerFeature | None = None
    for key, feature in _BY_PROPERTY:
        if (properties.startswith(key) or f"\x02{key}" in properties) and (
            needed is None or feature.since_code > needed.since_code
        ):
            needed = feature
    return needed
