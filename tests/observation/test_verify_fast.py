"""The verifier's fast path (orjson) against its reference path (``json`` read as
doubles, ``rfc8785``): the same bytes accepted, the same events yielded, the same
first error; and ``hitlflow log verify`` starting without the server side."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
import rfc8785
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from observation import event_types
from observation.exporter import ChainBrokenError, export_history
from observation.exporter import lines as line_names
from observation.exporter.chain import LINE_PREFIX, read_json
from observation.exporter.decode import load_history
from observation.exporter.verify import ORJSON_JCS, fast_line, verify_lines
from workflows.canonical import MAX_SAFE_INT

REPO = Path(__file__).resolve().parents[2]
HISTORIES = REPO / "tests" / "workflows" / "histories"

# -- generated values ---------------------------------------------------------------

#: Any text, control characters, quotes, backslashes and astral characters included
#: (no lone surrogate: orjson refuses it to write, and UTF-8 cannot carry it).
text = st.text(st.characters(exclude_categories=("Cs",)), max_size=12)
ascii_key = st.text(st.characters(max_codepoint=127), max_size=8)
safe_int = st.integers(-MAX_SAFE_INT, MAX_SAFE_INT)
#: What the fast path takes: strings, booleans, null, safe integers, ASCII keys, nested.
plain_value = st.recursive(
    st.none() | st.booleans() | safe_int | text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(ascii_key, inner, max_size=4),
    max_leaves=20)
#: Anything JSON carries: floats, big integers, keys at and above U+E000 beside
#: astral ones (where UTF-16 order and code point order differ).
edge_float = st.sampled_from([1e16, 1e21, 1e-7, 5e-324, -0.0, 1.0, 0.5, 2.0**53, 1e300,
                              123.456, 1.7976931348623157e308])
any_value = st.recursive(
    st.none() | st.booleans() | st.integers() | text
    | st.floats(allow_nan=False, allow_infinity=False) | edge_float,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        text | st.sampled_from(["\ue000", "\U0001f600", "é", "a"]), inner, max_size=4),
    max_leaves=20)


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(plain_value)
def test_orjson_writes_what_rfc8785_writes_for_the_fast_paths_values(value):
    assert orjson.dumps(value, option=ORJSON_JCS) == rfc8785.dumps(value)


# -- generated lines ----------------------------------------------------------------

SID, DEMO = load_history((HISTORIES / "demo.json").read_text())


def with_payload(template: bytes, payload: object) -> dict:
    return {**json.loads(template), "payload": payload}


def forged(event: dict, write, prev_line: str) -> tuple[bytes, str, str]:
    """``event`` written by ``write``, both hashes taken over the bytes as written (as
    the verifier takes them: slices of the line), as a forger would: only the
    canonical-form check can refuse it. Returns the line, its event_hash, line_hash."""
    e = {**event, "event_hash": "e" * 64, "line_hash": "f" * 64}
    line = write(e)
    i, j = line.find(b',"payload":') + 11, line.rfind(b',"prev_hash":"')
    seed = (e["event_id"] + e["ts"] + e["type"]).encode() + line[i:j] + e["prev_hash"].encode()
    event_hash = hashlib.sha256(seed).hexdigest()
    line = line.replace(b"e" * 64, event_hash.encode())
    k = line.find(b',"line_hash":"')
    body = line[:k] + line[k + 79:]
    digest = hashlib.sha256(LINE_PREFIX + prev_line.encode() + b"\n" + body).hexdigest()
    return line.replace(b"f" * 64, digest.encode()) + b"\n", event_hash, digest


#: Ways a line's bytes can be written: the canonical one and near misses.
WRITERS = {
    "rfc8785": rfc8785.dumps,
    "orjson sorted": lambda e: orjson.dumps(e, option=orjson.OPT_SORT_KEYS),
    "json sorted": lambda e: json.dumps(e, sort_keys=True, separators=(",", ":"),
                                        ensure_ascii=False).encode(),
    "json ascii": lambda e: json.dumps(e, sort_keys=True, separators=(",", ":")).encode(),
    "json spaced": lambda e: json.dumps(e, sort_keys=True, ensure_ascii=False).encode(),
}


def reference_bytes(line: bytes) -> bytes | None:
    """What the reference path accepts as the line: JCS of the line read as doubles."""
    try:
        return rfc8785.dumps(read_json(line)) + b"\n"
    except (ValueError, rfc8785.CanonicalizationError, RecursionError):
        return None


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow,
                                                   HealthCheck.function_scoped_fixture])
@given(payload=st.dictionaries(text, any_value, max_size=4) | st.dictionaries(
    ascii_key, plain_value, max_size=4), writer=st.sampled_from(sorted(WRITERS)),
    k=st.integers(0, 88))
def test_the_fast_path_accepts_only_what_the_reference_accepts(demo_lines, payload, writer,
                                                               k):
    try:
        line = WRITERS[writer](with_payload(demo_lines[k], payload)) + b"\n"
    except (TypeError, ValueError, rfc8785.CanonicalizationError, OverflowError):
        return  # a value this writer cannot write
    obj = fast_line(line)
    event(f"{writer}: {'fast' if obj is not None else 'reference'} path")
    if obj is not None:
        assert reference_bytes(line) == line  # canonical, as RFC 8785 says
        assert obj == read_json(line)  # and read as the reference reads it
        assert [type(v) for v in obj.values()] == [type(v) for v in read_json(line).values()]


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow,
                                                   HealthCheck.function_scoped_fixture])
@given(payloads=st.lists(any_value | plain_value, min_size=1, max_size=6),
       where=st.lists(st.integers(1, 88), min_size=1, max_size=6, unique=True),
       writer=st.sampled_from(sorted(WRITERS)))
def test_verify_lines_fast_and_reference_give_the_same_answer(demo_lines, payloads, where,
                                                              writer):
    """A real log with generated payloads in some lines (each written by ``writer``,
    the chain relinked): both paths yield the same events, or stop at the same line
    with the same error."""
    lines, prev, prev_line = [], "0" * 64, "0" * 64
    changed = dict(zip(where, payloads, strict=False))
    for n, raw in enumerate(demo_lines):
        e = json.loads(raw)
        if n in changed:
            e["payload"] = {"v": changed[n]}
        e["prev_hash"] = prev
        try:
            line, prev, prev_line = forged(e, WRITERS[writer] if n in changed
                                           else rfc8785.dumps, prev_line)
        except (TypeError, ValueError, rfc8785.CanonicalizationError, OverflowError):
            line = b"a value this writer cannot write\n"
        lines.append(line)

    def run(fast: bool) -> tuple[list[dict], tuple | None]:
        out: list[dict] = []
        try:
            for event in verify_lines(lines, fast=fast):
                out.append(event)
        except ChainBrokenError as err:
            return out, (err.line, err.code, err.reason)
        return out, None

    assert run(True) == run(False)


def test_the_fast_path_takes_the_exporters_lines(demo_lines):
    """The point of it: what the exporter writes (no floats) takes the fast path."""
    assert all(fast_line(x) is not None for x in demo_lines)


@pytest.mark.parametrize("edit", [
    lambda e: {"v": 1},  # not a log line at all
    lambda e: {**e, "seq": True}, lambda e: {**e, "seq": "4"},
    lambda e: {**e, "log_version": 3}, lambda e: {**e, "payload": []},
    lambda e: {**e, "extra": 1}, lambda e: {k: v for k, v in e.items() if k != "ts"},
])
def test_an_envelope_not_as_it_must_be_is_left_to_the_reference(demo_lines, edit):
    assert fast_line(rfc8785.dumps(edit(json.loads(demo_lines[3]))) + b"\n") is None


@pytest.mark.parametrize("payload", [
    {"v": 0.5}, {"v": 1e16}, {"v": MAX_SAFE_INT + 1}, {"v": 2**64}, {"é": 1},
    {"\ue000": 1, "\U0001f600": 2},
])
def test_floats_big_integers_and_non_ascii_keys_take_the_reference_path(demo_lines, payload):
    e = with_payload(demo_lines[3], payload)
    for write in ("orjson sorted", "json sorted"):
        try:
            line = WRITERS[write](e) + b"\n"
        except TypeError:  # orjson and an integer beyond 64 bits
            continue
        assert fast_line(line) is None, write


def test_a_torn_line_ending_in_a_space_is_not_taken(demo_lines):
    """Without its newline a line is torn, whatever orjson makes of it."""
    line = demo_lines[3][:-1] + b" "
    assert fast_line(line) is None
    with pytest.raises(ChainBrokenError, match="line 4: the last line is not terminated"):
        list(verify_lines([*demo_lines[:3], line]))


def test_the_event_type_names_are_observations():
    for name in ("RUN_CREATED", "SESSION_FORKED", "RUN_CONTINUED_AS_NEW", "LLM_CALL_FINISHED",
                 "ARTIFACT_WRITTEN"):
        assert getattr(line_names, name) == getattr(event_types, name)


# -- start-up -------------------------------------------------------------------------

SERVER_SIDE = ("temporalio", "fastapi", "uvicorn", "openai", "mcp", "starlette",
               "cryptography", "observation.exporter.follower", "observation.event_types")


def test_log_verify_starts_without_the_server_side(demo_lines, tmp_path):
    """``hitlflow log verify <run dir>`` in a fresh interpreter: it verifies, and no
    module of the server side (Temporal, the HTTP API, the LLM and MCP clients) or of
    the exporter's writing half was imported."""
    runs = tmp_path / "runs"
    export_history(SID, DEMO, runs)
    d = runs / SID
    probe = (
        "import runpy, sys\n"
        f"sys.argv = ['hitlflow', 'log', 'verify', {str(d)!r}]\n"
        "try:\n"
        "    runpy.run_module('api.cli', run_name='__main__')\n"
        "except SystemExit as e:\n"
        "    assert not e.code, e.code\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        f"{SERVER_SIDE!r} or m in {SERVER_SIDE!r}))\n")
    r = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True,
                       text=True, check=False)
    assert r.returncode == 0, r.stderr
    assert "OK: 89 events, log format v2" in r.stdout
    assert r.stdout.strip().splitlines()[-1] == "[]"
