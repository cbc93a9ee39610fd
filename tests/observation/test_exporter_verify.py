"""Verification of a log directory: EVENT_CHAIN_BROKEN with the line number on every
kind of damage, and verify never changes a file."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import rfc8785
import typer

from observation.exporter import (
    ChainBrokenError,
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
    extra = {**last, "seq": last["seq"] + 1, "prev_hash": last["event_hash"],
             "event_id": last["event_id"] + "-x"}
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

    from api import cli_log
    from observation.exporter import LogCorruptError, LogWriter

    lines = lines_of(log_dir)
    write_lines(log_dir, [*lines[:4], BAD_LINES[why](lines[4]), *lines[5:]])
    assert broken(log_dir).line == 5
    app = typer.Typer()
    app.callback()(lambda: None)
    cli_log.register(app)
    r = CliRunner().invoke(app, ["log", "verify", str(log_dir)])
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
