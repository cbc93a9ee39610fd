"""The read model's store, on SQLite and on PostgreSQL (the same suite, both for
real): built batch by batch by the exporter's hook it equals a rebuild from the
logs; re-applied batches and restarts change nothing; every read is the fold's."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from observation.exporter.decode import load_history
from observation.exporter.follower import SessionExport
from observation.exporter.log import LogWriter
from observation.exporter.verify import LOG_NAME, read_lines, verify_lines
from observation.log_view import fold
from observation.projections import execution_snapshot
from observation.read_model import open_store
from observation.read_model.list_token import InvalidPageToken
from observation.read_model.rows import full_batch
from observation.read_model.store import ReadStore
from observation.read_model.sync import ReadModelObserver, fold_log, rebuild, sync_store

HISTORIES = Path(__file__).parents[1] / "workflows" / "histories"
SCENARIOS = ("demo", "rejected", "auto_timeout", "canceled")


def history(name: str):
    return load_history((HISTORIES / f"{name}.json").read_text())


def export(sid: str, events, runs: Path, store: ReadStore, *, every: int = 3,
           upto: int | None = None) -> ReadModelObserver:
    """Export like the follower does: a commit (one read model batch) every ``every``
    history events."""
    observer = ReadModelObserver(sid, store)
    with LogWriter(runs / sid, observer) as w:
        ex = SessionExport(w, sid)
        events = list(events)[:upto]
        for i, e in enumerate(events):
            ex.feed(e, page_end=(i % every == every - 1))
        ex.finish()
    return observer


def export_all(runs: Path, store: ReadStore) -> dict[str, object]:
    views = {}
    for name in SCENARIOS:
        sid, events = history(name)
        views[sid] = export(sid, events, runs, store).view
    return views


def test_live_built_equals_rebuilt_from_the_logs(make_store, tmp_path):
    live, rebuilt = make_store(), make_store()
    runs = tmp_path / "runs"
    export_all(runs, live)
    result = rebuild(rebuilt, runs)
    assert sorted(result.synced) == sorted(d.name for d in runs.iterdir())
    assert not result.errors
    assert live.dump() == rebuilt.dump()
    assert len(live.dump()["rm_sessions"]) == len(SCENARIOS)
    # A rebuild over a store that has rows drops them first.
    assert rebuild(live, runs).errors == {}
    assert live.dump() == rebuilt.dump()


def test_reapplying_and_restarting_never_double_counts(make_store, tmp_path):
    store = make_store()
    runs = tmp_path / "runs"
    sid, events = history("demo")
    events = list(events)
    half = len(events) // 2
    observer = export(sid, events, runs, store, upto=half)
    row = store.session(sid)
    assert row["last_seq"] == observer.view.last_seq
    # The same batch again: a no-op.
    before = store.dump()
    assert store.apply(full_batch(observer.view)) is False
    assert store.dump() == before
    # An exporter restart: the writer replays the log, the rest comes from history.
    export(sid, events, runs, store)
    after = store.session(sid)
    whole = fold_log(runs / sid)
    assert (after["last_seq"], after["replies"], after["turns"]) == (
        whole.last_seq, whole.replies, whole.turns)
    fresh = make_store()
    rebuild(fresh, runs)
    assert store.dump() == fresh.dump()


def test_a_store_that_lost_commits_catches_up_at_start(make_store, tmp_path):
    store = make_store()
    runs = tmp_path / "runs"
    sid, events = history("rejected")
    export(sid, events, runs, store)
    full = store.dump()
    store.reset()
    result = sync_store(store, runs)
    assert result.synced == [sid]
    assert store.dump() == full
    assert sync_store(store, runs).synced == []  # up to date: nothing to do


def test_reads_are_the_folds(make_store, tmp_path):
    store = make_store()
    runs = tmp_path / "runs"
    views = export_all(runs, store)
    for sid, view in views.items():
        row = store.session(sid)
        assert row["status"] == view.status.value
        assert (row["turns"], row["replies"], row["llm_calls"]) == (
            view.turns, view.replies, view.llm_calls)
        assert row["contracts_total"] == len(view.contracts)
        assert row["journal_seq"] == view.journal_seq > 0
        assert row["last_hash"] == view.last_hash and row["closed"] is True
        assert row["execution_status"] in ("completed", "canceled")
        page = store.contracts(sid, 1, 2)
        assert [c["snapshot"]["execution_id"] for c in page] == [
            c.execution_id for c in view.contracts[1:3]]
        c = view.contracts[-1]
        got = store.contract(sid, c.execution_id)
        assert got["snapshot"]["transition_count"] == len(c.transitions)
        assert got["transitions"] == [t.model_dump(mode="json") for t in c.transitions]
        assert store.contract(sid, "nope") is None
        assert store.facts(sid, 0, 500) == [f.model_dump(mode="json") for f in view.facts]
        assert store.history(sid, 0, 500) == [h.model_dump(mode="json") for h in view.history]
    assert store.session("nope") is None


def test_duration_in_state_is_not_stored(make_store, tmp_path):
    store = make_store()
    sid, events = history("demo")
    view = export(sid, events, tmp_path / "runs", store).view
    c = view.contracts[0]
    stored = store.contract(sid, c.execution_id)["snapshot"]
    assert stored["duration_in_state_ms"] == 0
    later = datetime.fromisoformat(stored["entered_state_at"]) + timedelta(seconds=3)
    assert execution_snapshot(c, later).duration_in_state_ms == 3000


def test_list_pages_and_filters(make_store, tmp_path):
    store = make_store()
    views = export_all(tmp_path / "runs", store)
    everyone, token = store.list_sessions(None, 100, None)
    assert token is None and {r["session_id"] for r in everyone} == set(views)
    starts = [r["started_at"] for r in everyone]
    assert starts == sorted(starts, reverse=True)
    seen, token = [], None
    while True:
        page, token = store.list_sessions(None, 1, token)
        seen += [r["session_id"] for r in page]
        if token is None:
            break
    assert seen == [r["session_id"] for r in everyone]
    canceled, _ = store.list_sessions("canceled", 100, None)
    assert [r["session_id"] for r in canceled] == [
        sid for sid, v in views.items() if v.status.value == "canceled"]
    assert store.list_sessions("waiting_user", 100, None) == ([], None)
    with pytest.raises(InvalidPageToken):
        store.list_sessions(None, 1, "not-a-token")


def test_a_broken_log_is_reported_and_skipped(make_store, tmp_path):
    store = make_store()
    runs = tmp_path / "runs"
    export_all(runs, store)
    sid, _ = history("rejected")
    path = runs / sid / LOG_NAME
    lines = path.read_bytes().splitlines(keepends=True)
    event = json.loads(lines[2])
    event["payload"] = {"tampered": True}
    lines[2] = json.dumps(event).encode() + b"\n"
    path.write_bytes(b"".join(lines))
    result = rebuild(store, runs)
    assert sid in result.errors and sid not in result.synced
    assert store.session(sid) is None  # not half-applied
    assert len(result.synced) == len(SCENARIOS) - 1


def test_the_journal_position_counts_the_journal(tmp_path):
    from observation.exporter.decode import journal_of

    for name in SCENARIOS:
        sid, events = history(name)
        entries = sum(len(journal_of(e)) for e in events)
        runs = tmp_path / name
        store = open_store(runs)
        view = export(sid, events, runs / "runs", store).view
        store.close()
        assert view.journal_seq == entries
        lines = verify_lines(read_lines(runs / "runs" / sid / LOG_NAME))
        assert fold(sid, lines).journal_seq == entries


def test_pending_and_waiting_since_follow_the_log(tmp_path):
    sid, events = history("demo")
    runs = tmp_path / "runs"
    store = open_store(tmp_path)
    observer = export(sid, events, runs, store)
    waits = [h for h in observer.view.history if h.to_status.value == "waiting_user"]
    assert waits  # the demo waits for the person
    # Folded history event by history event (a batch never ends inside one): pending
    # is set exactly while the session waits.
    lines = list(verify_lines(read_lines(runs / sid / LOG_NAME)))
    view = fold(sid, [])
    for i, line in enumerate(lines):
        view.apply(line)
        same = i + 1 < len(lines) and lines[i + 1]["event_id"].rsplit(":", 1)[0] == \
            line["event_id"].rsplit(":", 1)[0]
        if same or view.status is None:
            continue
        waiting = view.status.value == "waiting_user"
        assert (view.pending is not None) == waiting
        assert (view.waiting_since is not None) == waiting
    store.close()


def test_a_fork_is_listed_with_its_parent(make_store, tmp_path):
    """``rm_lineage``: a fork's batch names its parent (its log's line 1); the parent
    lists its forks; a replace keeps one row, a rebuild from logs without the line none."""
    store = make_store()
    runs = tmp_path / "runs"
    sid, events = history("demo")
    view = export(sid, events, runs, store).view
    assert store.children("s-parent") == []
    view.forked_from = ("s-parent", 7)  # as the fold of a SESSION_FORKED line sets it
    store.replace(full_batch(view))
    store.replace(full_batch(view))
    assert store.children("s-parent") == [{"session_id": sid, "seq": 7}]
    assert store.dump()["rm_lineage"] == [(sid, "s-parent", 7)]
    assert store.children(sid) == []
    rebuild(store, runs)  # the demo's own log names no parent
    assert store.children("s-parent") == []
