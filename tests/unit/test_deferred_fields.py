"""The fields a pulled ``ConsumerMessage`` decodes on first access (aiorocket.message,
"Fields read on first access"; benchmarks/README.md, "Round 8"): the same values and
types as the eager decode, and the same behaviour for pickling, copies, ``replace``,
assignment and deletion."""

from __future__ import annotations

import copy
import dataclasses
import pickle
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aiorocket.message import _DEFERRED, MessageExt, init_stores_slots
from aiorocket.protocol.message_codec import decode_messages
from aiorocket.protocol.store_record import encode_stored_message
from aiorocket.received import ConsumerMessage, PopMessage

_INT32 = st.integers(-(2**31), 2**31 - 1)
_INT64 = st.integers(-(2**63), 2**63 - 1)
_HOST = st.builds(
    lambda ip, port: f"{'.'.join(map(str, ip))}:{port}",
    st.tuples(*[st.integers(0, 255)] * 4),
    st.integers(0, 65535),  # what the encoder accepts (the decoder reads any int32)
)
_RECORD = st.fixed_dictionaries(
    {
        "topic": st.text("abcXYZ_%-", min_size=1, max_size=20),
        "body": st.binary(max_size=40),
        "properties": st.dictionaries(
            st.text("abKEYS", min_size=1, max_size=4), st.text("xyz1", min_size=1, max_size=4)
        ),
        "queue_id": _INT32,
        "queue_offset": _INT64,
        "commit_log_offset": _INT64,
        "flag": _INT32,
        # the usual path's records: no IPv6 host bits, not compressed
        "sys_flag": _INT32.map(lambda f: f & ~0x31),
        "born_timestamp": _INT64,
        "born_host": _HOST,
        "store_timestamp": _INT64,
        "store_host": _HOST,
        "reconsume_times": _INT32,
        "prepared_transaction_offset": _INT64,
        "body_crc": _INT32,
    }
)


def _fields(m: MessageExt) -> list[tuple[str, object, type]]:
    return [
        (f.name, getattr(m, f.name), type(getattr(m, f.name)))
        for f in dataclasses.fields(MessageExt)
        if f.name != "properties"
    ] + [("properties", dict(m.properties), dict)]


def _records(fields: list[dict[str, object]]) -> bytes:
    return b"".join(
        encode_stored_message(f.pop("topic"), f.pop("body"), f.pop("properties"), **f)  # type: ignore[arg-type]
        for f in (dict(f) for f in fields)
    )


@settings(max_examples=40, deadline=None)
@given(st.lists(_RECORD, min_size=1, max_size=6), st.data())
def test_deferred_fields_equal_the_eager_decode(
    records: list[dict[str, object]], data: st.DataObject
) -> None:
    """Random usual records: each field of the ConsumerMessage (deferred or not), read in
    a random order, has the value and type the eager decode (the checked path's
    ``__init__``-built MessageExt) gives."""
    body = _records(records)
    eager = decode_messages(body, broker_name="b")
    lazy = decode_messages(body, broker_name="b", message_class=ConsumerMessage)
    assert len(lazy) == len(eager) == len(records)
    assert all(hasattr(m, "_head") for m in lazy)  # the usual path took every record
    names = [f.name for f in dataclasses.fields(MessageExt)]
    for m in lazy:
        for name in data.draw(st.permutations(names)):
            getattr(m, name)
    assert [_fields(m) for m in lazy] == [_fields(m) for m in eager]


def _one() -> ConsumerMessage:
    record = encode_stored_message(
        "T", b"body", {"TAGS": "t", "UNIQ_KEY": "U"}, queue_id=3, queue_offset=42,
        commit_log_offset=0x1234, flag=7, born_timestamp=1_700_000_000_000,
        born_host="10.0.0.1:1234", store_timestamp=1_700_000_000_001,
        store_host="127.0.0.1:10911", reconsume_times=2, prepared_transaction_offset=99,
    )  # fmt: skip
    [m] = decode_messages(record, broker_name="b", message_class=ConsumerMessage)
    assert isinstance(m, ConsumerMessage) and hasattr(m, "_head")
    return m


def test_pickle_copy_and_replace_carry_every_field() -> None:
    want = _fields(_one())
    assert _fields(pickle.loads(pickle.dumps(_one()))) == want
    assert _fields(copy.copy(_one())) == want
    assert _fields(copy.deepcopy(_one())) == want
    assert _fields(dataclasses.replace(_one())) == want
    assert dataclasses.asdict(_one())["store_host"] == "127.0.0.1:10911"
    assert type(pickle.loads(pickle.dumps(_one()))) is ConsumerMessage


def test_a_field_assigned_before_it_is_read_keeps_the_assigned_value() -> None:
    m = _one()
    m.commit_log_offset = 5
    m.born_host = "1.1.1.1:1"
    assert (m.commit_log_offset, m.born_host, m.store_host) == (5, "1.1.1.1:1", "127.0.0.1:10911")
    assert m.offset_msg_id == "7F00000100002A9F0000000000000005"


def test_deleting_a_field_then_reading_it_raises_as_before() -> None:
    m = _one()
    del m.flag
    with pytest.raises(AttributeError):
        _ = m.flag
    with pytest.raises(AttributeError):
        del m.flag
    assert (m.store_host, m.commit_log_offset, m.queue_offset) == ("127.0.0.1:10911", 0x1234, 42)


def test_a_message_without_init_or_head_has_no_fields() -> None:
    m = object.__new__(ConsumerMessage)
    with pytest.raises(AttributeError, match="born_host"):
        _ = m.born_host


_REQUIRED: dict[str, Any] = {"topic": "t", "body": b"", "properties": {}, "queue_id": 0,
                             "queue_offset": 0, "commit_log_offset": 0}  # fmt: skip


def test_a_class_stores_past_its_own_and_its_bases_defaults_not_another_classs() -> None:
    """``init_stores_slots``'s defaults stay with their class and its subclasses. A class
    set up after ConsumerMessage with a field of the name of one of its defaults
    (``_trace``) but no default of its own keeps that field in its own slot. Fails on the
    code before: every call widened one module-level set, and that class's ``__init__``
    stored ``_trace`` into ``__trace``, a slot it does not have (AttributeError)."""

    @dataclasses.dataclass(slots=True, eq=False)
    class Traced(MessageExt):
        _trace: str | None = None

    init_stores_slots(Traced)
    assert Traced(**_REQUIRED, _trace="kept")._trace == "kept"
    assert "_trace" in Traced.__init__.__code__.co_names  # stored through its own slot

    @dataclasses.dataclass(slots=True, eq=False)
    class Hinted(MessageExt):
        _hint: str | None = None

    init_stores_slots(Hinted, {"_hint": None})

    @dataclasses.dataclass(slots=True, eq=False)
    class Later(MessageExt):
        _hint: str | None = None

    init_stores_slots(Later)  # Hinted's default is not Later's
    assert Later(**_REQUIRED, _hint="kept")._hint == "kept"

    @dataclasses.dataclass(slots=True, eq=False)
    class HintedMore(Hinted):
        extra: int = 0

    init_stores_slots(HintedMore)  # a subclass stores past its base's defaulted field
    assert "__hint" in HintedMore.__init__.__code__.co_names
    m = HintedMore(**_REQUIRED, _hint="kept")
    assert m._hint == "kept" and getattr(HintedMore, "__hint").__get__(m) == "kept"
    assert dataclasses.replace(m, _hint=None)._hint is None


@pytest.mark.parametrize("cls", [MessageExt, ConsumerMessage, PopMessage])
def test_init_stores_the_deferred_fields_in_their_slots(cls: type[MessageExt]) -> None:
    """The dataclass ``__init__`` stores past the properties (their setters cost ~0.2 µs
    a field): it names no deferred field, and sets every one."""
    assert not set(cls.__init__.__code__.co_names) & set(_DEFERRED)
    values = {f.name: f"{f.name}-v" for f in dataclasses.fields(MessageExt)}
    m = cls(**values)  # type: ignore[arg-type]
    assert not hasattr(m, "_head")
    assert {n: getattr(m, n) for n in values} == values


# -- the properties, kept raw until first read (benchmarks/README.md, "Round 9") --------


def test_a_pulled_message_makes_its_properties_when_first_read() -> None:
    """The usual path leaves the raw bytes, and no mapping, until ``properties`` is
    read; then the StoredProperties it gave before, the raw bytes dropped."""
    m = _one()
    assert hasattr(m, "_raw_properties")
    props = m.properties
    assert type(props).__name__ == "StoredProperties"
    assert dict(props) == {"TAGS": "t", "UNIQ_KEY": "U"}
    assert not hasattr(m, "_raw_properties")
    assert m.properties is props  # made once
    assert (m.tags, m.msg_id, m.keys) == ("t", "U", [])


@settings(max_examples=40, deadline=None)
@given(st.lists(_RECORD, min_size=1, max_size=6), st.sampled_from(["read", "tags", "pickle"]))
def test_deferred_properties_equal_the_eager_decode(
    records: list[dict[str, object]], first: str
) -> None:
    """Random usual records: whatever reads the properties first (the mapping, a
    property over it, pickling), they equal the eager decode's, item for item."""
    body = _records(records)
    eager = decode_messages(body, broker_name="b")
    lazy = decode_messages(body, broker_name="b", message_class=ConsumerMessage)
    assert all(hasattr(m, "_raw_properties") for m in lazy)
    if first == "tags":
        assert [m.tags for m in lazy] == [m.tags for m in eager]
    elif first == "pickle":
        lazy = [pickle.loads(pickle.dumps(m)) for m in lazy]
    assert [dict(m.properties) for m in lazy] == [dict(m.properties) for m in eager]
    assert all(m.properties == e.properties for m, e in zip(lazy, eager, strict=True))


def test_properties_assigned_before_they_are_read_keep_the_assigned_value() -> None:
    m = _one()
    m.properties = {"A": "1"}
    assert m.properties == {"A": "1"} and m.tags is None
    assert _fields(copy.copy(m))[-1] == ("properties", {"A": "1"}, dict)


def test_deleting_the_properties_then_reading_them_raises_as_before() -> None:
    m = _one()
    del m.properties
    with pytest.raises(AttributeError):
        _ = m.properties
    with pytest.raises(AttributeError):
        del m.properties
    assert m.queue_offset == 42


def test_a_message_without_init_or_raw_properties_has_none() -> None:
    m = object.__new__(ConsumerMessage)
    with pytest.raises(AttributeError, match="properties"):
        _ = m.properties


@pytest.mark.parametrize("cls", [MessageExt, ConsumerMessage, PopMessage])
def test_init_stores_the_properties_in_their_slot(cls: type[MessageExt]) -> None:
    assert "properties" not in cls.__init__.__code__.co_names
    m = cls("T", b"", {"K": "v"}, 0, 0, 0)
    assert not hasattr(m, "_raw_properties")
    assert m.properties == {"K": "v"}


# -- the fields a pulled message seldom changes, left unset (benchmarks/README.md, "Round 15")


@pytest.mark.parametrize("cls", [ConsumerMessage, PopMessage])
def test_a_pulled_message_leaves_the_seldom_changed_fields_unset_reading_their_defaults(
    cls: type[ConsumerMessage],
) -> None:
    """The usual path stores none of ``UNSET_DEFAULTS`` (four slots a message less); each
    reads as the dataclass's default until set, then as set, and pickling, copies and
    ``replace`` carry it either way, as ``__init__``, which stores them in their slots,
    does. Fails on the code before Round 15 (the decoder stored the defaults)."""
    record = encode_stored_message("T", b"body", {"TAGS": "t"}, queue_offset=42)
    [m] = decode_messages(record, broker_name="b", message_class=cls, stamp=(None, 0, None))
    defaults = {f.name: f.default for f in dataclasses.fields(cls)}
    for name in ("_timed_out", "_failure", "_retry_delay", "_trace"):
        slot = getattr(cls, f"_{name}")  # the slot, under its second name
        with pytest.raises(AttributeError):  # unset
            slot.__get__(m)
        assert getattr(m, name) == defaults[name]
    assert _fields(copy.copy(m)) == _fields(m)
    changed = {"_timed_out": True, "_failure": ValueError("x"), "_retry_delay": 2.5,
               "_trace": "a trace"}  # fmt: skip
    for name, value in changed.items():
        setattr(m, name, value)
        getattr(cls, f"_{name}").__get__(m)  # set now
    for made in (m, pickle.loads(pickle.dumps(m)), copy.copy(m), dataclasses.replace(m)):
        got = {name: getattr(made, name) for name in changed}
        assert {n: v for n, v in got.items() if n != "_failure"} == {
            n: v for n, v in changed.items() if n != "_failure"
        }
        assert isinstance(got["_failure"], ValueError)
    assert m._take_retry_delay() == 2.5 and m._retry_delay is None
    built = cls("T", b"b", {}, 1, 2, 3, _trace="t", _retry_delay=1.0)
    assert (built._trace, built._retry_delay, built._timed_out) == ("t", 1.0, False)
    assert getattr(cls, "__trace").__get__(built) == "t"  # stored in the slot itself
