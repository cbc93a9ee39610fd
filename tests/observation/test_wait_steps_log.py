"""The wait's steps in the log (issue 26): the journal's ``request.reminded`` and
``request.escalated`` mapped to ISSUE_REMINDED / ISSUE_ESCALATED with their exact
payloads (a contract with the notifier), each a journal lead on the request's work
item; the log view and the read model fold them (the pending request's approvers,
reminded_at, escalated_at; the ``answer`` rows for ``waiting_for=me``); a decision
through an action link says ``via``."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

import observation.exporter  # noqa: F401 - first: it imports the read model's sync
from observation import event_types as ev
from observation.exporter.decode import MappingError
from observation.log_view import fold
from observation.read_model import ReadStore, open_store
from observation.read_model.store import Audience
from tests.observation.test_exporter_decisions import AT, BOB, DIGEST, Journal
from tests.observation.test_read_model_access import _events, _put

REMINDED = {"request_id": "e1", "kind": "approval", "digest": DIGEST,
            "approvers": ["olga", "ann"], "execution_id": "e1"}
ESCALATED = {"request_id": "e1", "kind": "approval", "digest": DIGEST,
             "approvers": ["olga", "ann", "carol"], "escalated_to": ["carol"],
             "execution_id": "e1"}


def asked() -> Journal:
    j = Journal()
    j.contract()
    j.ask(digest=DIGEST)
    return j


def test_the_two_steps_map_to_their_lines_with_the_exact_payloads():
    j = asked()
    (opened,) = [m for m in j.m._out if m.type == ev.ISSUE_OPENED]
    ((t, reminded),) = j.feed("request.reminded", REMINDED)
    (reminded_line,) = j.m._out
    assert (t, reminded) == (ev.ISSUE_REMINDED, {
        "issue_id": "e1", "kind": "approval", "approvers": ["olga", "ann"],
        "digest": DIGEST, "reminded_at": AT})
    ((t, escalated),) = j.feed("request.escalated", ESCALATED)
    assert (t, escalated) == (ev.ISSUE_ESCALATED, {
        "issue_id": "e1", "kind": "approval", "approvers": ["olga", "ann", "carol"],
        "escalated_to": ["carol"], "digest": DIGEST, "escalated_at": AT})
    assert ev.is_journal_lead(ev.ISSUE_REMINDED, reminded)
    assert ev.is_journal_lead(ev.ISSUE_ESCALATED, escalated)
    assert ev.is_sse(ev.ISSUE_REMINDED) and ev.is_sse(ev.ISSUE_ESCALATED)
    # on the request's work item, as its ISSUE_OPENED (Journal.feed checked the schema)
    (escalated_line,) = j.m._out
    assert (reminded_line.span_id, reminded_line.parent_span_id) == (
        opened.span_id, opened.parent_span_id) != (None, None)
    assert escalated_line.span_id == opened.span_id


def test_a_request_without_a_digest_has_none_in_its_lines():
    j = Journal()
    j.contract()
    j.ask()
    ((_, reminded),) = j.feed("request.reminded", {**REMINDED, "digest": None})
    assert "digest" not in reminded
    ((_, escalated),) = j.feed("request.escalated",
                               {k: v for k, v in ESCALATED.items() if k != "digest"})
    assert "digest" not in escalated


@pytest.mark.parametrize("kind, data", [("request.reminded", REMINDED),
                                        ("request.escalated", ESCALATED)])
def test_a_step_of_a_request_not_open_is_a_mapping_error(kind, data):
    with pytest.raises(MappingError, match="not open"):
        Journal().feed(kind, data)
    j = asked()
    with pytest.raises(MappingError, match="not open"):
        j.feed(kind, {**data, "request_id": "other"})


def test_the_log_view_shows_the_steps_on_the_pending_request():
    j = asked()
    j.feed("request.reminded", REMINDED)
    view = fold("s1", j.lines)
    assert view.pending["reminded_at"] == AT and "escalated_at" not in view.pending
    j.feed("request.escalated", ESCALATED)
    view = fold("s1", j.lines)
    assert view.pending["approvers"] == ["olga", "ann", "carol"]
    assert (view.pending["escalated_at"], view.pending["escalated_to"]) == (AT, ["carol"])
    assert view.journal_seq == 4  # the contract, the request, reminded, escalated
    j.feed("reply.accepted", {"request_id": "e1", "kind": "approval",
                              "answer": {"approved": True}, "by": "Carol", "auto": False})
    assert fold("s1", j.lines).pending is None


def test_a_decision_through_a_link_says_so():
    j = asked()
    ((_, recorded),) = j.feed("approval.recorded", {
        "request_id": "e1", "kind": "approval", "principal": BOB, "digest": DIGEST,
        "approvals": [BOB], "approvals_required": 2, "execution_id": "e1", "via": "link"})
    assert recorded["via"] == "link"
    ((_, resolved),) = j.feed("reply.accepted", {
        "request_id": "e1", "kind": "approval", "answer": {"approved": True}, "by": "Bob",
        "auto": False, "principal": BOB, "digest": DIGEST, "via": "link"})
    assert (resolved["via"], resolved["principal"]) == ("link", BOB)
    plain = asked()
    ((_, resolved),) = plain.feed("reply.accepted", {
        "request_id": "e1", "kind": "approval", "answer": {"approved": True}, "by": "Bob",
        "auto": False, "principal": BOB})
    assert "via" not in resolved  # older decisions keep their bytes


@pytest.fixture
def store(tmp_path):
    s = open_store(tmp_path)
    s.reset()
    yield s
    s.close()


def _step(seq: int, type_: str, payload: dict[str, Any]) -> dict[str, Any]:
    return {"seq": seq, "type": type_, "payload": payload, "event_hash": f"h{seq}",
            "event_id": f"run:{seq}:0"}


def _waiting(who: str) -> Audience:
    return Audience(names=(who,), email=None, sees_all=False, answers=True, waiting_for=True)


def _sees(who: str) -> Audience:
    return Audience(names=(who,), email=None, sees_all=False, answers=True,
                    waiting_for=False)


def _ids(store: ReadStore, who: Audience) -> set[str]:
    rows, _ = store.list_sessions(None, 100, None, who)
    return {r["session_id"] for r in rows}


def test_after_escalation_the_escalated_person_answers_and_sees_the_session(store):
    events = _events({"owner": "olga", "approvers": ["ann"]}, opened={})
    _put(store, "s1", events)
    assert _ids(store, _waiting("carol")) == set() and _ids(store, _sees("carol")) == set()
    events.append(_step(len(events) + 1, ev.ISSUE_REMINDED, {
        "issue_id": "r1", "kind": "approval", "approvers": ["olga", "ann"],
        "reminded_at": "2026-01-01T00:01:00Z"}))
    _put(store, "s1", events)
    assert _ids(store, _waiting("carol")) == set()  # a reminder adds no one
    assert store.session("s1")["pending"]["reminded_at"] == "2026-01-01T00:01:00Z"
    events.append(_step(len(events) + 1, ev.ISSUE_ESCALATED, {
        "issue_id": "r1", "kind": "approval", "approvers": ["olga", "ann", "carol"],
        "escalated_to": ["carol"], "escalated_at": "2026-01-01T00:02:00Z"}))
    _put(store, "s1", events)
    assert sorted(store.access("s1")["answer"]) == ["ann", "carol", "olga"]
    assert _ids(store, _waiting("carol")) == {"s1"} and _ids(store, _sees("carol")) == {"s1"}
    assert _ids(store, _waiting("ann")) == {"s1"}  # the ones asked before still are
    pending = store.session("s1")["pending"]
    assert (pending["approvers"], pending["escalated_at"], pending["escalated_to"]) == (
        ["olga", "ann", "carol"], "2026-01-01T00:02:00Z", ["carol"])
    events.append(_step(len(events) + 1, ev.ISSUE_RESOLVED,
                        {"issue_id": "r1", "resolution": "answered"}))
    _put(store, "s1", events)
    assert "answer" not in store.access("s1") and _ids(store, _sees("carol")) == set()


def test_a_step_for_another_request_changes_nothing(store):
    events = _events({"owner": "olga"}, opened={})
    events.append(_step(len(events) + 1, ev.ISSUE_ESCALATED, {
        "issue_id": "other", "kind": "approval", "approvers": ["carol"],
        "escalated_to": ["carol"], "escalated_at": "2026-01-01T00:02:00Z"}))
    _put(store, "s1", events)
    assert "answer" not in store.access("s1")
    assert "escalated_at" not in store.session("s1")["pending"]


def test_a_parked_follower_is_woken_at_the_next_reminder_or_escalation():
    """``next_wait_step``: when the open request's next step is due (the exporter wakes
    a parked follower then); the timeout needs none (it changes the status)."""
    j = asked()
    assert j.m.next_wait_step() is None  # no config known: no wake
    j.m.session_config = {"agent": {"llm": {"provider": "scripted",
                                            "responses": [{"text": "hi"}]}},
                          "remind_after_s": 60, "escalate_after_s": 120,
                          "escalate_to": ["carol"], "reply_timeout_s": 180,
                          "interactive_require_user_reply": False}
    opened = datetime.fromisoformat(AT)
    assert j.m.next_wait_step() == opened + timedelta(seconds=60)
    j.feed("request.reminded", REMINDED)
    assert j.m.next_wait_step() == opened + timedelta(seconds=120)
    j.feed("request.escalated", ESCALATED)
    assert j.m.next_wait_step() is None  # the timeout is left: no wake needed
    broken = asked()
    broken.m.session_config = {"mode": "sometimes"}
    assert broken.m.next_wait_step() is None
