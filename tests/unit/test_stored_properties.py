"""Lazily parsed record properties behave like the eagerly parsed dict they replace."""

from __future__ import annotations

import copy
import pickle

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aiorocket.errors import MessageDecodeError
from aiorocket.protocol.message_codec import StoredProperties, decode_messages, decode_properties
from aiorocket.protocol.store_record import encode_stored_message

# Property text as it may appear on the wire: separators anywhere, empty names/values,
# duplicates and non-ASCII text (which the decoder keeps as str, ASCII as bytes).
_wire_text = st.lists(
    st.one_of(
        st.text(alphabet=st.sampled_from("ab\x01\x02"), max_size=6),
        st.text(alphabet=st.characters(codec="utf-8"), max_size=8),
    ),
    max_size=8,
).map("".join)


@given(_wire_text)
def test_lazy_properties_match_eager_parsing(text: str) -> None:
    eager = decode_properties(text)
    raw = text.encode()
    for lazy in (StoredProperties(raw), StoredProperties(text)):
        assert lazy == eager
        assert eager == lazy
        assert dict(lazy) == eager
        assert len(lazy) == len(eager)
        assert list(lazy) == list(eager)
        assert list(lazy.items()) == list(eager.items())
        assert list(lazy.keys()) == list(eager.keys())
        assert list(lazy.values()) == list(eager.values())
        for key in [*eager, "TAGS", "missing"]:
            assert (key in lazy) == (key in eager)
            assert lazy.get(key) == eager.get(key)
            assert lazy.get(key, "-") == eager.get(key, "-")
        assert repr(lazy) == repr(eager)


@given(st.dictionaries(st.text(min_size=1), st.text(min_size=1), max_size=5))
def test_decoded_record_properties_equal_the_sent_ones(props: dict[str, str]) -> None:
    props = {k: v for k, v in props.items() if "\x01" not in k + v and "\x02" not in k + v}
    [msg] = decode_messages(encode_stored_message("t", b"body", props))
    assert isinstance(msg.properties, StoredProperties)
    assert msg.properties == props
    for key, value in props.items():
        assert msg.properties[key] == value


def test_lazy_properties_copy_pickle_and_merge_as_dicts() -> None:
    lazy = StoredProperties(b"TAGS\x01a\x02KEYS\x01k1 k2\x02")
    assert pickle.loads(pickle.dumps(lazy)) == {"TAGS": "a", "KEYS": "k1 k2"}
    assert type(pickle.loads(pickle.dumps(lazy))) is dict
    assert copy.copy(lazy) == lazy
    assert lazy.copy() == {"TAGS": "a", "KEYS": "k1 k2"}
    assert lazy | {"X": "1"} == {"TAGS": "a", "KEYS": "k1 k2", "X": "1"}
    assert {"TAGS": "b"} | lazy == {"TAGS": "a", "KEYS": "k1 k2"}
    assert lazy != {"TAGS": "a"}
    assert lazy != "TAGS"
    with pytest.raises(KeyError):
        lazy["missing"]
    with pytest.raises(TypeError):
        hash(lazy)


def test_message_accessors_read_lazy_properties() -> None:
    props = {"TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "ABC", "ключ": "值"}
    [msg] = decode_messages(encode_stored_message("t", b"", props))
    assert (msg.tags, msg.keys, msg.msg_id) == ("TagA", ["k1", "k2"], "ABC")
    assert msg.properties["ключ"] == "值"


def test_invalid_utf8_still_fails_the_whole_body_at_decode_time() -> None:
    good = encode_stored_message("t", b"", {"A": "1"})
    bad = good.replace(b"A\x011", b"A\x01\xff")
    with pytest.raises(MessageDecodeError, match="UTF-8"):
        decode_messages(good + bad)
