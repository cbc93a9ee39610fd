"""The read model's JSON columns through ``orjson``: the same text as ``canonical_json``
for every value (``observation/read_model/json_text.py``)."""

from __future__ import annotations

import enum

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from observation.read_model.json_text import dumps, plain
from workflows.canonical import canonical_json


def test_every_code_point_as_a_value_and_as_a_key() -> None:
    chars = [chr(cp) for cp in range(0x110000) if not 0xD800 <= cp <= 0xDFFF]
    for i in range(0, len(chars), 4096):  # a few thousand code points per value
        chunk = chars[i:i + 4096]
        value = {"s": "x".join(chunk), **{c: i for i, c in enumerate(chunk)}}
        assert plain(value)
        assert dumps(value) == canonical_json(value)


@pytest.mark.parametrize("value", [
    {"a": 1e-05}, [1.0, 1e16, 0.1, -0.0], {"f": float("nan")},  # floats: the exact way
    "\ud800", {"k": ["\udfff"]},  # lone surrogates: orjson refuses them
    2**64, -(2**63) - 1, {"n": 2**70},  # beyond 64 bits
    {1: "a", 2.5: "b"}, {False: 1}, {None: 1},  # keys that are not str
    [[[[[[[[[[[[]]]]]]]]]]]], ("a", 1), {},
])
def test_what_orjson_writes_otherwise_goes_the_exact_way(value: object) -> None:
    assert dumps(value) == canonical_json(value)


class Colour(enum.StrEnum):
    RED = "red"


class Weight(enum.IntEnum):
    HEAVY = 2


def test_subclasses_of_builtins_go_the_exact_way() -> None:
    value = {"c": Colour.RED, "w": Weight.HEAVY}
    assert not plain(value)
    assert dumps(value) == canonical_json(value) == '{"c":"red","w":2}'


def test_nested_too_deep_fails_as_before() -> None:
    deep: list = []
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(RecursionError):
        canonical_json(deep)
    with pytest.raises(RecursionError):
        dumps(deep)


def test_what_json_cannot_write_fails_as_before() -> None:
    for value in ({"t": object()}, {"s": {1, 2}}, b"bytes"):
        with pytest.raises(TypeError):
            canonical_json(value)
        with pytest.raises(TypeError):
            dumps(value)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=5)
    | st.dictionaries(st.text(), inner, max_size=5),
    max_leaves=30)


@settings(max_examples=400, deadline=None)
@given(json_values)
def test_generated_values_give_the_same_text(value: object) -> None:
    assert dumps(value) == canonical_json(value)
