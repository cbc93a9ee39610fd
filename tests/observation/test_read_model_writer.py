"""The read model written in groups (``observation/read_model/writer.py``), on SQLite
and on PostgreSQL for real: what the group writer writes equals a rebuild from the
logs; a round writes every session that committed meanwhile in one transaction,
each session's batches merged in order; a round that fails (a locked SQLite file, a
PostgreSQL connection killed) is kept and written by a later one; ``close`` writes
what is pending; the SSE feed hears a batch once the read model has it."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest

from observation.exporter.follower import SessionExport
from observation.exporter.log import LogWriter
from observation.read_model.rows import SESSION_COLUMNS, SessionBatch, SessionRow, merge
from observation.read_model.sqlite import SqliteStore
from observation.read_model.store import ReadStore
from observation.read_model.sync import AfterReadModel, ReadModelObserver, Tee, rebuild
from observation.read_model.writer import GroupWriter
from tests.observation.test_read_model import SCENARIOS, export, history


class Rounds:
    """The real store, its rounds seen (and, when ``hold`` is cleared, the writer held
    inside the first one until ``go`` is set)."""

    def __init__(self, store: ReadStore) -> None:
        self.store = store
        self.rounds: list[list[str]] = []
        self.entered, self.go = threading.Event(), threading.Event()
        self.go.set()

    def apply_many(self, batches: Any) -> int:
        self.rounds.append(sorted(b.session_id for b in batches))
        self.entered.set()
        self.go.wait()
        return self.store.apply_many(batches)

    def apply(self, batch: Any) -> bool:
        return self.store.apply(batch)


def test_written_in_groups_equals_rebuilt_from_the_logs(make_store, tmp_path):
    grouped, rebuilt = make_store(), make_store()
    runs = tmp_path / "runs"
    writer = GroupWriter(grouped)
    try:
        for name in SCENARIOS:
            sid, events = history(name)
            export(sid, events, runs, writer)  # type: ignore[arg-type]
        assert writer.flush(timeout=60)
    finally:
        writer.close()
    assert writer.rounds >= 1 and writer.failures == 0
    assert not rebuild(rebuilt, runs).errors
    assert grouped.dump() == rebuilt.dump()
    assert len(grouped.dump()["rm_sessions"]) == len(SCENARIOS)


def test_a_round_writes_every_pending_session_once_in_one_transaction(make_store, tmp_path):
    store = make_store()
    rounds = Rounds(store)
    rounds.go.clear()
    writer = GroupWriter(rounds)  # type: ignore[arg-type]
    views = {}
    try:
        observers = {}
        for name in SCENARIOS:  # each session, folded but not committed yet
            sid, events = history(name)
            observers[sid] = ReadModelObserver(sid, writer)
            views[sid] = list(events)
        first = next(iter(observers))
        runs = tmp_path / "runs"
        writers = {sid: LogWriter(runs / sid, observers[sid]) for sid in observers}
        exports = {sid: SessionExport(w, sid) for sid, w in writers.items()}
        for w in writers.values():
            w.open()
        # The first session's first page: the writer takes it and is held in its round.
        evs = views[first]
        for e in evs[:3]:
            exports[first].feed(e, page_end=False)
        exports[first].feed(evs[3], page_end=True)
        assert rounds.entered.wait(30)
        # Meanwhile every session commits, some several times: one round takes them all.
        for sid, evs in views.items():
            start = 4 if sid == first else 0
            for i, e in enumerate(evs[start:]):
                exports[sid].feed(e, page_end=(i % 3 == 2))
            exports[sid].finish()
        rounds.go.set()
        assert writer.flush(timeout=60)
        for w in writers.values():
            w.close()
    finally:
        rounds.go.set()
        writer.close()
    assert rounds.rounds == [[first], sorted(views)]  # two transactions in all
    fresh = make_store()
    assert not rebuild(fresh, tmp_path / "runs").errors
    assert store.dump() == fresh.dump()


def _lock_sqlite(store: SqliteStore) -> sqlite3.Connection:
    """Another connection holding the write lock; the store's writer fails at once."""
    store._writer.execute("PRAGMA busy_timeout = 0")
    other = sqlite3.connect(store.path, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")
    return other


def test_a_failed_round_is_kept_and_written_later(make_store, tmp_path):
    store = make_store()
    sid, events = history("demo")
    events = list(events)
    heard: list[int] = []
    writer = GroupWriter(store, retry_after_s=0.01)
    try:
        if isinstance(store, SqliteStore):
            other = _lock_sqlite(store)
        else:  # the writer's connection killed under it
            pid = store._writer.info.backend_pid  # type: ignore[attr-defined]
            store.query("SELECT pg_terminate_backend(?)", (pid,))
            other = None
        observer = ReadModelObserver(sid, writer)
        with LogWriter(tmp_path / "runs" / sid, observer) as w:
            ex = SessionExport(w, sid)
            for e in events[:6]:
                ex.feed(e, page_end=False)
            ex.feed(events[6], page_end=True)
            writer.after(lambda: heard.append(writer.failures))
            assert not writer.flush(timeout=0.2) or other is None
            if other is not None:
                assert store.session(sid) is None  # nothing half-written
                other.execute("ROLLBACK")
                other.close()
                store._writer.execute("PRAGMA busy_timeout = 10000")
            for e in events[7:]:
                ex.feed(e, page_end=True)
            ex.finish()
        assert writer.flush(timeout=60)
    finally:
        writer.close()
    assert writer.failures >= 1
    assert heard and heard[0] >= 1  # the callback ran after the failed round, not later
    fresh = make_store()
    assert not rebuild(fresh, tmp_path / "runs").errors
    assert store.dump() == fresh.dump()


def test_close_writes_what_is_pending(make_store, tmp_path):
    store = make_store()
    rounds = Rounds(store)
    rounds.go.clear()
    writer = GroupWriter(rounds)  # type: ignore[arg-type]
    sid, events = history("rejected")
    observer = ReadModelObserver(sid, writer)
    thread = threading.Thread(target=export_all_pages, args=(sid, list(events),
                                                             tmp_path / "runs", observer))
    thread.start()
    assert rounds.entered.wait(30)
    thread.join()  # every commit handed over; the writer still holds the first round
    closing = threading.Thread(target=writer.close)
    closing.start()
    rounds.go.set()
    closing.join()
    assert store.session(sid)["last_seq"] == observer.view.last_seq
    fresh = make_store()
    rebuild(fresh, tmp_path / "runs")
    assert store.dump() == fresh.dump()
    # Handed over after close: written at once, on the caller's thread.
    other, events = history("canceled")
    late = ReadModelObserver(other, writer)
    export_all_pages(other, list(events), tmp_path / "runs", late)
    assert store.session(other)["last_seq"] == late.view.last_seq


def export_all_pages(sid: str, events: list, runs: Path, observer: ReadModelObserver) -> None:
    with LogWriter(runs / sid, observer) as w:
        ex = SessionExport(w, sid)
        for i, e in enumerate(events):
            ex.feed(e, page_end=(i % 3 == 2))
        ex.finish()


class Seen:
    """An observer (as the SSE feed is) that reads the store at each commit."""

    def __init__(self, store: ReadStore, sid: str) -> None:
        self.store, self.sid = store, sid
        self.told: list[int] = []
        self.at_commit: list[tuple[int, int]] = []
        self.thread: set[str] = set()

    def event(self, event: dict[str, Any], replayed: bool) -> None:
        self.told.append(event["seq"])

    def commit(self) -> None:
        row = self.store.session(self.sid)
        last = max([0, *self.told])
        self.at_commit.append((last, row["last_seq"] if row else 0))
        self.thread.add(threading.current_thread().name)

    def call_scheduled(self, call_id: str) -> None:
        self.told.append(-1)


def test_the_feed_hears_a_batch_once_the_read_model_has_it(make_store, tmp_path):
    store = make_store()
    sid, events = history("demo")
    seen = Seen(store, sid)
    writer = GroupWriter(store)
    try:
        tee = Tee([ReadModelObserver(sid, writer), AfterReadModel(seen, writer)])
        with LogWriter(tmp_path / "runs" / sid, tee) as w:
            ex = SessionExport(w, sid)
            for i, e in enumerate(events):
                ex.feed(e, page_end=(i % 2 == 1))
            ex.finish()
            tee.call_scheduled("c-1")  # no line held: passed on at once, in order
        assert writer.flush(timeout=60)
    finally:
        writer.close()
    lines = [s for s in seen.told if s > 0]
    assert lines == list(range(1, len(lines) + 1))  # every line, in order
    assert seen.told[-1] == -1
    assert len(seen.at_commit) > 3
    assert all(stored >= last for last, stored in seen.at_commit)  # never ahead
    assert seen.thread == {"read-model-writer"}


def test_broken_input_is_refused(make_store):
    store = make_store()
    row = {c: 0 for c in SESSION_COLUMNS}
    a = SessionBatch(SessionRow(**{**row, "session_id": "a", "last_hash": "x",
                                   "status_counts": "{}"}))
    b = SessionBatch(SessionRow(**{**row, "session_id": "b", "last_hash": "x",
                                   "status_counts": "{}"}))
    with pytest.raises(ValueError, match="two sessions"):
        merge(a, b)
    with pytest.raises(ValueError, match="one batch per session"):
        store.apply_many([a, a])
    assert store.dump()["rm_sessions"] == []  # nothing written
