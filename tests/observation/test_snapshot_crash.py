"""The files at rest without a rewrite per batch (issue 28): an exporter killed with
SIGKILL between two writes of snapshot.json, head and checkpoint leaves all three
behind the log (never past it); the live checks and the read model's catch-up
accept that, the checks of a log at rest do not; the next start rebuilds them from
the log, ``hitlflow log replay`` reproduces the snapshot byte for byte, and the
next commit after history signs the whole log."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from observation.exporter import (
    ChainBrokenError,
    LogSnapshot,
    LogWriter,
    export_history,
    verify_dir,
)
from observation.exporter.checkpoint import CHECKPOINT_NAME, Checkpoint, verify_checkpoint
from observation.exporter.decode import load_history
from observation.exporter.note import Signer, open_note
from observation.exporter.verify import read_lines, verify_lines
from observation.read_model.sync import fold_log
from tests.support.cli import log_app

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "tests" / "workflows" / "histories" / "demo.json"
SID, EVENTS = load_history(DEMO.read_text())
SIGNER = Signer.generate("test.example/hitlflow")
KEY = SIGNER.verifier()

#: An exporter (its signing key on stdin) that writes the files at rest once (after 40
#: history events), commits more batches behind them, says so, and waits to be killed.
EXPORTER = """
import sys
from pathlib import Path
from observation.exporter import LogWriter, SessionExport
from observation.exporter.decode import load_history
from observation.exporter.note import Signer
signer = Signer.parse(sys.stdin.readline().strip())
sid, events = load_history(Path(sys.argv[1]).read_text())
w = LogWriter(Path(sys.argv[2]) / sid, signer=signer).open()
w.snapshot_every_s = float("inf")  # only when asked
export = SessionExport(w, sid)
export.feed_page(events[:40])
w.write_at_rest()
for i in range(40, 70, 10):
    export.feed_page(events[i:i + 10])
print("between two writes of the files at rest", flush=True)
sys.stdin.read()  # killed here
"""


def tree(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> dict[str, bytes]:
    runs = tmp_path_factory.mktemp("ref")
    export_history(SID, EVENTS, runs, signer=SIGNER)
    return tree(runs / SID)


def killed_exporter(runs: Path) -> Path:
    proc = subprocess.Popen([sys.executable, "-c", EXPORTER, str(DEMO), str(runs)], cwd=REPO,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(SIGNER.text() + "\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == "between two writes of the files at rest"
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


def signed_size(d: Path) -> int:
    return Checkpoint.parse(open_note((d / CHECKPOINT_NAME).read_bytes(), KEY)).size


def test_a_kill_between_writes_of_the_files_at_rest_loses_nothing(tmp_path, reference):
    d = killed_exporter(tmp_path / "runs")
    lines = (d / "events.ndjson").read_bytes().count(b"\n")
    # The kill came between two writes: snapshot, head and checkpoint lag the log alike.
    at_rest = last_seq(d / "snapshot.json")
    assert 0 < at_rest == last_seq(d / "head") == signed_size(d) < lines
    live = CliRunner().invoke(log_app(), ["log", "verify", "--live", str(d)])
    assert live.exit_code == 0, live.output
    with pytest.raises(ChainBrokenError, match="goes on to line"):
        verify_dir(d)  # a log at rest: its head is its end
    stale = CliRunner().invoke(log_app(), ["log", "replay", "-q", str(d)])
    assert stale.exit_code == 1 and "SNAPSHOT_MISMATCH" in stale.output
    # The read model's catch-up takes every line: the head names one of them.
    assert fold_log(d).last_seq == lines

    # A start without new events rebuilds the snapshot and head from the log; it does
    # not sign (the lines were not checked against history yet).
    LogWriter(d, signer=SIGNER).open().close()
    rebuilt = LogSnapshot.replay(SID, verify_lines(read_lines(d / "events.ndjson")))
    assert (d / "snapshot.json").read_bytes() == rebuilt.to_bytes()
    assert last_seq(d / "head") == lines and signed_size(d) == at_rest
    r = CliRunner().invoke(log_app(), ["log", "replay", "-q", str(d)])
    assert r.exit_code == 0, r.output
    with pytest.raises(ChainBrokenError, match="lines after the signed ones were added"):
        verify_checkpoint(d, verify_dir(d), KEY)

    # And the exporter carries on to the very files of one never killed, signed.
    export_history(SID, EVENTS, tmp_path / "runs", signer=SIGNER)
    assert tree(d) == reference
    assert verify_checkpoint(d, verify_dir(d), KEY).size == verify_dir(d).events > lines


def test_the_catch_up_refuses_a_head_past_the_log_or_not_on_its_line(tmp_path):
    d = killed_exporter(tmp_path / "runs")
    head = json.loads((d / "head").read_bytes())
    lines = (d / "events.ndjson").read_bytes().count(b"\n")
    (d / "head").write_text(json.dumps({**head, "last_seq": lines + 1}))
    with pytest.raises(ValueError, match="lines are missing"):
        fold_log(d)
    (d / "head").write_text(json.dumps({**head, "last_hash": "f" * 64}))
    with pytest.raises(ValueError, match="whose event_hash is another"):
        fold_log(d)
    (d / "head").write_text(json.dumps(head))
    assert fold_log(d).last_seq == lines


def test_replay_write_rebuilds_a_stale_snapshot_too(tmp_path):
    d = killed_exporter(tmp_path / "runs")
    r = CliRunner().invoke(log_app(), ["log", "replay", "--write", "-q", str(d)])
    assert r.exit_code == 0, r.output
    assert last_seq(d / "snapshot.json") == last_seq(d / "head") == verify_dir(d).events
