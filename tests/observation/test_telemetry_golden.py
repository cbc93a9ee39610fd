"""The telemetry projection gives the same runs, event by event, as when recorded.

``telemetry_golden.json`` holds, for every saved history, the sha256 of what the
projection reported after each log line (the ids of the runs it changed and their
store rows, RFC 8785) and of the final runs (``project``'s ``model_dump``), recorded
with the pydantic projector before the per-event path was cut (issue 28). A change
that alters a row, a run, or which runs a line changes fails here. A deliberate
change re-records it: ``.venv/bin/python -m tests.observation.test_telemetry_golden``.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest
import rfc8785

from observation.exporter import export_history
from observation.exporter.decode import load_history
from observation.telemetry import TelemetryProjector, project
from observation.telemetry.model import Run
from observation.telemetry.store import to_row

HISTORIES = Path(__file__).parents[1] / "workflows" / "histories"
GOLDEN = Path(__file__).with_name("telemetry_golden.json")
NAMES = sorted(h.stem for h in HISTORIES.glob("*.json"))


def log_lines(name: str, out: Path) -> tuple[str, list[dict]]:
    """The history's log as the exporter wrote it, read back as replay reads it."""
    sid, events = load_history((HISTORIES / f"{name}.json").read_text())
    export_history(sid, events, out / name)
    text = (out / name / sid / "events.ndjson").read_text()
    return sid, [json.loads(line) for line in text.splitlines()]


def digests(sid: str, lines: list[dict]) -> dict[str, str]:
    steps, p = hashlib.sha256(), TelemetryProjector(sid)
    for e in lines:
        changed = sorted(p.apply(e))
        steps.update(rfc8785.dumps([e["seq"], changed, [list(to_row(p.runs[r]))
                                                        for r in changed]]) + b"\n")
    final = rfc8785.dumps([r.model_dump() for r in project(sid, lines)])
    return {"steps": steps.hexdigest(), "runs": hashlib.sha256(final).hexdigest(),
            "lines": str(len(lines))}


def record(out: Path) -> dict[str, dict[str, str]]:
    return {name: digests(*log_lines(name, out)) for name in NAMES}


def test_every_saved_history_is_recorded():
    assert sorted(json.loads(GOLDEN.read_text())) == NAMES


@pytest.mark.parametrize("name", NAMES)
def test_the_projection_is_the_recorded_one_line_by_line(name, tmp_path):
    golden = json.loads(GOLDEN.read_text())[name]
    assert digests(*log_lines(name, tmp_path)) == golden


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        GOLDEN.write_text(json.dumps(record(Path(d)), indent=1, sort_keys=True) + "\n")
    sys.stdout.write(f"wrote {GOLDEN}\n")


def _run(**attributes) -> Run:
    return Run(run_id="s/x", parent_run_id=None, session_id="s", job_type="session",
               name="n", status="running", updated_at="t", ordinal=0, first_seq=1,
               last_seq=1, context_json={"trace_id": "a", "span_id": "b",
                                         "parent_span_id": None}, attributes=attributes)


ODD_VALUES = [1.5, 0.1, 1e21, -0.0, 2**53 - 1, {"é": 1}, [{"k": 2.5}], "é\u2028", "\U0001f600",
              {"a": [1, {"b": None}]}, None, True, "plain", 7, "\x00\x1f\"\\/\x7f\b\t\n",
              {"z": 1, "a": {"y": "\u00e9", "B": [False, -(2**53 - 1)]}}, ["\ufeff", ""]]


@pytest.mark.parametrize("value", ODD_VALUES, ids=repr)
def test_a_runs_cached_texts_are_rfc8785_as_values_come_and_go(value):
    """The projector's runs encode their attributes without re-walking known-plain
    values: whatever is set (floats, non-ASCII keys, big integers) and then replaced,
    the text is what rfc8785 writes for the attributes at that moment."""
    run = _run(first=value)
    assert run.texts() == (rfc8785.dumps(run.context_json).decode(),
                           rfc8785.dumps(run.attributes).decode())
    for step in ({"x": value}, {"first": "plain"}, {"x": 1}, {"é": value}, {"é": 2},
                 {"first": value}):
        run.set_attrs(step)
        assert run.texts()[1] == rfc8785.dumps(run.attributes).decode(), step
        assert to_row(run) == to_row(run.model())  # the record's row, encoded anew


@pytest.mark.parametrize("value", ["\ud800", 2**53, {"k": [-(2**60)]}], ids=repr)
def test_what_jcs_cannot_encode_is_refused_as_jcs_refuses_it(value):
    run = _run(ok=1)
    run.texts()
    run.set_attrs({"v": value})
    with pytest.raises(Exception) as got:
        run.texts()
    with pytest.raises(Exception) as want:
        rfc8785.dumps({"v": value})
    assert type(got.value) is type(want.value)
