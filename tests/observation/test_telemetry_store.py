"""The telemetry store (``<data_dir>/telemetry.sqlite``): written by the exporter's
hook as the log grows, queryable by session/job_type/status, the same rows again
from the logs alone, and a broken file refused with nothing changed."""

from __future__ import annotations

import logging
import shutil
import sqlite3
from pathlib import Path

import pytest

from observation.exporter import LogWriter, SessionExport, export_history, verify_dir
from observation.exporter.decode import load_history
from observation.telemetry import STORE_NAME, TelemetryStore, TelemetryStoreError, project
from observation.telemetry.hook import (
    SessionTelemetry,
    Telemetry,
    rebuild_store,
    start_telemetry,
    sync_store,
)
from observation.telemetry.store import SCHEMA_VERSION
from observation.telemetry.writer import BackgroundWriter

HISTORIES = Path(__file__).parents[1] / "workflows" / "histories"
SCENARIOS = ("demo", "rejected", "auto_timeout", "canceled")
LOADED = {n: load_history((HISTORIES / f"{n}.json").read_text()) for n in SCENARIOS}


def export_all(data_dir: Path, store: TelemetryStore | None) -> None:
    for sid, events in LOADED.values():
        obs = SessionTelemetry(sid, store, None) if store is not None else None
        export_history(sid, events, data_dir / "runs", obs)


def dump(path: Path) -> bytes:
    with TelemetryStore.open(path, readonly=True) as s:
        return b"".join(s.dump())


def listing(d: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(d.iterdir()) if p.is_file()}


@pytest.fixture
def exported(tmp_path) -> Path:
    """A data dir whose logs were exported with the telemetry hook on."""
    with TelemetryStore.open(tmp_path / STORE_NAME) as store:
        export_all(tmp_path, store)
    return tmp_path


def test_the_store_answers_by_session_job_type_and_status(exported):
    with TelemetryStore.open(exported / STORE_NAME, readonly=True) as store:
        every = store.runs()
        for name, (sid, _) in LOADED.items():
            mine = store.runs(session_id=sid)
            assert mine == project(sid, [e for e in _lines(exported, sid)]), name
            assert mine[0].job_type == "session" and mine[0].parent_run_id is None
        assert len(every) == sum(len(store.runs(session_id=s)) for s, _ in LOADED.values())
        llm = store.runs(job_type="llm_call")
        assert llm and {r.job_type for r in llm} == {"llm_call"}
        assert all(r.parent_run_id.split("/")[1] == "reasoning" for r in llm)
        rejected = store.runs(status="rejected")
        assert [r.session_id for r in rejected] == [LOADED["rejected"][0]]
        assert store.runs(job_type="session", status="canceled")[0].session_id == \
            LOADED["canceled"][0]
        assert store.runs(job_type="work_item", status="running") == []
        assert store.runs(limit=2) == every[:2] and store.runs(limit=2, offset=2) == every[2:4]
        child = llm[0]
        assert store.run(child.run_id) == child and store.run("nope") is None
        kids = store.runs(parent_run_id=child.parent_run_id)
        assert kids == [child]
        assert set(store.progress()) == {sid for sid, _ in LOADED.values()}


def _lines(data_dir: Path, sid: str):
    from observation.exporter.verify import read_lines, verify_lines

    return verify_lines(read_lines(data_dir / "runs" / sid / "events.ndjson"))


def test_rebuilt_from_the_logs_alone_it_is_the_same_store(exported, tmp_path_factory):
    live = dump(exported / STORE_NAME)
    other = tmp_path_factory.mktemp("rebuilt")
    shutil.copytree(exported / "runs", other / "runs")
    synced, errors = rebuild_store(other)
    assert (synced, errors) == (len(SCENARIOS), {})
    assert dump(other / STORE_NAME) == live
    rebuild_store(exported)  # in place, over the live one
    assert dump(exported / STORE_NAME) == live


def test_an_exporter_stopped_anywhere_writes_the_same_rows(exported, tmp_path):
    """Kill the export after any number of history events, start it again (the
    writer replays the log into a fresh hook): the same rows as one run."""
    want = dump(exported / STORE_NAME)
    sid, events = LOADED["demo"]
    for cut in (1, 7, len(events) // 2, len(events) - 2):
        d = tmp_path / f"cut{cut}"
        d.mkdir()
        with TelemetryStore.open(d / STORE_NAME) as store:
            for name, (s, evs) in LOADED.items():
                if name != "demo":
                    export_history(s, evs, d / "runs", SessionTelemetry(s, store, None))
            with LogWriter(d / "runs" / sid, SessionTelemetry(sid, store, None)) as w:
                export = SessionExport(w, sid)
                for i, e in enumerate(events[:cut]):
                    export.feed(e, page_end=i % 5 == 4)
                # killed here: whatever the last page commit left
            export_history(sid, events, d / "runs", SessionTelemetry(sid, store, None))
            export_history(sid, events, d / "runs", SessionTelemetry(sid, store, None))
        assert dump(d / STORE_NAME) == want, cut
        verify_dir(d / "runs" / sid)


def test_an_older_state_never_overwrites_a_newer_row(exported):
    sid, _ = LOADED["demo"]
    early = project(sid, list(_lines(exported, sid))[:20])
    before = dump(exported / STORE_NAME)
    with TelemetryStore.open(exported / STORE_NAME) as store:
        store.upsert(early, (sid, 20, "0" * 64))
    assert dump(exported / STORE_NAME) == before


def test_a_newer_state_updates_what_lines_change_and_leaves_what_is_fixed(exported):
    """An update sets status, name, times, attributes, last_seq and event_count; a
    run's ids, span, ordinal and first_seq are fixed when it is created."""
    sid, _ = LOADED["demo"]
    with TelemetryStore.open(exported / STORE_NAME) as store:
        run = store.runs(session_id=sid, job_type="llm_call")[0]
        newer = run.model_copy(update={
            "status": "failed", "name": "renamed", "ended_at": "2030-01-01T00:00:00Z",
            "attributes": {"x": 1.5}, "last_seq": run.last_seq + 1000, "event_count": 99,
            "ordinal": 12345, "first_seq": 0, "parent_run_id": "elsewhere",
            "context_json": {**run.context_json, "span_id": "f" * 16}})
        store.upsert([newer])
        got = store.run(run.run_id)
    assert got == run.model_copy(update={
        "status": "failed", "name": "renamed", "ended_at": "2030-01-01T00:00:00Z",
        "attributes": {"x": 1.5}, "last_seq": run.last_seq + 1000, "event_count": 99})


@pytest.mark.parametrize("content", [
    b"this is not a database, just some bytes " * 100,
    b"SQLite format 3\x00" + b"\xff" * 4000,  # a header, then garbage
])
def test_a_corrupt_store_is_refused_and_left_as_it_is(tmp_path, content):
    path = tmp_path / STORE_NAME
    path.write_bytes(content)
    before = listing(tmp_path)
    for readonly in (True, False):
        with pytest.raises(TelemetryStoreError, match="telemetry rebuild"):
            TelemetryStore.open(path, readonly=readonly)
        assert listing(tmp_path) == before


def test_a_database_that_is_not_a_store_is_refused_and_left_as_it_is(tmp_path):
    other = tmp_path / "other.sqlite"
    with sqlite3.connect(other) as c:
        c.execute("CREATE TABLE notes (x TEXT)")
    c.close()
    before = listing(tmp_path)
    with pytest.raises(TelemetryStoreError, match="not a hitlflow telemetry store"):
        TelemetryStore.open(other)
    assert listing(tmp_path) == before
    with TelemetryStore.open(tmp_path / "new.sqlite") as store:  # a fresh one is made
        assert store.runs() == []
    with sqlite3.connect(tmp_path / "new.sqlite") as c:
        c.execute("UPDATE meta SET value = 'v0' WHERE key = 'schema'")
    c.close()
    with pytest.raises(TelemetryStoreError, match=SCHEMA_VERSION):
        TelemetryStore.open(tmp_path / "new.sqlite", readonly=True)
    with pytest.raises(TelemetryStoreError, match="no telemetry store"):
        TelemetryStore.open(tmp_path / "missing.sqlite", readonly=True)
    assert not (tmp_path / "missing.sqlite").exists()


def test_the_exporter_service_catches_up_and_leaves_out_a_corrupt_store(tmp_path, caplog):
    export_all(tmp_path, None)  # logs written while no telemetry ran
    telemetry = start_telemetry(tmp_path, env={})
    try:
        assert telemetry.spans is None and telemetry.store is not None
        assert len(telemetry.store.progress()) == len(SCENARIOS)
        assert sync_store(telemetry.store, tmp_path / "runs") == (0, {})  # nothing left
    finally:
        telemetry.close()
    good = dump(tmp_path / STORE_NAME)
    (tmp_path / "corrupt").mkdir()
    bad = tmp_path / "corrupt" / STORE_NAME
    bad.write_bytes(b"garbage" * 1000)
    with caplog.at_level(logging.ERROR, logger="hitlflow.telemetry"):
        telemetry = start_telemetry(tmp_path / "corrupt", env={})
    assert telemetry.store is None and telemetry.observer("s-x") is None
    assert "telemetry store left out" in caplog.text and str(bad) in caplog.text
    assert bad.read_bytes() == b"garbage" * 1000
    assert good == dump(tmp_path / STORE_NAME)


def test_a_store_error_is_retried_at_the_next_commit_and_never_stops_the_log(tmp_path):
    sid, events = LOADED["demo"]

    class Flaky:
        def __init__(self, real: TelemetryStore) -> None:
            self.real, self.fail = real, 3

        def upsert(self, runs, progress=None):
            if self.fail:
                self.fail -= 1
                raise TelemetryStoreError("database is locked")
            self.real.upsert(runs, progress)

    with TelemetryStore.open(tmp_path / STORE_NAME) as store:
        obs = SessionTelemetry(sid, Flaky(store), None)  # type: ignore[arg-type]
        with LogWriter(tmp_path / "runs" / sid, obs) as w:
            export = SessionExport(w, sid)
            for i, e in enumerate(events):
                export.feed(e, page_end=i % 10 == 9)
            export.finish()
        assert store.runs(session_id=sid) == project(sid, list(_lines(tmp_path, sid)))
    verify_dir(tmp_path / "runs" / sid)


def test_a_log_line_that_does_not_project_stops_telemetry_not_the_log(tmp_path, caplog):
    sid, events = LOADED["demo"]
    with TelemetryStore.open(tmp_path / STORE_NAME) as store:
        obs = SessionTelemetry("s-someone-else", store, None)
        with caplog.at_level(logging.ERROR, logger="hitlflow.telemetry"):
            export_history(sid, events, tmp_path / "runs", obs)
        assert obs.broken and "telemetry of session s-someone-else stops" in caplog.text
        assert store.runs() == []
    verify_dir(tmp_path / "runs" / sid)
    assert Telemetry().observer(sid) is None


def test_the_background_writer_retries_and_flush_waits_for_it(tmp_path):
    """The exporter service writes the store from one thread, off the log's path:
    a failing write is kept and tried again; flush() returns once it is in."""
    sid, events = LOADED["demo"]

    class Flaky(TelemetryStore):
        fail = 3

        def upsert_rows(self, batch):
            if self.fail:
                self.fail -= 1
                raise TelemetryStoreError("database is locked")
            super().upsert_rows(batch)

    store = Flaky.open(tmp_path / STORE_NAME)
    writer = BackgroundWriter(store, retry_after_s=0.01)
    try:
        export_history(sid, events, tmp_path / "runs", SessionTelemetry(sid, writer, None))
        assert writer.flush(timeout=30)
        assert store.fail == 0
        assert store.runs(session_id=sid) == project(sid, list(_lines(tmp_path, sid)))
    finally:
        writer.close()
        store.close()
    telemetry = Telemetry(TelemetryStore.open(tmp_path / "t2.sqlite"), None, background=True)
    export_history(sid, events, tmp_path / "runs2", telemetry.observer(sid))
    telemetry.close()  # flushes
    assert dump(tmp_path / "t2.sqlite") == dump(tmp_path / STORE_NAME)
