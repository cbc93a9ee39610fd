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
