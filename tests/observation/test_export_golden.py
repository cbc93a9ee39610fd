"""The saved histories export to the same bytes as when they were recorded.

``export_golden.json`` holds the sha256 of every file the exporter writes for each saved
history (unsigned, and signed with a fixed key): a change that alters a log line, a
head, a snapshot, an artifact or a checkpoint fails here. A deliberate format change
re-records it: ``.venv/bin/python -m tests.observation.test_export_golden``.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

from observation.exporter import export_history
from observation.exporter.decode import load_history
from observation.exporter.note import Signer

HISTORIES = Path(__file__).parents[1] / "workflows" / "histories"
GOLDEN = Path(__file__).with_name("export_golden.json")
SIGNER = Signer("golden", bytes(range(32)))  # a fixed key: signatures are deterministic


def export_digests(out: Path) -> dict[str, str]:
    for h in sorted(HISTORIES.glob("*.json")):
        for kind, signer in (("plain", None), ("signed", SIGNER)):
            sid, events = load_history(h.read_text())
            export_history(sid, events, out / kind / h.stem, signer=signer)
    return {str(p.relative_to(out)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(out.rglob("*")) if p.is_file() and p.name != ".lock"}


def test_saved_histories_export_byte_identical(tmp_path):
    golden = json.loads(GOLDEN.read_text())
    got = export_digests(tmp_path)
    assert sorted(got) == sorted(golden), "the exported files differ in name"
    changed = [name for name in golden if got[name] != golden[name]]
    assert not changed, f"exported bytes changed: {changed}"


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        GOLDEN.write_text(json.dumps(export_digests(Path(d)), indent=1, sort_keys=True) + "\n")
    sys.stdout.write(f"wrote {GOLDEN}\n")
