"""The exporter's per-event path (issue 28) makes what the reference makes: a payload
kept as it is only when ``jsonable`` would not change it, the payload's JCS by orjson
only where that is RFC 8785's, events built without validation equal to validated
ones, bad input from history refused as before, and ``snapshot.json`` by orjson the
bytes ``json.dumps`` wrote."""

from __future__ import annotations

import functools
import hashlib
import json
import shutil
from datetime import UTC, datetime, timedelta, timezone
from enum import StrEnum
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import rfc8785
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from pydantic_core import to_json
from temporalio.api.common.v1 import Payload
from temporalio.api.history.v1 import HistoryEvent

from activities.llm.payloads import canonical_bytes, llm_call_started, sha256_json
from observation.exporter import Chain, LogEvent, MappedEvent, SessionMapper
from observation.exporter import activities as activities_mod
from observation.exporter.activities import ActivityMapper
from observation.exporter.chain import jsonable, log_value, logged_jcs, payload_jcs, read_json
from observation.exporter.decode import (
    MappingError,
    first_value,
    format_ts,
    json_value,
    load_history,
    payload_value,
)
from observation.exporter.journal import JournalMapper, execution_state
from observation.exporter.log import LogError, LogWriter
from observation.exporter.mapping import map_history
from observation.exporter.model import Artifact
from observation.exporter.snapshot import LogSnapshot, snapshot_bytes
from observation.projections import execution_state_event
from workflows.canonical import MAX_SAFE_INT, canonical_json, jcs, plain
from workflows.contract import ExecutionStatus, TransitionRecord, summarize_action
from workflows.io import LLMCallInput

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


# -- issue 28, second pass: decoding, hashing and the artifacts' folders ----------------

#: Number tokens as JSON writes them: up to 25 digits, a fraction, an exponent.
number_token = st.from_regex(r"-?(0|[1-9][0-9]{0,24})(\.[0-9]{1,25})?([eE][+-]?[0-9]{1,3})?",
                             fullmatch=True)


def reference_value(data: bytes) -> Any:
    """What ``payload_value`` read before: the ``json`` module over the UTF-8 text."""
    return json.loads(data.decode("utf-8", "surrogatepass"))


def same_or_both_refused(data: bytes) -> None:
    try:
        expected = reference_value(data)
    except ValueError:
        with pytest.raises(MappingError):
            json_value(data)
        return
    except RecursionError:  # nested deeper than json goes: as before, not a MappingError
        with pytest.raises(RecursionError):
            json_value(data)
        return
    assert same(json_value(data), expected)


@settings(max_examples=500, suppress_health_check=[HealthCheck.too_slow])
@given(value, st.booleans())
def test_a_payload_is_read_as_json_reads_it(v, ascii_only):
    """Floats to the last bit, integers of any size, lone surrogates (escaped, or as the
    3 bytes pydantic writes), NaN and infinities: the same values and types as before."""
    try:
        text = json.dumps(v, ensure_ascii=ascii_only)
    except (TypeError, ValueError):  # a key json cannot write (a tuple's value: fine)
        return
    same_or_both_refused(text.encode("utf-8", "surrogatepass"))
    same_or_both_refused(to_json(v, serialize_unknown=True))  # what the data converter writes


@settings(max_examples=1000)
@given(number_token)
def test_every_number_token_is_read_as_json_reads_it(token):
    for data in (token.encode(), f'{{"n":[{token}]}}'.encode()):
        same_or_both_refused(data)


@pytest.mark.parametrize("data", [
    b"1e400", b"-1e400", b"NaN", b"[Infinity]", b'"\\ud800"', b'{"\xed\xa0\x80":1}',
    b"18446744073709551616", b"-9223372036854775809", b"9223372036854775808",
    b"12345678901234567890123", b'{"a":1,"b":2,"a":3}', b"\xef\xbb\xbf{}", b"-0", b"-0.0",
    b"4.9e-324", b"2.2250738585072011e-308", b"1e-400", b'"\xc0\x80"', b"[1,]", b"",
    b'"a\x01"', b"[" * 2000 + b"]" * 2000, b'"1234567890123456789"', b'{"x":0.1}'])
def test_what_orjson_refuses_or_may_read_otherwise_goes_to_json(data):
    same_or_both_refused(data)


def test_a_payload_that_is_not_json_is_refused_as_before():
    p = Payload(metadata={"encoding": b"json/plain"}, data=b"{nope")
    with pytest.raises(MappingError, match="not UTF-8 JSON"):
        payload_value(p)
    p = Payload(metadata={"encoding": b"json/plain"}, data=b'"\xff"')
    with pytest.raises(MappingError, match="not UTF-8 JSON"):
        payload_value(p)


@settings(max_examples=500, suppress_health_check=[HealthCheck.too_slow])
@given(value | st.lists(value) | plain_value)
def test_canonical_bytes_is_canonical_json(v):
    """``sha256_json``'s bytes: orjson's where it writes ``canonical_json``'s text,
    the same errors where that fails (a lone surrogate, keys it cannot sort)."""
    try:
        expected = canonical_json(v).encode("utf-8")
    except (TypeError, ValueError) as err:
        with pytest.raises(type(err)):
            canonical_bytes(v)
        return
    assert canonical_bytes(v) == expected
    assert sha256_json(v) == hashlib.sha256(expected).hexdigest()


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(key, value, max_size=4) | st.dictionaries(st.just("v"), plain_value))
def test_a_tool_results_artifact_bytes_as_before(result):
    try:
        expected = jcs(jsonable(result))
    except rfc8785.CanonicalizationError:
        return
    assert logged_jcs(result) == payload_jcs(log_value(result)[0]) == expected


@functools.cache
def transitions() -> list[tuple[Any, Any]]:
    out = []
    for path in sorted(HISTORIES.glob("*.json")):
        sid, events = load_history(path.read_text())
        mapper = SessionMapper(sid)
        original = JournalMapper._j_contract_transition

        def spy(self, d, at, original=original):
            c = self.contracts[d["execution_id"]]
            record = TransitionRecord.model_validate(
                {k: d[k] for k in TransitionRecord.model_fields})
            out.append((c.model_copy(deep=True), record))
            return original(self, d, at)
        with mock.patch.object(JournalMapper, "_j_contract_transition", spy):
            for e in events:
                mapper.feed(e)
    return out


def test_a_transitions_state_is_the_models_dump():
    seen = transitions()
    assert len(seen) > 20
    for c, record in seen:
        reference = execution_state_event(c, record).model_dump(mode="json")
        made = execution_state(c, record, summarize_action(c.action_type, c.action_detail))
        assert same(made, reference)


@settings(max_examples=300)
@given(st.datetimes(timezones=st.sampled_from([UTC, timezone(timedelta(hours=-5, minutes=-30))])
                    | st.none()), st.sampled_from(list(ExecutionStatus)))
def test_a_transitions_state_for_any_time_and_status(when, status):
    c, record = transitions()[0]
    record = record.model_copy(update={
        "timestamp": when or datetime(2026, 1, 1), "to_status": status})
    reference = execution_state_event(c, record).model_dump(mode="json")
    assert same(execution_state(c, record, summarize_action(c.action_type, c.action_detail)),
                reference)


def llm_inputs() -> list[tuple[str, list[dict[str, Any]]]]:
    out = []
    for path in sorted(HISTORIES.glob("*.json")):
        sid, events = load_history(path.read_text())
        calls = [first_value(e.activity_task_scheduled_event_attributes.input) for e in events
                 if e.activity_task_scheduled_event_attributes.activity_type.name == "llm_call"]
        if calls:
            out.append((sid, calls))
    return out


def reference_started(raw: Any) -> dict[str, Any]:
    return llm_call_started(LLMCallInput.model_validate(raw)).model_dump(
        mode="json", exclude_none=True)


def started(mapper: ActivityMapper, raw: Any) -> dict[str, Any]:
    return mapper._call_started(raw).model_dump(mode="json", exclude_none=True)


def test_an_llm_calls_start_reuses_the_call_before_and_is_the_same():
    calls = 0
    for _, inputs in llm_inputs():
        mapper = ActivityMapper()
        for i, raw in enumerate(inputs):
            assert same(started(mapper, raw), reference_started(raw))
            if i:  # the conversation so far came from the call before
                assert any(v for v in mapper._last_call.values() if isinstance(v, tuple))
            calls += 1
    assert calls >= 10


def test_an_llm_calls_changed_parts_are_validated_and_hashed_again():
    _, inputs = max(llm_inputs(), key=lambda x: len(x[1]))
    raw = inputs[-1]
    mapper = ActivityMapper()
    assert same(started(mapper, raw), reference_started(raw))
    variants = [
        {**raw, "messages": [*raw["messages"][:-1],
                             {**raw["messages"][-1], "content": "something else"}]},
        {**raw, "llm": {**raw["llm"], "temperature": 1}},  # 1, not 1.0: another key
        {**raw, "llm": {**raw["llm"], "model": "gpt-4o", "provider": "openai",
                        "base_url": "http://x", "responses": []}},
        {**raw, "tools": [{"server": "s", "name": "t", "input_schema": {"type": "object",
                                                                          "x": 0.5}}]},
        {**raw, "tools": []},
        raw,
    ]
    for v in variants:
        assert same(started(mapper, v), reference_started(v))
    for broken in ({**raw, "messages": [*raw["messages"], {"role": "nobody"}]},
                   {**raw, "llm": {**raw["llm"], "provider": "nobody"}},
                   {**raw, "tools": [{"name": "no server"}]}, {**raw, "call_index": -1},
                   {**raw, "messages": "not a list"}, [raw]):
        with pytest.raises(ValidationError):  # refused as the reference refuses it
            LLMCallInput.model_validate(broken)
        with pytest.raises(ValidationError):
            mapper._call_started(broken)
        assert same(started(mapper, raw), reference_started(raw))  # and nothing kept


def test_a_long_conversation_is_not_kept_for_the_next_call():
    _, inputs = llm_inputs()[0]
    raw = {**inputs[0], "messages": [*inputs[0]["messages"], {
        "role": "user", "content": "x" * (activities_mod.KEEP_CALL_BYTES + 1)}]}
    mapper = ActivityMapper()
    assert same(started(mapper, raw), reference_started(raw))
    assert mapper._last_call == {}
    assert same(started(mapper, inputs[0]), reference_started(inputs[0]))
    assert mapper._last_call != {}


def test_an_llm_call_input_orjson_cannot_key_is_validated_whole():
    _, inputs = llm_inputs()[0]
    raw = {**inputs[0], "messages": [*inputs[0]["messages"],
                                     {"role": "user", "content": "big", "tool_calls": [
                                         {"tool": "t", "arguments": {"n": 2**70}}]}]}
    mapper = ActivityMapper()
    assert same(started(mapper, raw), reference_started(raw))
    assert mapper._last_call == {}


# -- artifacts: a plain path checked with lstat, not resolved through pathlib -----------


def artifact_log(tmp_path: Path) -> LogWriter:
    return LogWriter(tmp_path / "runs" / "s-a").open()


def test_an_artifact_is_written_once_kept_and_replaced_when_it_changed(tmp_path):
    w = artifact_log(tmp_path)
    try:
        with mock.patch.object(LogWriter, "_put_artifact_resolved",
                               wraps=w._put_artifact_resolved) as reference:
            w.write_artifact(Artifact(path="artifacts/llm/a.json", content=b"1"))
            assert reference.call_count == 1  # a folder to make: the reference
            w.write_artifact(Artifact(path="artifacts/llm/b.json", content=b"2"))
            path = w.run_dir / "artifacts/llm/b.json"
            before = path.stat()
            w.write_artifact(Artifact(path="artifacts/llm/b.json", content=b"2"))  # kept
            assert (path.stat().st_ino, path.stat().st_mtime_ns) == \
                (before.st_ino, before.st_mtime_ns)
            w.write_artifact(Artifact(path="artifacts/llm/b.json", content=b"3"))  # replaced
            assert path.read_bytes() == b"3" and not list(path.parent.glob(".*.tmp"))
            assert reference.call_count == 1  # the folder was there: lstat only
            shutil.rmtree(w.run_dir / "artifacts")  # the folder went away: made again
            w.write_artifact(Artifact(path="artifacts/llm/c.json", content=b"4"))
            assert (w.run_dir / "artifacts/llm/c.json").read_bytes() == b"4"
            assert reference.call_count == 2
    finally:
        w.close()


@pytest.mark.parametrize("rel", ["../x.json", "artifacts/../x.json", "/tmp/x.json",
                                 "artifacts/llm/../../x.json", "other/x.json",
                                 "artifacts//../x.json", "x.json"])
def test_an_artifact_path_out_of_the_folder_is_refused(tmp_path, rel):
    w = artifact_log(tmp_path)
    try:
        w.write_artifact(Artifact(path="artifacts/llm/ok.json", content=b"1"))
        with pytest.raises(LogError, match="leaves the artifacts folder"):
            w._put_artifact(Artifact(path=rel, content=b"x"))
        assert not (w.run_dir / "x.json").exists() and not (tmp_path / "runs/x.json").exists()
    finally:
        w.close()


def test_a_symlink_out_of_the_artifacts_folder_is_refused(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    w = artifact_log(tmp_path)
    try:
        w.write_artifact(Artifact(path="artifacts/llm/ok.json", content=b"1"))
        (w.run_dir / "artifacts/llm/evil.json").symlink_to(outside / "evil.json")
        with pytest.raises(LogError, match="leaves the artifacts folder"):
            w._put_artifact(Artifact(path="artifacts/llm/evil.json", content=b"x"))
        (w.run_dir / "artifacts/tool").symlink_to(outside, target_is_directory=True)
        with pytest.raises(LogError, match="leaves the artifacts folder"):
            w._put_artifact(Artifact(path="artifacts/tool/t.json", content=b"x"))
        shutil.rmtree(w.run_dir / "artifacts")  # the folder itself a symlink out
        (w.run_dir / "artifacts").symlink_to(outside, target_is_directory=True)
        with pytest.raises(LogError, match="leaves the artifacts folder"):
            w._put_artifact(Artifact(path="artifacts/llm/ok.json", content=b"x"))
        assert list(outside.iterdir()) == []  # nothing written out there
    finally:
        w.close()


def test_a_symlink_inside_the_artifacts_folder_takes_the_reference(tmp_path):
    """Resolved into ``artifacts/``, as before: written there."""
    w = artifact_log(tmp_path)
    try:
        w.write_artifact(Artifact(path="artifacts/llm/ok.json", content=b"1"))
        (w.run_dir / "artifacts/same").symlink_to(w.run_dir / "artifacts/llm",
                                                  target_is_directory=True)
        w._put_artifact(Artifact(path="artifacts/same/x.json", content=b"2"))
        assert (w.run_dir / "artifacts/llm/x.json").read_bytes() == b"2"
    finally:
        w.close()
