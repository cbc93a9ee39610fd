"""Benchmark: what a read model round costs per batch, by how many batches it holds.

Run by hand (not a test), from the repository root::

    .venv/bin/python bench/read_model_bench.py

The saved histories (``tests/workflows/histories``) exported ``--copies`` times as
sessions of their own, a commit every three log lines (as the exporter commits a
history page); their batches are then written into a new SQLite read model: one
transaction per batch (``ReadStore.apply``, as before the group writer); the sessions
taking turns (each one's next batch in turn, as the exporter hands them over while it
follows many sessions, so a round finds the other sessions' rows stored) in rounds of
1, 2 and 4 batches; and each session's batches one after another in rounds of 1, 4, 16
and 64 batches (``apply_many`` after merging each session's batches, as the group
writer does, ``observation/read_model/writer.py``). CPU time of this one
process per log line: first of the folds and of making the batches' rows (the
exporter's thread), then of writing them (the writer thread's SQL).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from observation.exporter import export_history
from observation.exporter.decode import load_history
from observation.exporter.verify import read_lines, verify_lines
from observation.read_model import open_store
from observation.read_model.rows import MergedBatch, SessionBatch
from observation.read_model.store import ReadStore
from observation.read_model.sync import ReadModelObserver

HISTORIES = Path(__file__).resolve().parents[1] / "tests" / "workflows" / "histories"
SCENARIOS = ("demo", "rejected", "auto_timeout", "canceled")


class Caught:
    def __init__(self) -> None:
        self.batches: list[SessionBatch] = []

    def apply(self, batch: SessionBatch) -> None:
        self.batches.append(batch)


def batches(tmp: Path, copies: int, every: int
            ) -> tuple[list[SessionBatch], int, float, float]:
    logs = []
    for name in SCENARIOS:
        sid, events = load_history((HISTORIES / f"{name}.json").read_text())
        export_history(sid, events, tmp / "runs", None)
        logs.append((sid, list(verify_lines(read_lines(tmp / "runs" / sid / "events.ndjson")))))
    caught, lines, fold, rows = Caught(), 0, 0.0, 0.0
    clock = time.process_time
    for copy in range(copies):
        for sid, events in logs:
            observer = ReadModelObserver(f"{sid}-{copy}", caught)
            t0 = clock()
            for i, e in enumerate(events):
                observer.event(e, False)
                lines += 1
                if i % every == every - 1:
                    t1 = clock()
                    observer.commit()
                    rows += clock() - t1
            t1 = clock()
            observer.commit()
            rows += clock() - t1
            fold += clock() - t0
    return caught.batches, lines, fold - rows, rows


def interleaved(found: list[SessionBatch]) -> list[SessionBatch]:
    """Each session's batches in order, the sessions taking turns."""
    per: dict[str, list[SessionBatch]] = {}
    for b in found:
        per.setdefault(b.session_id, []).append(b)
    queues = list(per.values())
    out: list[SessionBatch] = []
    for k in range(max(len(q) for q in queues)):
        out += [q[k] for q in queues if k < len(q)]
    return out


def write_rounds(store: ReadStore, found: list[SessionBatch], size: int) -> int:
    """``found`` written ``size`` batches a round, merged as the group writer merges
    them; how many rounds."""
    rounds = 0
    for i in range(0, len(found), size):
        merged: dict[str, SessionBatch | MergedBatch] = {}
        for b in found[i:i + size]:
            old = merged.get(b.session_id)
            merged[b.session_id] = b if old is None else (
                old.add(b) if isinstance(old, MergedBatch) else MergedBatch(old).add(b))
        store.apply_many([m.batch() if isinstance(m, MergedBatch) else m
                          for m in merged.values()])
        rounds += 1
    return rounds


def main(argv: list[str]) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--copies", type=int, default=50)
    p.add_argument("--every", type=int, default=3, help="log lines per commit")
    args = p.parse_args(argv)
    if args.copies < 1 or args.every < 1:
        p.error("--copies and --every must be at least 1")
    with tempfile.TemporaryDirectory(prefix="hitlflow-rm-bench-") as d:
        tmp = Path(d)
        found, lines, fold, rows = batches(tmp, args.copies, args.every)
        print(f"{len(found)} batches of {lines} log lines ({args.copies} copies of "
              f"{len(SCENARIOS)} histories, a commit every {args.every} lines)")
        print(f"  the folds (ReadModelObserver.event): {fold / lines * 1e6:6.1f} us per line; "
              f"the batches' rows (commit): {rows / lines * 1e6:6.1f} us per line")
        store = open_store(tmp / "one")
        t0 = time.process_time()
        for b in found:
            store.apply(b)
        spent = time.process_time() - t0
        store.close()
        print(f"  one transaction per batch (apply): {spent / lines * 1e6:6.1f} us per line, "
              f"{spent / len(found) * 1e6:5.0f} us per batch")
        # As the exporter hands them over: the sessions' batches interleaved (each
        # session's next commit in turn), so each round finds the others' rows stored.
        order = interleaved(found)
        for size in (1, 2, 4):
            store = open_store(tmp / f"interleaved{size}")
            t0 = time.process_time()
            rounds = write_rounds(store, order, size)
            spent = time.process_time() - t0
            store.close()
            print(f"  interleaved, rounds of {size:2d} (apply_many): "
                  f"{spent / lines * 1e6:6.1f} us per line, {spent / rounds * 1e6:5.0f} us "
                  "per round")
        for size in (1, 4, 16, 64):
            store = open_store(tmp / f"rounds{size}")
            t0 = time.process_time()
            rounds = write_rounds(store, found, size)
            spent = time.process_time() - t0
            store.close()
            print(f"  rounds of {size:2d} batches (apply_many): {spent / lines * 1e6:6.1f} us "
                  f"per line, {spent / rounds * 1e6:5.0f} us per round")


if __name__ == "__main__":
    main(sys.argv[1:])
