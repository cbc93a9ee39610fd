"""Logs rewritten as someone who can write the run directory would: every hash, the
head and the snapshot recomputed, so that ``verify_dir`` passes."""

from __future__ import annotations

import json
from pathlib import Path

from observation.exporter import GENESIS, LogSnapshot, line_hash, seed_hash
from observation.exporter.checkpoint import CHECKPOINT_NAME, checkpoint_bytes
from observation.exporter.note import Signer
from observation.exporter.verify import read_lines, verify_lines
from workflows.canonical import jcs


def events_of(d: Path) -> list[dict]:
    return [json.loads(line) for line in (d / "events.ndjson").read_bytes().splitlines()]


def rewrite(d: Path, events: list[dict], signer: Signer | None = None) -> None:
    """Write ``events`` as a log that verifies: every hash, the head and the snapshot
    recomputed (what someone who can write the directory can do); re-signed when
    given the key."""
    prev = prev_line = GENESIS
    lines = []
    for n, e in enumerate(events, 1):
        e.update(seq=n, prev_hash=prev)
        e["event_hash"] = seed_hash(e)
        e["line_hash"] = line_hash({k: v for k, v in e.items() if k != "line_hash"}, prev_line)
        prev, prev_line = e["event_hash"], e["line_hash"]
        lines.append(jcs(e) + b"\n")
    (d / "events.ndjson").write_bytes(b"".join(lines))
    head = {"last_hash": prev, "last_seq": len(events)}
    (d / "head").write_text(json.dumps(head, indent=2, sort_keys=True) + "\n")
    snapshot = LogSnapshot.replay(d.name, verify_lines(read_lines(d / "events.ndjson")))
    (d / "snapshot.json").write_bytes(snapshot.to_bytes())
    if signer is not None:
        (d / CHECKPOINT_NAME).write_bytes(checkpoint_bytes(signer, d.name, len(events),
                                                           prev_line))


def forged(d: Path) -> list[dict]:
    events = events_of(d)
    assert events[4]["type"] == "message"
    events[4]["payload"]["text"] = "Tidy up my notes: keep the old draft."
    return events
