"""snapshot.json without a rewrite per batch (issue 28): an exporter killed with
SIGKILL between two snapshot writes leaves a snapshot behind the head; the next
start rebuilds it from the log, and ``hitlflow log replay`` reproduces it byte for
byte."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from observation.exporter import LogSnapshot, LogWriter, export_history, verify_dir
from observation.exporter.decode import load_history
from observation.exporter.verify import read_lines, verify_lines
from tests.support.cli import log_app

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "tests" / "workflows" / "histories" / "demo.json"
SID, EVENTS = load_history(DEMO.read_text())

#: An exporter that writes snapshot.json once (after 40 history events), commits
#: more batches behind it, says so, and waits to be killed.
EXPORTER = """
import sys
from pathlib import Path
from observation.exporter import LogWriter, SessionExport
from observation.exporter.decode import load_history
sid, events = load_history(Path(sys.argv[1]).read_text())
w = LogWriter(Path(sys.argv[2]) / sid).open()
w.snapshot_every_s = float("inf")  # only when asked
export = SessionExport(w, sid)
export.feed_page(events[:40])
w.write_snapshot()
for i in range(40, 70, 10):
    export.feed_page(events[i:i + 10])
print("between two snapshot writes", flush=True)
sys.stdin.read()  # killed here
"""


def tree(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> dict[str, bytes]:
    runs = tmp_path_factory.mktemp("ref")
    export_history(SID, EVENTS, runs)
    return tree(runs / SID)


def killed_exporter(runs: Path) -> Path:
    proc = subprocess.Popen([sys.executable, "-c", EXPORTER, str(DEMO), str(runs)], cwd=REPO,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "between two snapshot writes"
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait()
        proc.stdin.close()  # type: ignore[union-attr]
        proc.stdout.close()  # type: ignore[union-attr]
    assert proc.returncode == -signal.SIGKILL
    return runs / SID


def last_seq(path: Path) -> int:
    data = json.loads(path.read_bytes())
    return data.get("head", data)["last_seq"]


def test_a_kill_between_snapshot_writes_loses_nothing(tmp_path, reference):
    d = killed_exporter(tmp_path / "runs")
    # The kill came between two snapshot writes: the head is past snapshot.json.
    assert last_seq(d / "snapshot.json") < last_seq(d / "head")
    live = CliRunner().invoke(log_app(), ["log", "verify", "--live", str(d)])
    assert live.exit_code == 0, live.output
    stale = CliRunner().invoke(log_app(), ["log", "replay", "-q", str(d)])
    assert stale.exit_code == 1 and "SNAPSHOT_MISMATCH" in stale.output

    # A start without new events rebuilds it from the log.
    LogWriter(d).open().close()
    rebuilt = LogSnapshot.replay(SID, verify_lines(read_lines(d / "events.ndjson")))
    assert (d / "snapshot.json").read_bytes() == rebuilt.to_bytes()
    r = CliRunner().invoke(log_app(), ["log", "replay", "-q", str(d)])
    assert r.exit_code == 0, r.output
    verify_dir(d)

    # And the exporter carries on to the very files of one never killed.
    export_history(SID, EVENTS, tmp_path / "runs")
    assert tree(d) == reference


def test_replay_write_rebuilds_a_stale_snapshot_too(tmp_path):
    d = killed_exporter(tmp_path / "runs")
    r = CliRunner().invoke(log_app(), ["log", "replay", "--write", "-q", str(d)])
    assert r.exit_code == 0, r.output
    assert last_seq(d / "snapshot.json") == last_seq(d / "head") == verify_dir(d).events
