"""Every JSON value a tool, an LLM or a person can send round-trips through the log:
written as JCS, read back with numbers as doubles, verified, re-exported byte for
byte (numbers of every magnitude, -0.0, 5e-324, huge integers, non-ASCII); a lone
surrogate, which UTF-8 cannot carry, is refused where it enters and written as
U+FFFD by the exporter. The rule is in observation/exporter/README.md, "Values"."""

from __future__ import annotations

import json
import shutil
import uuid
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from api.cli.demo_config import notes_server
from observation.exporter import (
    LogSnapshot,
    export_history,
    export_session,
    snapshot_bytes,
    verify_dir,
)
from observation.exporter.chain import jsonable, read_json
from observation.exporter.verify import read_lines, verify_lines
from tests.support.audit_log import DEMO_SID, EDGE, EDGE_LOGGED, carrying, readme_verifier
from tests.support.sessions import running_worker, start_session
from workflows.canonical import jcs, plain
from workflows.config import SessionConfig

SID = DEMO_SID
README_VERIFY = readme_verifier()  # the README's outside verifier
runner = CliRunner()


def lines_of(d: Path) -> list[bytes]:
    return (d / "events.ndjson").read_bytes().splitlines(keepends=True)


def tree(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def cli_verify(d: Path) -> tuple[int, str]:
    from tests.support.cli import log_app

    r = runner.invoke(log_app(), ["log", "verify", str(d)])
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    return r.exit_code, r.output


def logged(d: Path) -> tuple[object, object]:
    """The value as the log holds it: in RUN_CREATED and in the tool's tool_result."""
    events = list(verify_lines(read_lines(d / "events.ndjson")))
    created = next(e for e in events if e["type"] == "RUN_CREATED")
    tool = next(e for e in events if e["type"] == "tool_result")
    return created["payload"]["config"]["sent"], tool["payload"]["structured"]


def check(tmp: Path, value: object, value_json: bytes | None = None) -> Path:
    """``value`` (sent as ``value_json``) is in the log as ``jsonable(value)``; the log
    verifies (exporter and CLI), replays to snapshot.json, and an exporter opening
    it again (a restart) continues it and changes no byte."""
    value_json = value_json or json.dumps(value, allow_nan=False).encode()
    events = carrying(value_json)
    runs = tmp / uuid.uuid4().hex[:8]
    export_history(SID, events, runs)
    d = runs / SID
    expected = jcs(jsonable(value))
    assert [jcs(v) for v in logged(d)] == [expected, expected]
    assert README_VERIFY(d) == verify_dir(d).events
    assert LogSnapshot.replay(SID, verify_lines(read_lines(d / "events.ndjson"))).to_bytes() \
        == (d / "snapshot.json").read_bytes()
    before = tree(d)
    assert export_history(SID, events, runs).written == 0
    assert tree(d) == before
    return d


# -- the edge values ---------------------------------------------------------------------

def test_every_edge_value_is_written_as_the_readme_says_and_verifies(tmp_path):
    d = check(tmp_path, EDGE)
    line = next(x for x in lines_of(d) if b'"RUN_CREATED"' in x)
    for part in EDGE_LOGGED:
        assert part in line, part
    assert "é ☃ 😀 \u2028 \\u0000 \\\"\\\\ \ue000".encode() in line  # raw UTF-8
    assert cli_verify(d)[0] == 0


@pytest.mark.parametrize("text", [b"1e16", b"1E+16", b"10000000000000000.0", b"1e400",
                                  b"123456789012345678901234567890", b"-0.0", b"5e-324",
                                  b"4.9e-324", b"0.1e-999"])
def test_a_number_in_any_spelling_round_trips(tmp_path, text):
    """As a tool or an LLM may spell it (json.loads reads 1e400 as infinity: written
    as the string "inf"; 0.1e-999 underflows to 0)."""
    check(tmp_path, json.loads(text), text)


def test_a_lone_surrogate_is_written_as_u_fffd(tmp_path):
    """JSON's \\ud800 escape makes a string UTF-8 cannot carry: JCS refuses it, the
    exporter writes U+FFFD in its place (and keeps going)."""
    d = check(tmp_path, {"s": "a\ud800b", "\udfff": 1}, b'{"s": "a\\ud800b", "\\udfff": 1}')
    assert logged(d)[0] == {"s": "a\ufffdb", "\ufffd": 1}
    # pydantic's converter writes one in a dict key as its three (not UTF-8) bytes
    d = check(tmp_path, {"\ud800": 1}, b'{"\xed\xa0\x80": 1}')
    assert logged(d)[0] == {"\ufffd": 1}


def test_a_restarted_exporter_continues_a_log_holding_1e16(tmp_path):
    """The defect: the exporter stopped appending to a log with 1e16 on it, for good."""
    events = carrying(b'{"v8": 1e16}')
    runs = tmp_path / "runs"
    export_history(SID, events[:1], runs)  # RUN_CREATED holds 1e16; then a restart
    assert b'"v8":10000000000000000' in lines_of(runs / SID)[0]
    assert export_history(SID, events, runs).written > 1
    full = tmp_path / "full"
    export_history(SID, events, full)
    assert tree(runs / SID) == tree(full / SID)


# -- the property ------------------------------------------------------------------------

scalars = (st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False,
           allow_infinity=False) | st.sampled_from([1e16, -0.0, 5e-324, 2.0**53, 1e21])
           | st.text(st.characters(codec="utf-8")))
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(st.text(max_size=3), inner, max_size=3), max_leaves=12)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow,
          HealthCheck.function_scoped_fixture])
@given(value=values)
def test_any_json_value_round_trips_through_the_exporter(tmp_path, value):
    check(tmp_path, value)


@given(value=values)
def test_read_json_reads_back_what_jcs_wrote(value):
    logged = jsonable(value)
    assert read_json(jcs(logged)) == logged
    assert jcs(read_json(jcs(logged))) == jcs(logged)


# -- end to end on the dev server ---------------------------------------------------------

async def test_a_tool_call_argument_of_1e16_round_trips_on_the_dev_server(dev_env, tmp_path):
    """The reproduction from the issue: a scripted tool call with ``"v8": 1e16`` (and
    the other edge values); the log verifies, and ``log export`` works again and
    again (before: IntegerDomainError on reading it back)."""
    tq = f"tq-num-{uuid.uuid4().hex[:8]}"
    cfg = SessionConfig.model_validate({"initial_message": "go", "mode": "auto", "agent": {
        "llm": {"provider": "scripted", "responses": [
            {"tool_calls": [{"tool": "list_notes", "arguments": EDGE}]},
            {"text": "done", "end": True}]},
        "tools": [notes_server(tmp_path / "notes")]}})
    async with running_worker(dev_env.client, tq):
        h = await start_session(dev_env.client, cfg, tq)
        await h.result()
    runs = tmp_path / "runs"
    first = await export_session(dev_env.client, h.id, runs)
    assert first.finished
    d = runs / h.id
    body = (d / "events.ndjson").read_bytes()
    for part in EDGE_LOGGED:
        assert part in body, part
    assert cli_verify(d)[0] == 0
    assert README_VERIFY(d) == first.last_seq
    before = tree(d)
    again = await export_session(dev_env.client, h.id, runs)  # a second export: a restart
    assert again.written == 0 and tree(d) == before
    shutil.rmtree(d)
    await export_session(dev_env.client, h.id, runs)
    assert tree(d) == before


# -- snapshot.json: JCS with an indent -----------------------------------------------------

def test_snapshot_json_writes_values_as_jcs_does_with_an_indent():
    """README, "Durability": the bytes of snapshot.json, for values a person's answer
    can put there (before: Python's float repr, 1e+16, and code point key order)."""
    snap = {"b": [read_json(b"10000000000000000"), 1e-7, 0.5], "a": {"\ue000": 1, "😀": {}},
            "c": [], "d": "é\n"}
    assert snapshot_bytes(snap) == (
        '{\n  "a": {\n    "😀": {},\n    "\ue000": 1\n  },\n  "b": [\n    10000000000000000,'
        '\n    1e-7,\n    0.5\n  ],\n  "c": [],\n  "d": "é\\n"\n}\n').encode()


@given(value=values)
def test_snapshot_json_reads_back_as_the_value(value):
    logged = read_json(jcs(jsonable(value)))
    data = snapshot_bytes({"answer": logged})
    assert jcs(read_json(data)) == jcs({"answer": logged})
    if plain(logged):
        assert data == (json.dumps({"answer": logged}, indent=2, sort_keys=True,
                                   ensure_ascii=False) + "\n").encode()
