"""The read model written for less (issue 28) writes the same rows: commits of any
size equal a rebuild, on SQLite and PostgreSQL; a session row updated without its
indexed columns is still found by them; a transition's JSON kept is rewritten while it
may still change."""

from __future__ import annotations

from pathlib import Path

import pytest

from observation.exporter import export_history
from observation.exporter.decode import load_history
from observation.exporter.verify import read_lines, verify_lines
from observation.log_view import SessionLogView
from observation.read_model.rows import TransitionTexts
from observation.read_model.sync import ReadModelObserver, rebuild
from observation.read_model.writer import GroupWriter

HISTORIES = Path(__file__).parents[1] / "workflows" / "histories"
SCENARIOS = ("demo", "rejected", "auto_timeout", "canceled")


def logs(runs: Path) -> list[tuple[str, list[dict]]]:
    out = []
    for name in SCENARIOS:
        sid, events = load_history((HISTORIES / f"{name}.json").read_text())
        export_history(sid, events, runs, None)
        out.append((sid, list(verify_lines(read_lines(runs / sid / "events.ndjson")))))
    return out


@pytest.mark.parametrize("every", [1, 2, 5])
def test_commits_of_any_size_equal_a_rebuild(make_store, tmp_path, every):
    """After every commit the session is listed under the status the log gives it (a
    row updated without its indexed columns keeps its indexes right), and at the end
    the store equals one rebuilt from the logs."""
    runs = tmp_path / "runs"
    live, rebuilt = make_store(), make_store()
    statuses, listed_under = set(), 0
    for sid, events in logs(runs):
        observer = ReadModelObserver(sid, live)
        for i, e in enumerate(events):
            observer.event(e, False)
            if i % every == every - 1 or i == len(events) - 1:
                observer.commit()
                view = observer.view
                row = live.session(sid)
                assert row is not None and row["last_seq"] == view.last_seq
                status = view.status.value if view.status else None
                assert row["status"] == status
                statuses.add(status)
                if status in ("succeeded", "failed", "canceled") or \
                        view.execution_status == "running":
                    listed, _ = live.list_sessions(status, 100, None)
                    assert sid in {r["session_id"] for r in listed}
                    listed_under += 1
        assert observer.broken is None
    assert len(statuses) > 2 and listed_under > 10  # the sessions went through several
    assert not rebuild(rebuilt, runs).errors
    assert live.dump() == rebuilt.dump()


def test_the_group_writer_in_rounds_equals_a_rebuild(make_store, tmp_path):
    runs = tmp_path / "runs"
    live, rebuilt = make_store(), make_store()
    writer = GroupWriter(live)
    try:
        for sid, events in logs(runs):
            observer = ReadModelObserver(sid, writer)
            for e in events:
                observer.event(e, False)
                observer.commit()
        assert writer.flush(timeout=60)
    finally:
        writer.close()
    assert writer.failures == 0
    assert not rebuild(rebuilt, runs).errors
    assert live.dump() == rebuilt.dump()


def test_a_kept_transition_is_rewritten_while_it_may_change(tmp_path):
    """The last transition's actor is named by the next line: its JSON is made again
    until a later transition follows it."""
    sid, events = logs(tmp_path / "runs")[0]
    view, texts = SessionLogView(sid), TransitionTexts()
    checked, renamed = 0, 0
    for e in events:
        renamed += e["type"] in ("WORK_ITEM_STARTED", "WORK_ITEM_FINISHED")
        view.apply(e)
        for i, c in enumerate(view.contracts):
            assert texts.of(i, c.transitions) == _plain(c.transitions)
            checked += 1
    assert checked > 50 and renamed > 2


def _plain(transitions) -> str:
    from workflows.canonical import canonical_json

    return canonical_json([t.model_dump(mode="json") for t in transitions])


def test_the_last_transition_named_later_is_written_again(tmp_path):
    """The fold names the last transition's actor from the next line
    (``WORK_ITEM_STARTED``/``FINISHED``): a name that differs from the inferred one
    reaches the row; the transitions before it are final."""
    sid, events = logs(tmp_path / "runs")[0]
    view, texts = SessionLogView(sid), TransitionTexts()
    for e in events:
        view.apply(e)
    c = next(c for c in view.contracts if len(c.transitions) >= 2)
    first = texts.of(0, c.transitions[:1])
    c.transitions[0].actor = "renamed-after-the-first-write"
    again = texts.of(0, c.transitions[:1])
    assert again != first and again == _plain(c.transitions[:1])
    assert texts.of(0, c.transitions) == _plain(c.transitions)


def test_floats_in_the_parts_typed_any_are_written_exactly(tmp_path):
    """A snapshot's ``result`` and a status change's FCMP payloads may hold floats
    (walked); the rest of those rows holds none by its type (not walked)."""
    from observation.read_model.rows import batch, contract_row
    from workflows.canonical import canonical_json

    sid, events = logs(tmp_path / "runs")[0]
    view = SessionLogView(sid)
    for e in events:
        view.apply(e)
    c = view.contracts[0]
    c.result = {"ratio": 1e-05, "big": 1e16, "name": "\u00e9t\u00e9"}
    change = view.history[-1]
    change.fcmp.append(change.fcmp[0].model_copy(update={"payload": {"p": 0.1, "q": 2.5e-7}})
                       if change.fcmp else _fcmp({"p": 0.1, "q": 2.5e-7}))
    row = contract_row(view, 0)
    assert '"ratio":1e-05' in row.snapshot and '"big":1e+16' in row.snapshot
    snap = __import__("json").loads(row.snapshot)
    assert row.snapshot == canonical_json(snap)
    b = batch(view, [0], [len(view.history) - 1], 0)
    entry = b.history[-1].body
    assert '"q":2.5e-07' in entry
    assert entry == canonical_json(change.model_dump(mode="json"))
    assert [f.body for f in b.facts] == \
        [canonical_json(f.model_dump(mode="json")) for f in view.facts]


def _fcmp(payload):
    from workflows.statechart import FcmpEvent

    return FcmpEvent(type="conversation.state.changed", payload=payload)
