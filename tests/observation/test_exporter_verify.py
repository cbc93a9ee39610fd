"""Verification of a log directory: EVENT_CHAIN_BROKEN with the line number on every
kind of damage, and verify never changes a file."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
import rfc8785

from observation.exporter import (
    ChainBrokenError,
    LogCorruptError,
    LogWriter,
    export_history,
    line_hash,
    seed_hash,
    verify_dir,
)
from observation.exporter.decode import load_history

HISTORIES = Path(__file__).parents[1] / "workflows" / "histories"


def tree(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory) -> Path:
    sid, events = load_history((HISTORIES / "demo.json").read_text())
    runs = tmp_path_factory.mktemp("runs")
    export_history(sid, events, runs)
    return runs / sid


@pytest.fixture
def log_dir(demo_dir: Path, tmp_path: Path) -> Path:
    d = tmp_path / demo_dir.name
    shutil.copytree(demo_dir, d)
    return d


def lines_of(d: Path) -> list[bytes]:
    return (d / "events.ndjson").read_bytes().splitlines(keepends=True)


def write_lines(d: Path, lines: list[bytes]) -> None:
    (d / "events.ndjson").write_bytes(b"".join(lines))


def broken(d: Path) -> ChainBrokenError:
    before = tree(d)
    with pytest.raises(ChainBrokenError) as info:
        verify_dir(d)
    assert tree(d) == before, "verify changed a file"
    assert str(info.value).startswith(info.value.code)
    return info.value


def test_an_intact_log_verifies(log_dir):
    v = verify_dir(log_dir)
    assert v.events == len(lines_of(log_dir)) == 89


def test_a_flipped_byte_anywhere_breaks_the_chain_at_its_line(log_dir):
    data = (log_dir / "events.ndjson").read_bytes()
    starts = [0] + [i + 1 for i, b in enumerate(data) if b == 0x0A]
    positions = sorted({0, len(data) - 1, *range(7, len(data), 211)})
    for pos in positions:
        flipped = bytearray(data)
        flipped[pos] ^= 0x01
        (log_dir / "events.ndjson").write_bytes(bytes(flipped))
        line = max(i for i, s in enumerate(starts, 1) if s <= pos)
        assert broken(log_dir).line == line, pos
    (log_dir / "events.ndjson").write_bytes(data)
    verify_dir(log_dir)


def test_a_deleted_line_is_found(log_dir):
    lines = lines_of(log_dir)
    for k in (1, 2, 40, len(lines) - 1, len(lines)):
        write_lines(log_dir, lines[: k - 1] + lines[k:])
        err = broken(log_dir)
        assert err.line == k, k


def test_reordered_lines_are_found(log_dir):
    lines = lines_of(log_dir)
    for k in (1, 30, len(lines) - 1):
        swapped = list(lines)
        swapped[k - 1], swapped[k] = swapped[k], swapped[k - 1]
        write_lines(log_dir, swapped)
        assert broken(log_dir).line == k


def test_a_truncated_tail_fails_against_the_head(log_dir):
    lines = lines_of(log_dir)
    for cut in (1, 10, len(lines)):
        write_lines(log_dir, lines[:-cut])
        err = broken(log_dir)
        assert err.line == len(lines) - cut + 1
        assert "lost from the tail" in err.reason


def test_a_torn_last_line_and_garbage_are_reported(log_dir):
    lines = lines_of(log_dir)
    write_lines(log_dir, [*lines[:-1], lines[-1][:40]])
    assert "torn" in broken(log_dir).reason
    write_lines(log_dir, [*lines[:5], b"not json\n", *lines[6:]])
    err = broken(log_dir)
    assert err.line == 6 and "not JSON" in err.reason


def test_a_line_appended_after_the_head_is_reported(log_dir):
    lines = lines_of(log_dir)
    last = json.loads(lines[-1])
    run, event, _ = last["event_id"].split(":")
    extra = {**last, "seq": last["seq"] + 1, "prev_hash": last["event_hash"],
             "event_id": f"{run}:{int(event) + 1}:0"}
    extra.pop("line_hash")
    extra["event_hash"] = seed_hash(extra)
    extra["line_hash"] = line_hash(extra, last["line_hash"])
    write_lines(log_dir, [*lines, rfc8785.dumps(extra) + b"\n"])
    err = broken(log_dir)
    assert err.line == len(lines) + 1 and "goes on to line" in err.reason


def test_a_missing_or_wrong_head_is_reported(log_dir):
    head = (log_dir / "head").read_bytes()
    (log_dir / "head").unlink()
    err = broken(log_dir)
    assert err.line is None and "head is missing" in err.reason
    (log_dir / "head").write_bytes(head.replace(b'"last_hash": "', b'"last_hash": "0'))
    err = broken(log_dir)
    assert err.line == 89 and "last_hash" in err.reason
    (log_dir / "head").write_bytes(b"{not json")
    assert "not a valid head" in broken(log_dir).reason
    (log_dir / "head").write_bytes(head)
    snap = json.loads((log_dir / "snapshot.json").read_text())
    snap["head"]["last_seq"] -= 1
    (log_dir / "snapshot.json").write_text(json.dumps(snap))
    assert "snapshot.json says last_seq" in broken(log_dir).reason


def test_a_changed_artifact_is_reported(log_dir):
    art = next((log_dir / "artifacts" / "tool").iterdir())
    art.write_bytes(art.read_bytes() + b" ")
    err = broken(log_dir)
    assert err.code == "ARTIFACT_MISMATCH" and art.name in err.reason
    art.unlink()
    assert broken(log_dir).code == "ARTIFACT_MISMATCH"


# -- what each field must be (a forger who recomputes every hash, head and snapshot) ----


def forge(d: Path, edit) -> None:
    """Rewrite the log as ``edit(events)`` with every hash, ``seq``, the head and the
    snapshot's head recomputed: only the checks of what fields mean can see it."""
    events = edit([json.loads(x) for x in lines_of(d)])
    prev = prev_line = "0" * 64
    out = []
    for n, e in enumerate(events, 1):
        e = {**e, "seq": n, "prev_hash": prev}
        e.pop("line_hash")
        e["event_hash"] = seed_hash(e)
        e["line_hash"] = line_hash(e, prev_line)
        prev, prev_line = e["event_hash"], e["line_hash"]
        out.append(rfc8785.dumps(e) + b"\n")
    write_lines(d, out)
    head = {"last_hash": prev, "last_seq": len(out)}
    (d / "head").write_text(json.dumps(head, indent=2, sort_keys=True) + "\n")
    snap = json.loads((d / "snapshot.json").read_text())
    (d / "snapshot.json").write_text(json.dumps({**snap, "head": head}, indent=2,
                                                sort_keys=True) + "\n")


def edit_line(k: int, **fields):
    def edit(events):
        events[k - 1] = {**events[k - 1], **fields}
        return events
    return edit


def test_a_forged_rewrite_that_changes_nothing_verifies(log_dir):
    before = lines_of(log_dir)
    forge(log_dir, lambda events: events)
    assert lines_of(log_dir) == before and verify_dir(log_dir).events == 89


def test_a_line_of_another_session_is_refused(log_dir):
    forge(log_dir, edit_line(30, run_id="s-another"))
    err = broken(log_dir)
    assert err.line == 30 and "run_id 's-another' is not this directory's session" in err.reason


def test_a_log_copied_under_another_sessions_directory_is_refused(log_dir, tmp_path):
    other = tmp_path / "runs" / "s-0ther5e55i0n"
    shutil.copytree(log_dir, other)
    err = broken(other)
    assert err.line == 1 and "is not this directory's session 's-0ther5e55i0n'" in err.reason
    with pytest.raises(LogCorruptError, match="line 1: run_id"):  # nor is it continued
        LogWriter(other).open()


def test_a_wrong_trace_id_is_refused(log_dir):
    forge(log_dir, edit_line(12, trace_id="e" * 32))
    err = broken(log_dir)
    assert err.line == 12 and "trace_id 'eeee" in err.reason


@pytest.mark.parametrize("ts", ["2026-11-22 15:24:14.395957Z", "2026-11-22T15:24:14Z",
                                "2026-11-22T15:24:14.395957+00:00", "2026-02-30T15:24:14.395957Z",
                                "2026-11-22T25:24:14.395957Z", "yesterday", ""])
def test_a_malformed_ts_is_refused(log_dir, ts):
    forge(log_dir, edit_line(20, ts=ts))
    err = broken(log_dir)
    assert err.line == 20 and f"ts {ts!r} is not ISO 8601 UTC" in err.reason


def test_a_repeated_event_id_is_refused(log_dir):
    events = [json.loads(x) for x in lines_of(log_dir)]
    forge(log_dir, edit_line(41, event_id=events[39]["event_id"]))
    err = broken(log_dir)
    assert err.line == 41 and "repeats line 40's" in err.reason


def test_an_event_id_seen_lines_before_is_refused(log_dir):
    events = [json.loads(x) for x in lines_of(log_dir)]
    forge(log_dir, edit_line(50, event_id=events[9]["event_id"]))
    err = broken(log_dir)
    assert err.line == 50 and "goes back from line 49's" in err.reason


def test_a_copied_line_rechained_is_refused(log_dir):
    forge(log_dir, lambda events: [*events[:60], events[59], *events[60:]])
    err = broken(log_dir)
    assert err.line == 61 and "repeats line 60's" in err.reason


@pytest.mark.parametrize("event_id,why", [
    ("no-colons", "is not <Temporal run id>:<history event id>:<n>"),
    ("r:07:0", "is not <Temporal run id>"),
    ("{run}:{event}:5", "n counts 0, 1"),
    ("other-run:{event}:0", "a new Temporal run without"),
])
def test_an_event_id_not_from_history_is_refused(log_dir, event_id, why):
    run, event, _ = json.loads(lines_of(log_dir)[69])["event_id"].split(":")
    forge(log_dir, edit_line(70, event_id=event_id.format(run=run, event=int(event) + 1)))
    err = broken(log_dir)
    assert err.line == 70 and why in err.reason


def test_spans_must_be_the_sessions(log_dir):
    original = lines_of(log_dir)
    events = [json.loads(x) for x in original]
    root = events[0]["span_id"]
    child = next(n for n, e in enumerate(events, 1) if e["parent_span_id"] is not None)
    for k, fields, why in [(3, {"parent_span_id": root}, "only the session's span"),
                           (child, {"parent_span_id": None}, "only the session's span"),
                           (child, {"span_id": "XYZ"}, "16 lowercase hex")]:
        write_lines(log_dir, original)
        forge(log_dir, edit_line(k, **fields))
        err = broken(log_dir)
        assert err.line == k and why in err.reason, (k, fields)


def test_the_log_starts_with_its_sessions_run_created(log_dir):
    forge(log_dir, lambda events: events[1:])
    err = broken(log_dir)
    assert err.line == 1 and "not the RUN_CREATED of session" in err.reason


def test_an_llm_artifact_must_hash_to_its_output_hash(log_dir):
    """A forger who edits the model's answer and its ARTIFACT_WRITTEN line (sha256,
    size), re-chaining the rest: LLM_CALL_FINISHED.output_hash still says the truth."""
    events = [json.loads(x) for x in lines_of(log_dir)]
    k, art = next((n, e) for n, e in enumerate(events, 1) if e["type"] == "ARTIFACT_WRITTEN"
                  and e["payload"]["schema_id"] == "hitlflow/llm_output/v1")
    path = log_dir / art["payload"]["path"]
    forged = path.read_bytes().replace(b"groceries", b"vacation")
    assert forged != path.read_bytes()
    path.write_bytes(forged)
    payload = {**art["payload"], "sha256": hashlib.sha256(forged).hexdigest(),
               "size": len(forged)}
    forge(log_dir, edit_line(k, payload=payload))
    err = broken(log_dir)
    assert err.code == "ARTIFACT_MISMATCH" and err.line == k
    assert "is not the output_hash of LLM_CALL_FINISHED on line" in err.reason


@pytest.mark.parametrize("call_id", [["a", "list"], {"a": "dict"}, None, 7])
def test_an_llm_call_id_that_is_not_a_string_is_an_answer(log_dir, call_id):
    """A forged call id that is no string (a list cannot even be a dict key): the LLM
    artifact then follows no LLM_CALL_FINISHED of its call, an answer, not a crash."""
    events = [json.loads(x) for x in lines_of(log_dir)]
    k = next(n for n, e in enumerate(events, 1) if e["type"] == "LLM_CALL_FINISHED")
    art = next(n for n, e in enumerate(events, 1) if n > k and e["type"] == "ARTIFACT_WRITTEN"
               and e["payload"]["schema_id"] == "hitlflow/llm_output/v1")
    forge(log_dir, edit_line(k, payload={**events[k - 1]["payload"], "call_id": call_id}))
    err = broken(log_dir)
    assert (err.code, err.line) == ("ARTIFACT_MISMATCH", art)
    assert "follows no LLM_CALL_FINISHED of that call" in err.reason
    forge(log_dir, edit_line(art, payload={**events[art - 1]["payload"], "call_id": call_id}))
    err = broken(log_dir)  # both forged alike: still no call of that id
    assert (err.code, err.line) == ("ARTIFACT_MISMATCH", art)


# -- the canonical form, whichever way it is checked (fast C path or rfc8785) ----------


def raw_last_line(d: Path, payload: bytes) -> None:
    """The last line with ``payload`` as its raw JSON text, both hashes computed over
    the bytes as written (a forger's non-canonical line whose hashes match), the head
    and snapshot following it."""
    lines = lines_of(d)
    prev = json.loads(lines[-2])
    e = json.loads(lines[-1])
    e["payload"] = {"v": "MARK"}
    line = rfc8785.dumps(e).replace(b'{"v":"MARK"}', payload)
    seed = (e["event_id"] + e["ts"] + e["type"]).encode() + payload + e["prev_hash"].encode()
    event_hash = hashlib.sha256(seed).hexdigest()
    line = line.replace(e["event_hash"].encode(), event_hash.encode())
    i = line.index(b',"line_hash":"')
    body = line[:i] + line[i + 79:]
    digest = hashlib.sha256(b"hitlflow-log-v2\n" + prev["line_hash"].encode() + b"\n"
                            + body).hexdigest()
    write_lines(d, [*lines[:-1], line.replace(e["line_hash"].encode(), digest.encode())
                    + b"\n"])
    head = {"last_hash": event_hash, "last_seq": len(lines)}
    (d / "head").write_text(json.dumps(head, indent=2, sort_keys=True) + "\n")
    snap = json.loads((d / "snapshot.json").read_text())
    (d / "snapshot.json").write_text(json.dumps({**snap, "head": head}, indent=2,
                                                sort_keys=True) + "\n")


@pytest.mark.parametrize("payload", [
    b'{"v":0.5}', b'{"v":1e-7}', b'{"v":1e+21}', b'{"v":123.456}', b'{"v":-2}',
    '{"v":"caf\u00e9 \U0001f600"}'.encode(), '{"a\ue000":1,"b":2}'.encode(),
    b'{"v":"tab\\there \\u001f"}',
    '{"\U0001f600":2,"\ue000":1}'.encode(),  # UTF-16 order: D83D before E000
])
def test_a_canonical_payload_verifies_whichever_path_checks_it(log_dir, payload):
    raw_last_line(log_dir, payload)
    assert verify_dir(log_dir).events == 89


@pytest.mark.parametrize("payload,why", [
    (b'{"v":5.0}', "canonical form"), (b'{"v":1e-07}', "canonical form"),
    (b'{"v":1E21}', "canonical form"), (b'{"v":0.50}', "canonical form"),
    (b'{"v":-0}', "canonical form"), (b'{"v": 1}', "canonical form"),
    (b'{"b":1,"a":2}', "canonical form"), (b'{"v":"\\u0041"}', "canonical form"),
    ('{"\ue000":1,"\U0001f600":2}'.encode(), "canonical form"),  # code point order
    (b'{"v":"\\/"}', "canonical form"), (b'{"v":"\\u001F"}', "canonical form"),
    (b'{"v":NaN}', "not JSON"), (b'{"v":Infinity}', "not JSON"),
    (b'{"v":"\\ud800"}', "non-UTF-8 codepoints"),
    (b'{"v":"\xed\xa0\x80"}', "not JSON"),  # a UTF-8-encoded lone surrogate
])
def test_a_non_canonical_payload_with_matching_hashes_is_refused(log_dir, payload, why):
    raw_last_line(log_dir, payload)
    err = broken(log_dir)
    assert err.line == 89 and why in err.reason, err.reason


# -- any bytes on disk: an answer, never a crash ----------------------------------------

def rechained(lines: list[bytes], k: int, event: dict) -> list[bytes]:
    """Line ``k`` (1-based) replaced by ``event`` with its hashes recomputed, and every
    later line re-linked: a log only the content of line ``k`` can fail."""
    out = list(lines[: k - 1])
    prev = json.loads(out[-1]) if out else None
    for n, e in enumerate([event] + [json.loads(x) for x in lines[k:]], k):
        e = {**e, "seq": n, "prev_hash": prev["event_hash"] if prev else "0" * 64}
        e.pop("line_hash")
        e["event_hash"] = seed_hash(e)
        e["line_hash"] = line_hash(e, prev["line_hash"] if prev else "0" * 64)
        out.append(rfc8785.dumps(e) + b"\n")
        prev = e
    return out


def canonical_with(line: bytes, field: str, value: object) -> bytes:
    return rfc8785.dumps({**json.loads(line), field: value}) + b"\n"


BAD_LINES = {
    "not JSON": lambda line: b"not json\n",
    "a line cut short": lambda line: line[:60] + b"\n",
    "invalid UTF-8": lambda line: line.replace(b'"type":"', b'"type":"\xff\xfe', 1),
    "an integer beyond 2**53 that is no double's JCS form":
        lambda line: line.replace(b'"payload":{', b'"payload":{"n":12345678901234567890,', 1),
    "a number beyond the doubles": lambda line: line.replace(b'"payload":{', b'"payload":{'
                                                             b'"n":1e400,', 1),
    "NaN": lambda line: line.replace(b'"payload":{', b'"payload":{"n":NaN,', 1),
    "an escaped lone surrogate": lambda line: line.replace(b'"payload":{',
                                                           b'"payload":{"s":"\\ud800",', 1),
    "deep nesting": lambda line: line.replace(b'"payload":{', b'"payload":{"n":'
                                              + b"[" * 100_000 + b"]" * 100_000 + b",", 1),
    "event_id a number": lambda line: canonical_with(line, "event_id", 5),
    "prev_hash null": lambda line: canonical_with(line, "prev_hash", None),
    "payload a list": lambda line: canonical_with(line, "payload", []),
    "seq a string": lambda line: canonical_with(line, "seq", "5"),
    "seq true": lambda line: canonical_with(line, "seq", True),
}


@pytest.mark.parametrize("why", sorted(BAD_LINES))
def test_a_bad_line_gets_an_answer_never_a_traceback(log_dir, why):
    """verify_dir, ``hitlflow log verify`` and an exporter opening the log: each
    answers EVENT_CHAIN_BROKEN at line 5 (before: IntegerDomainError, RecursionError,
    TypeError... for some of these)."""
    from typer.testing import CliRunner

    from observation.exporter import LogCorruptError, LogWriter
    from tests.support.cli import log_app

    lines = lines_of(log_dir)
    write_lines(log_dir, [*lines[:4], BAD_LINES[why](lines[4]), *lines[5:]])
    assert broken(log_dir).line == 5
    r = CliRunner().invoke(log_app(), ["log", "verify", str(log_dir)])
    assert r.exit_code == 1 and "EVENT_CHAIN_BROKEN: line 5: " in r.output, r.exception
    with pytest.raises(LogCorruptError, match="line 5"):
        LogWriter(log_dir).open()


def test_an_artifact_line_without_a_path_is_an_answer(log_dir):
    lines = lines_of(log_dir)
    k = next(n for n, x in enumerate(lines, 1) if b'"ARTIFACT_WRITTEN"' in x)
    for payload in ({}, {"path": 5, "sha256": "x"}, {"path": "artifacts/\x00", "sha256": "x"}):
        event = {**json.loads(lines[k - 1]), "payload": payload}
        new = rechained(lines, k, event)
        write_lines(log_dir, new)
        head = {"last_hash": json.loads(new[-1])["event_hash"], "last_seq": len(new)}
        (log_dir / "head").write_text(json.dumps(head, indent=2, sort_keys=True) + "\n")
        err = broken(log_dir)
        assert (err.line, err.code) == (k, "ARTIFACT_MISMATCH"), payload
