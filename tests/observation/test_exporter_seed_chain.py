"""Seed 003's binding chain rule, checked by a verifier written from the seed's
sentence alone, on real logs (exported from the saved histories); and the format
versions: a v1 log (written before) still verifies and is continued in v1, never
mixed with v2 lines."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
import rfc8785

from observation.exporter import (
    Chain,
    ChainBrokenError,
    LogCorruptError,
    LogError,
    LogWriter,
    export_history,
    map_history,
    verify_dir,
)
from observation.exporter.decode import load_history
from tests.support.audit_log import readme_verifier

HISTORIES = Path(__file__).parents[1] / "workflows" / "histories"
NAMES = sorted(p.stem for p in HISTORIES.glob("*.json"))


def seed_verifier(lines: list[bytes]) -> int:
    """Seed 003, "Validate Chain": event_hash = sha256(event_id + ts + type + payload +
    prev_hash) (UTF-8 strings, payload as RFC 8785 JSON); prev_hash = the previous
    event's event_hash. Written from that sentence alone: no hitlflow code."""
    prev = None
    for n, line in enumerate(lines, 1):
        e = json.loads(line)
        text = (e["event_id"] + e["ts"] + e["type"] + rfc8785.dumps(e["payload"]).decode()
                + e["prev_hash"])
        if hashlib.sha256(text.encode("utf-8")).hexdigest() != e["event_hash"]:
            raise AssertionError(f"EVENT_CHAIN_BROKEN: line {n}: event_hash")
        if prev is not None and e["prev_hash"] != prev:
            raise AssertionError(f"EVENT_CHAIN_BROKEN: line {n}: prev_hash")
        prev = e["event_hash"]
    return len(lines)


def lines_of(d: Path) -> list[bytes]:
    return (d / "events.ndjson").read_bytes().splitlines(keepends=True)


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> dict[str, Path]:
    runs = tmp_path_factory.mktemp("runs")
    out = {}
    for name in NAMES:
        sid, events = load_history((HISTORIES / f"{name}.json").read_text())
        export_history(sid, events, runs)
        out[name] = runs / sid
    return out


@pytest.mark.parametrize("name", NAMES)
def test_real_logs_verify_by_the_seeds_own_rule(exported, name):
    d = exported[name]
    lines = lines_of(d)
    assert seed_verifier(lines) == len(lines) > 10
    assert json.loads(lines[0])["prev_hash"] == "0" * 64
    assert {json.loads(x)["log_version"] for x in lines} == {2}
    v = verify_dir(d)
    assert (v.events, v.log_version) == (len(lines), 2)


def test_the_seed_verifier_rejects_an_edited_payload(exported, tmp_path):
    lines = lines_of(exported["demo"])
    e = json.loads(lines[3])
    e["payload"] = {**e["payload"], "edited": True}
    with pytest.raises(AssertionError, match="line 4: event_hash"):
        seed_verifier([*lines[:3], rfc8785.dumps(e) + b"\n", *lines[4:]])


@pytest.mark.parametrize("field,value", [("seq", 999), ("run_id", "other"),
                                         ("span_id", "f" * 16), ("parent_span_id", "a" * 16),
                                         ("trace_id", "e" * 32)])
def test_an_envelope_field_outside_the_seeds_five_is_covered_by_line_hash(
        exported, tmp_path, field, value):
    """The seed's hash leaves seq, run_id and the span ids out: line_hash catches them."""
    d = tmp_path / "log" / exported["demo"].name  # runs/<session_id>/
    shutil.copytree(exported["demo"], d)
    lines = lines_of(d)
    e = json.loads(lines[4])
    assert e[field] != value
    e[field] = value
    lines[4] = rfc8785.dumps(e) + b"\n"
    (d / "events.ndjson").write_bytes(b"".join(lines))
    assert seed_verifier(lines) == len(lines)  # the seed's rule alone cannot see it
    with pytest.raises(ChainBrokenError) as info:
        verify_dir(d)
    assert info.value.line == 5 and "line_hash" in info.value.reason


def test_line_hash_chains_so_a_recomputed_line_breaks_the_next(exported, tmp_path):
    from observation.exporter import line_hash

    d = tmp_path / "log" / exported["demo"].name
    shutil.copytree(exported["demo"], d)
    lines = lines_of(d)
    prev_line = json.loads(lines[4])["line_hash"]
    e = json.loads(lines[5])  # an LLM call's line (its span has a parent)
    e["span_id"] = "f" * 16
    del e["line_hash"]
    e["line_hash"] = line_hash(e, prev_line)
    lines[5] = rfc8785.dumps(e) + b"\n"
    (d / "events.ndjson").write_bytes(b"".join(lines))
    with pytest.raises(ChainBrokenError) as info:
        verify_dir(d)
    assert info.value.line == 7 and "line_hash" in info.value.reason


# -- format v1: logs written before -----------------------------------------------------

def write_v1(run_dir: Path, sid: str, events, upto: int | None = None) -> None:
    """A log as the v1 exporter wrote it (the first ``upto`` events)."""
    chain = Chain(version=1)
    with LogWriter(run_dir) as w:
        for m in list(map_history(sid, events))[:upto]:
            w.append(chain.link(m), m.artifact)
        w.commit()


def v1_outside_verifier(lines: list[bytes]) -> None:
    """v1's recipe (observation/exporter/README.md, "Format v1")."""
    prev = "0" * 64
    for n, line in enumerate(lines, 1):
        event = json.loads(line)
        assert rfc8785.dumps(event) + b"\n" == line
        body = {k: v for k, v in event.items() if k != "event_hash"}
        digest = hashlib.sha256(b"hitlflow-log-v1\n" + rfc8785.dumps(body)).hexdigest()
        assert digest == event["event_hash"] and event["prev_hash"] == prev
        assert event["seq"] == n
        prev = digest


def test_a_v1_log_still_verifies_and_is_continued_in_v1(tmp_path):
    sid, events = load_history((HISTORIES / "demo.json").read_text())
    full = tmp_path / "full" / sid
    write_v1(full, sid, events)
    v = verify_dir(full)
    assert v.log_version == 1 and v.events == 89
    v1_outside_verifier(lines_of(full))
    assert "log_version" not in json.loads(lines_of(full)[0])
    # A restarted (v2) exporter finds 40 v1 lines: it continues them in v1.
    part = tmp_path / "runs" / sid
    write_v1(part, sid, events, upto=40)
    result = export_history(sid, events, tmp_path / "runs")
    assert result.written == 49
    assert lines_of(part) == lines_of(full)
    assert (part / "head").read_bytes() == (full / "head").read_bytes()
    assert (part / "snapshot.json").read_bytes() == (full / "snapshot.json").read_bytes()
    # ... and again: nothing to add, the same bytes.
    assert export_history(sid, events, tmp_path / "runs").written == 0
    assert lines_of(part) == lines_of(full)


def test_a_v1_log_gets_no_v2_line(tmp_path):
    sid, events = load_history((HISTORIES / "demo.json").read_text())
    d = tmp_path / sid
    write_v1(d, sid, events, upto=10)
    mapped = list(map_history(sid, events))
    v2 = Chain(version=2)
    v2_lines = [v2.link(m) for m in mapped[:11]]
    with LogWriter(d) as w, pytest.raises(LogError, match="mixed file"):
        w.append(v2_lines[10])
    assert verify_dir(d).events == 10


def test_a_mixed_file_is_refused_by_verify_and_by_the_exporter(exported, tmp_path):
    sid, events = load_history((HISTORIES / "demo.json").read_text())
    d = tmp_path / sid
    write_v1(d, sid, events, upto=10)
    v2 = lines_of(exported["demo"])[10]
    (d / "events.ndjson").write_bytes((d / "events.ndjson").read_bytes() + v2)
    with pytest.raises(ChainBrokenError) as info:
        verify_dir(d)
    assert info.value.line == 11 and "v2 line in a v1 log" in info.value.reason
    with pytest.raises(LogCorruptError, match="v2 line in a v1 log"):
        export_history(sid, events, tmp_path)


# -- the README's outside verifier, as printed, agrees with `hitlflow log verify` ------

def hitlflow_verify(d: Path, live: bool = False) -> bool:
    from typer.testing import CliRunner

    from tests.support.cli import log_app

    r = CliRunner().invoke(log_app(), ["log", "verify", str(d), *(["--live"] if live else [])])
    assert r.exit_code in (0, 1) and (r.exception is None or isinstance(r.exception,
                                                                       SystemExit)), r.output
    return r.exit_code == 0


def readme_verify(d: Path, live: bool = False) -> bool:
    try:
        readme_verifier()(d, live=live)
    except (AssertionError, ValueError, TypeError, KeyError, OSError):
        return False
    return True


def edited(d: Path, k: int, change) -> None:
    lines = lines_of(d)
    lines[k - 1] = change(lines[k - 1])
    (d / "events.ndjson").write_bytes(b"".join(lines))


def rehashed(change):
    """A v2 line edited, with event_hash recomputed (line_hash left as it was)."""
    from observation.exporter import seed_hash

    def edit(line: bytes) -> bytes:
        e = change(json.loads(line))
        e["event_hash"] = seed_hash(e)
        return rfc8785.dumps(e) + b"\n"
    return edit


TAMPERINGS = {
    "payload edited": lambda d: edited(d, 4, lambda x: x.replace(b'"payload":{',
                                                               b'"payload":{"x":1,', 1)),
    "event_hash recomputed, line_hash not": lambda d: edited(
        d, 5, rehashed(lambda e: {**e, "ts": e["ts"].replace("Z", "0Z")})),
    "a line deleted": lambda d: (d / "events.ndjson").write_bytes(
        b"".join(lines_of(d)[:6] + lines_of(d)[7:])),
    "the tail cut": lambda d: (d / "events.ndjson").write_bytes(b"".join(lines_of(d)[:-2])),
    "a huge integer": lambda d: edited(d, 3, lambda x: x.replace(
        b'"payload":{', b'"payload":{"n":12345678901234567890,', 1)),
    "NaN": lambda d: edited(d, 3, lambda x: x.replace(b'"payload":{', b'"payload":{"n":NaN,', 1)),
    "a lone surrogate": lambda d: edited(d, 3, lambda x: x.replace(
        b'"payload":{', b'"payload":{"s":"\\udc00",', 1)),
    "a line cut short": lambda d: edited(d, 8, lambda x: x[:50] + b"\n"),
    "not JSON": lambda d: edited(d, 2, lambda x: b"\xff not json\n"),
    "an artifact changed": lambda d: next((d / "artifacts" / "tool").iterdir()).write_bytes(b"{}"),
    "the head moved": lambda d: (d / "head").write_bytes((d / "head").read_bytes().replace(
        b'"last_seq": ', b'"last_seq": 1')),
}


@pytest.fixture(scope="module")
def logs(exported, tmp_path_factory) -> dict[str, Path]:
    """Real logs: every saved history's (v2), the demo's in v1, and one carrying the
    edge values (1e16, -0.0, 5e-324, 2**64 + 1, non-ASCII keys...) in its config and
    a tool's output."""
    from tests.support.audit_log import DEMO_SID, EDGE, carrying

    out = {f"v2 {name}": d for name, d in exported.items()}
    sid, events = load_history((HISTORIES / "demo.json").read_text())
    write_v1(tmp_path_factory.mktemp("v1") / sid, sid, events)
    out["v1 demo"] = next(tmp_path_factory.getbasetemp().glob("v1*")) / sid
    edge_runs = tmp_path_factory.mktemp("edge")
    export_history(DEMO_SID, carrying(json.dumps(EDGE).encode()), edge_runs)
    out["v2 edge values"] = edge_runs / DEMO_SID
    return out


def test_the_readme_verifier_accepts_every_real_log(logs):
    verify = readme_verifier()
    for name, d in logs.items():
        assert hitlflow_verify(d), name
        assert verify(d) == verify_dir(d).events > 10, name
    assert b'"v8":10000000000000000' in lines_of(logs["v2 edge values"])[0]


@pytest.mark.parametrize("tampering", sorted(TAMPERINGS))
@pytest.mark.parametrize("log", ["v2 demo", "v1 demo", "v2 edge values"])
def test_the_readme_verifier_rejects_what_hitlflow_rejects(logs, tmp_path, tampering, log):
    d = tmp_path / logs[log].name
    shutil.copytree(logs[log], d)
    TAMPERINGS[tampering](d)
    assert not hitlflow_verify(d)
    assert not readme_verify(d)


def test_a_log_still_being_written_is_verified_up_to_its_head(logs, tmp_path):
    """Lines past the head (a batch in flight) and a torn last line: the whole log
    fails, the log up to its head passes, in both verifiers."""
    d = tmp_path / "live" / logs["v2 edge values"].name  # runs/<session_id>/
    shutil.copytree(logs["v2 edge values"], d)
    lines = lines_of(d)
    at_rest = {n: (d / n).read_bytes() for n in ("head", "snapshot.json")}
    (d / "events.ndjson").write_bytes(b"".join(lines[:12]))  # the state at seq 12
    with LogWriter(d):  # rewrites head and snapshot.json for 12 lines
        pass
    (d / "events.ndjson").write_bytes(b"".join(lines) + lines[0][:30])  # the rest, torn
    for live, ok in ((False, False), (True, True)):
        assert hitlflow_verify(d, live) is ok and readme_verify(d, live) is ok, live
    assert readme_verifier()(d, live=True) == 12
    (d / "events.ndjson").write_bytes(b"".join(lines[:11]))  # short of the head: lost
    assert not hitlflow_verify(d, True) and not readme_verify(d, True)
    (d / "events.ndjson").write_bytes(b"".join(lines))
    for name, data in at_rest.items():
        (d / name).write_bytes(data)
    assert hitlflow_verify(d) and readme_verify(d)
