"""The read model knows who each session names (issue 24): its people from the config
the log recorded, its pending request's own approvers, and the list filters by them
in its query, in SQLite and PostgreSQL alike."""

from __future__ import annotations

from typing import Any

import pytest

import observation.exporter  # noqa: F401 - first: it imports the read model's sync
from observation import event_types as ev
from observation.log_view import SessionLogView
from observation.read_model import ReadStore, open_store
from observation.read_model.access import AccessFold
from observation.read_model.rows import full_batch
from observation.read_model.store import Audience
from observation.read_model.sync import ReadModelObserver
from tests.support.postgres import postgres_url


@pytest.fixture(params=["sqlite", "postgres"])
def store(request, tmp_path):
    s = open_store(tmp_path) if request.param == "sqlite" else open_store(tmp_path,
                                                                         postgres_url())
    s.reset()
    yield s
    s.close()


def _events(people: dict[str, Any] | None, opened: dict[str, Any] | None = None,
            started: str = "2026-01-01T00:00:00Z") -> list[dict[str, Any]]:
    config: dict[str, Any] = {"initial_message": "hi"}
    if people is not None:
        config["people"] = people
    out = [
        (ev.RUN_CREATED, {"config": config, "task_queue": "q", "created_at": started,
                          "run_state": "queued"}),
        (ev.RUN_STATE_CHANGED, {"old_state": "queued", "new_state": "running",
                                "trigger": "turn.started", "at": started}),
    ]
    if opened is not None:
        out += [(ev.RUN_STATE_CHANGED, {"old_state": "running", "new_state": "waiting_user",
                                        "trigger": "interaction.requested", "at": started}),
                (ev.ISSUE_OPENED, {"issue_id": "r1", "kind": "approval", "prompt": "ok?",
                                   "opened_at": started, **opened})]
    return [{"seq": i + 1, "type": t, "payload": p, "event_hash": f"h{i + 1}",
             "event_id": f"run:{i + 1}:0"} for i, (t, p) in enumerate(out)]


def _put(store: ReadStore, sid: str, events: list[dict[str, Any]]) -> None:
    view, access = SessionLogView(sid), AccessFold()
    for e in events:
        view.apply(e)
        access.apply(e)
    store.replace(full_batch(view, access))


def _ids(store: ReadStore, who: Audience | None, status: str | None = None) -> set[str]:
    rows, _ = store.list_sessions(status, 100, None, who)
    return {r["session_id"] for r in rows}


def _who(*names: str, email: str | None = None, operator: bool = False,
         answers: bool = True, waiting_for: bool = False) -> Audience:
    return Audience(names=names, email=email, sees_all=operator, answers=answers,
                    waiting_for=waiting_for)


def _fill(store: ReadStore) -> None:
    _put(store, "s-ann", _events({"owner": "ann", "viewers": ["vic", "group:audit"]},
                                 opened={}, started="2026-01-01T00:00:01Z"))
    _put(store, "s-sec", _events(
        {"owner": "bob", "approvers": ["Carol@Example.org"]},
        opened={"approvers": ["group:security"], "rule": "deletes",
                "digest": "sha256:" + "a" * 64, "approvals_required": 2},
        started="2026-01-01T00:00:02Z"))
    _put(store, "s-old", _events(None, started="2026-01-01T00:00:03Z"))  # names nobody


def test_each_principal_lists_what_it_may_see(store: ReadStore):
    _fill(store)
    assert _ids(store, None) == {"s-ann", "s-sec", "s-old"}  # no audience: everything
    assert _ids(store, _who("x", operator=True)) == {"s-ann", "s-sec", "s-old"}
    assert _ids(store, _who("ann")) == {"s-ann"}
    assert _ids(store, _who("vic", answers=False)) == {"s-ann"}
    assert _ids(store, _who("zed", "group:audit")) == {"s-ann"}  # by group
    # E-mail entries match without case; subjects exactly.
    assert _ids(store, _who("carol", email="carol@example.ORG")) == {"s-sec"}
    assert _ids(store, _who("Ann")) == set()
    assert _ids(store, _who("nobody")) == set()
    # Whom the pending request asks (a rule's approvers) see the session while it asks.
    assert _ids(store, _who("sam", "group:security")) == {"s-sec"}
    # The status filter and the audience together.
    assert _ids(store, _who("ann"), "waiting_user") == {"s-ann"}
    assert _ids(store, _who("ann"), "succeeded") == set()


def test_waiting_for_me_lists_what_the_principal_may_answer(store: ReadStore):
    _fill(store)
    # No request approvers: the owner and the session's approvers, or an operator.
    assert _ids(store, _who("ann", waiting_for=True)) == {"s-ann"}
    assert _ids(store, _who("vic", waiting_for=True, answers=False)) == set()
    assert _ids(store, _who("vic", waiting_for=True)) == set()  # a viewer entry
    # The request names group:security: only they may answer it, operators included.
    assert _ids(store, _who("ops", operator=True, waiting_for=True)) == {"s-ann"}
    assert _ids(store, _who("sec", "group:security", operator=True,
                            waiting_for=True)) == {"s-ann", "s-sec"}
    assert _ids(store, _who("bob", waiting_for=True)) == set()
    assert _ids(store, _who("carol", email="CAROL@example.org", waiting_for=True)) == set()


def test_the_pending_request_carries_who_decides_and_what(store: ReadStore):
    _fill(store)
    pending = store.session("s-sec")["pending"]
    assert pending["approvers"] == ["group:security"] and pending["rule"] == "deletes"
    assert pending["digest"] == "sha256:" + "a" * 64 and pending["approvals_required"] == 2
    assert store.access("s-sec") == {"owner": ["bob"], "approver": ["Carol@Example.org"],
                                     "answer": ["group:security"]}
    assert store.access("s-old") == {}
    # A session with no such fields keeps the pending request it always had.
    assert set(store.session("s-ann")["pending"]) == {
        "request_id", "kind", "prompt", "execution_id", "options", "fields", "created_at",
        "output"}


def test_answering_clears_the_request_approvers_and_approvals_show(store: ReadStore,
                                                                     tmp_path):
    events = _events({"owner": "bob"}, opened={"approvers": ["group:security"],
                                               "approvals_required": 2})
    seq = len(events)
    sam = {"issuer": "local", "subject": "sam", "name": "Sam"}
    events.append({"seq": seq + 1, "type": ev.ISSUE_APPROVAL_RECORDED,
                   "payload": {"issue_id": "r1", "kind": "approval", "by": "Sam",
                               "principal": sam, "approvals": [sam],
                               "approvals_required": 2, "approved_at": "2026-01-01T00:00:00Z"},
                   "event_hash": "hx", "event_id": f"run:{seq + 1}:0"})
    _put(store, "s1", events)
    assert store.session("s1")["pending"]["approvals"] == [
        {"issuer": "local", "subject": "sam", "name": "Sam"}]
    events.append({"seq": seq + 2, "type": ev.ISSUE_RESOLVED,
                   "payload": {"issue_id": "r1", "resolution": "answered"},
                   "event_hash": "hy", "event_id": f"run:{seq + 2}:0"})
    _put(store, "s1", events)
    assert store.access("s1") == {"owner": ["bob"]}
    assert store.session("s1")["pending"] is None


def test_the_exporters_batches_write_who_is_named_once_it_changes(store: ReadStore):
    observer = ReadModelObserver("s2", store)
    events = _events({"owner": "ann"})
    for e in events:
        observer.event(e, replayed=False)
    observer.commit()
    assert store.access("s2") == {"owner": ["ann"]}
    opened = {"seq": 3, "type": ev.ISSUE_OPENED, "event_hash": "h3", "event_id": "run:3:0",
              "payload": {"issue_id": "r9", "kind": "approval", "prompt": "?",
                          "opened_at": "2026-01-01T00:00:00Z", "approvers": ["dan"]}}
    observer.event(opened, replayed=False)
    observer.commit()
    assert store.access("s2") == {"owner": ["ann"], "answer": ["dan"]}
    assert _ids(store, _who("dan", operator=True, waiting_for=True)) == {"s2"}
    assert _ids(store, _who("ann", waiting_for=True)) == set()  # the request names dan
