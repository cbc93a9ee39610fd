"""``jcs``: its fast path gives the reference RFC 8785 bytes for every JSON value."""

from __future__ import annotations

import pytest
import rfc8785
from hypothesis import given
from hypothesis import strategies as st

from workflows.canonical import MAX_SAFE_INT, jcs

scalars = (st.none() | st.booleans() | st.text()
           | st.integers(min_value=-MAX_SAFE_INT, max_value=MAX_SAFE_INT)
           | st.floats(allow_nan=False, allow_infinity=False))
keys = st.text() | st.sampled_from(["a", "B", "_", "é", "\U0001f600", "\ue000", "seq", ""])
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                      | st.dictionaries(keys, inner, max_size=4), max_leaves=20)


@given(values)
def test_jcs_is_byte_for_byte_rfc8785(value):
    assert jcs(value) == rfc8785.dumps(value)


@pytest.mark.parametrize("value", [
    {"t": "quote \" backslash \\ controls \x00\x01\x1f\b\f\n\r\t del \x7f \u2028 é"},
    {"b": 1, "a": [True, False, None], "A": {}, "": []},
    {"\U0001f600": 1, "\ue000": 2},  # UTF-16 order differs from code point order here
    [MAX_SAFE_INT, -MAX_SAFE_INT, 0, 1.0, 1e21, -0.0],
])
def test_jcs_edge_cases_match_the_reference(value):
    assert jcs(value) == rfc8785.dumps(value)


@pytest.mark.parametrize("value", [2**53, {"s": "\ud800"}, {1: "not a string key"},
                                   float("nan"), {"x": object()}])
def test_what_jcs_cannot_encode_is_refused_as_the_reference_does(value):
    with pytest.raises(rfc8785.CanonicalizationError):
        rfc8785.dumps(value)
    with pytest.raises(rfc8785.CanonicalizationError):
        jcs(value)
