"""Verification of a log directory: EVENT_CHAIN_BROKEN with the line number on every
kind of damage, and verify never changes a file."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest
import rfc8785

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


def test_the_readme_recipe_verifies_the_log_independently(log_dir):
    """The few lines in observation/exporter/README.md, run as written (and mirrored
    here, so a change to the recipe must be a change to this test)."""
    readme = (Path(__file__).parents[2] / "observation/exporter/README.md").read_text()
    recipe = readme.split("```python\n", 1)[1].split("```", 1)[0]
    assert "hitlflow-log-v2" in recipe and "event_id\"] + event[\"ts\"]" in recipe
    prev = prev_line = "0" * 64
    n = 0
    for n, line in enumerate(lines_of(log_dir), 1):
        event = json.loads(line)
        assert rfc8785.dumps(event) + b"\n" == line and event["log_version"] == 2
        seed = (event["event_id"] + event["ts"] + event["type"]
                + rfc8785.dumps(event["payload"]).decode() + event["prev_hash"])
        assert hashlib.sha256(seed.encode()).hexdigest() == event["event_hash"]
        body = {k: v for k, v in event.items() if k != "line_hash"}
        digest = hashlib.sha256(b"hitlflow-log-v2\n" + prev_line.encode() + b"\n"
                                + rfc8785.dumps(body)).hexdigest()
        assert digest == event["line_hash"] and event["prev_hash"] == prev
        assert event["seq"] == n
        prev, prev_line = event["event_hash"], digest
    head = json.loads((log_dir / "head").read_text())
    assert (head["last_seq"], head["last_hash"]) == (n, prev)
    cwd = os.getcwd()
    try:
        os.chdir(log_dir)
        exec(compile(recipe, "README recipe", "exec"), {})
    finally:
        os.chdir(cwd)


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
