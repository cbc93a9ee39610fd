"""Telemetry written in groups (``observation/telemetry/writer.py``): the commits that
queue up while a round is written go in the next round, one transaction, each run
once (its latest row) and each session's progress once (its furthest); the store is
the same as one written commit by commit."""

from __future__ import annotations

import threading
from pathlib import Path

from observation.exporter import LogWriter, SessionExport, export_history
from observation.exporter.decode import load_history
from observation.telemetry import STORE_NAME, TelemetryStore
from observation.telemetry.hook import SessionTelemetry
from observation.telemetry.writer import BackgroundWriter

HISTORIES = Path(__file__).parents[1] / "workflows" / "histories"
SCENARIOS = ("demo", "rejected", "auto_timeout", "canceled")


def export_paged(sid: str, events, runs: Path, observer: SessionTelemetry) -> None:
    """As the follower exports: a commit every two history events."""
    with LogWriter(runs / sid, observer) as w:
        ex = SessionExport(w, sid)
        for i, e in enumerate(events):
            ex.feed(e, page_end=(i % 2 == 1))
        ex.finish()


def dump(path: Path) -> bytes:
    with TelemetryStore.open(path, readonly=True) as s:
        return b"".join(s.dump())


class Held(TelemetryStore):
    """The real store; its first write waits until ``go`` is set; each write's rows
    and progress entries are noted."""

    def upsert_rows(self, batch):  # type: ignore[override]
        batch = list(batch)
        self.writes.append(([r[0] for rows, _ in batch for r in rows],
                            [p for _, p in batch if p is not None]))
        self.entered.set()
        self.go.wait()
        super().upsert_rows(batch)


def test_a_round_writes_each_run_once_and_the_same_rows(tmp_path):
    store = Held.open(tmp_path / STORE_NAME)
    store.writes, store.entered, store.go = [], threading.Event(), threading.Event()
    writer = BackgroundWriter(store)
    upsert = writer.upsert

    def counted(runs, progress=None):
        store.handed += 1
        upsert(runs, progress)
    store.handed = 0
    writer.upsert = counted  # type: ignore[method-assign]
    sessions = [load_history((HISTORIES / f"{n}.json").read_text()) for n in SCENARIOS]
    try:
        # The first commit is taken by a round that waits; every other commit queues up.
        done = threading.Thread(target=lambda: [
            export_paged(sid, events, tmp_path / "runs", SessionTelemetry(sid, writer, None))
            for sid, events in sessions])
        done.start()
        assert store.entered.wait(30)
        done.join()
        store.go.set()
        assert writer.flush(timeout=30)
    finally:
        store.go.set()
        writer.close()
        store.close()
    assert len(store.writes) == 2  # the held round, then everything else in one
    rows, progress = store.writes[1]
    assert len(rows) == len(set(rows))  # each run once, though most changed often
    assert store.handed > 2 * len(sessions)
    assert len(progress) == len({p[0] for p in progress}) > 1  # each session once
    assert {p[0] for _, ps in store.writes for p in ps} == {sid for sid, _ in sessions}
    # The same rows as written commit by commit, on the exporter's thread.
    with TelemetryStore.open(tmp_path / "direct.sqlite") as direct:
        for sid, events in sessions:
            export_history(sid, events, tmp_path / "runs2", SessionTelemetry(sid, direct, None))
    assert dump(tmp_path / STORE_NAME) == dump(tmp_path / "direct.sqlite")
