"""The exporter's per-event path (issue 28) makes what the reference makes: a payload
kept as it is only when ``jsonable`` would not change it, the payload's JCS by orjson
only where that is RFC 8785's, events built without validation equal to validated
ones, bad input from history refused as before, and ``snapshot.json`` by orjson the
bytes ``json.dumps`` wrote."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

import pytest
import rfc8785
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from temporalio.api.history.v1 import HistoryEvent

from observation.exporter import Chain, LogEvent, MappedEvent, SessionMapper
from observation.exporter.chain import jsonable, log_value, payload_jcs, read_json
from observation.exporter.decode import format_ts, load_history
from observation.exporter.mapping import map_history
from observation.exporter.snapshot import LogSnapshot, snapshot_bytes
from workflows.canonical import MAX_SAFE_INT, jcs, plain

HISTORIES = Path(__file__).resolve().parents[1] / "workflows" / "histories"


class Colour(StrEnum):
    RED = "red"


#: Anything a mapping may hand over: floats, big integers, tuples, non-str keys, lone
#: surrogates, keys where UTF-16 and code point order differ, a str subclass.
text = st.text(max_size=8)  # lone surrogates included
key = text | st.sampled_from(["\ue000", "\U0001f600", "é", "a", "b"]) | st.integers(-3, 3)
leaf = (st.none() | st.booleans() | st.integers() | text | st.just(Colour.RED)
        | st.floats(allow_nan=True, allow_infinity=True)
        | st.sampled_from([0.0, -0.0, 1.0, 1e16, 2.0**53, 0.5, MAX_SAFE_INT, MAX_SAFE_INT + 1,
                           -MAX_SAFE_INT - 1]))
value = st.recursive(leaf, lambda inner: st.lists(inner, max_size=4)
                     | st.lists(inner, max_size=3).map(tuple)
                     | st.dictionaries(key, inner, max_size=4), max_leaves=20)
#: What most payloads are: strings, booleans, null, safe integers, ASCII keys.
plain_value = st.recursive(
    st.none() | st.booleans() | st.integers(-MAX_SAFE_INT, MAX_SAFE_INT)
    | st.text(st.characters(exclude_categories=("Cs",)), max_size=8),
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.text(st.characters(max_codepoint=127), max_size=6), inner,
                      max_size=4), max_leaves=20)


def same(a: Any, b: Any) -> bool:
    """Equal, of the same types all the way down, dict keys in the same order."""
    if type(a) is not type(b):
        return False
    if type(a) is dict:
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if type(a) is list:
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if type(a) is float and a != a:
        return b != b
    return a == b


@settings(max_examples=500, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(key, value, max_size=4) | st.dictionaries(st.just("v"), plain_value))
def test_log_value_is_jsonable_and_says_whether_it_is_plain(payload):
    logged, exact = log_value(payload)
    assert same(logged, jsonable(payload))
    assert exact == plain(logged)
    if logged is payload:  # kept only when jsonable would change nothing
        assert same(jsonable(payload), payload)


@settings(max_examples=500, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(key, value, max_size=4) | st.dictionaries(st.just("v"), plain_value))
def test_payload_jcs_writes_what_rfc8785_writes(payload):
    logged, _ = log_value(payload)
    try:
        expected = rfc8785.dumps(logged)
    except rfc8785.CanonicalizationError:  # not JCS (1e400 read as infinity: none here)
        with pytest.raises(rfc8785.CanonicalizationError):
            payload_jcs(logged)
        return
    assert payload_jcs(logged) == expected == jcs(logged)


def test_payload_jcs_past_orjsons_depth_and_with_a_lone_surrogate():
    deep: Any = "x"
    for _ in range(140):  # 280 levels: orjson stops at 255; JCS has no limit
        deep = {"a": [deep]}
    assert payload_jcs(deep) == jcs(deep)
    with pytest.raises(rfc8785.CanonicalizationError):  # refused as rfc8785 refuses it
        payload_jcs({"a": "\ud800"})


def mapped_histories() -> list[tuple[str, list[MappedEvent]]]:
    out = []
    for path in sorted(HISTORIES.glob("*.json")):
        sid, events = load_history(path.read_text())
        out.append((sid, map_history(sid, events)))
    return out


def test_events_built_without_validation_equal_validated_ones():
    lines = 0
    for _, events in mapped_histories():
        chain = Chain()
        for m in events:
            again = MappedEvent(**m.__dict__)  # validated; model_post_init finds _plain
            assert m == again and m.model_dump() == again.model_dump()
            assert m.__pydantic_fields_set__ == again.__pydantic_fields_set__
            assert m._plain == plain(m.payload)
            with pytest.raises(ValidationError):  # still frozen
                m.type = "x"
            e = chain.link(m)
            e_again = LogEvent(**e.__dict__)
            assert e == e_again and e.line() == e_again.line()
            assert e.__pydantic_fields_set__ == e_again.__pydantic_fields_set__
            assert chain.line == jcs(e.line()) + b"\n"
            lines += 1
    assert lines > 400  # every saved history


def test_a_type_or_payload_of_another_kind_is_refused_as_before():
    mapper = SessionMapper("s-x")
    mapper._event, mapper.run_id = HistoryEvent(event_id=3), "r"
    with pytest.raises(ValidationError):
        mapper.emit(5, {"a": 1})  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        mapper.emit("T", [1])  # type: ignore[arg-type]
    ok = mapper.emit("T", {"a": (1, 2.0)})
    assert ok.payload == {"a": [1, 2]} and ok._plain


@settings(max_examples=300)
@given(seconds=st.integers(0, 4_102_444_800), nanos=st.integers(0, 999_999_999))
def test_event_times_as_before(seconds, nanos):
    e = HistoryEvent()
    e.event_time.seconds, e.event_time.nanos = seconds, nanos
    dt = datetime.fromtimestamp(seconds, UTC)
    assert format_ts(e) == f"{dt:%Y-%m-%dT%H:%M:%S}.{nanos // 1000:06d}Z"


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.text(st.characters(max_codepoint=127), max_size=6), plain_value,
                       max_size=5))
def test_snapshot_bytes_as_json_dumps_writes_them(snapshot):
    """``snapshot.json`` of plain values by orjson: what ``json.dumps`` wrote before."""
    reference = json.dumps(snapshot, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    assert snapshot_bytes(snapshot) == reference.encode()


def test_every_saved_snapshot_as_before():
    n = 0
    for path in sorted(HISTORIES.glob("*.json")):
        sid, events = load_history(path.read_text())
        chain, snap = Chain(), LogSnapshot(sid)
        for m in map_history(sid, events):
            chain.link(m)
            snap.apply(read_json(chain.line))
            reference = json.dumps(snap.data, indent=2, sort_keys=True, ensure_ascii=False)
            assert snap.to_bytes() == (reference + "\n").encode()
            n += 1
    assert n > 400
    deep: Any = 1
    for _ in range(140):  # deeper than orjson goes: json.dumps, as before
        deep = {"a": [deep]}
    assert snapshot_bytes({"x": deep}) == (json.dumps(
        {"x": deep}, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode()
