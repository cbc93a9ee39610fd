"""The log of who decided and on what (issue 24): the journal entries the workflow writes
for it, mapped to log lines that meet the event schema; each entry one lead (read-your-
writes counts them); the fields absent when unset (older histories keep their bytes);
the log view folds who has approved so far into the pending request."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest
from temporalio.api.history.v1 import HistoryEvent

from observation import event_types as ev
from observation.exporter.decode import MappingError
from observation.exporter.mapping import SessionMapper
from observation.log_view import fold
from observation.projections import ExecutionStateEvent
from observation.schemas import load
from workflows import decisions
from workflows.config import SessionConfig
from workflows.people import ANSWER_CONFLICT, Principal
from workflows.session_state import PendingRequest

AT = "2026-01-02T03:04:05Z"
BOB = {"issuer": "local", "subject": "bob", "name": "Bob"}
OPS = {"issuer": "local", "subject": "ops", "name": "Ops"}
DIGEST = "sha256:" + "a" * 64
EDITED = "sha256:" + "b" * 64
SCHEMA = load("event")
CONFIG = SessionConfig.model_validate({"agent": {"llm": {
    "provider": "scripted", "responses": [{"text": "hi"}]}}})


def valid(type_: str, payload: dict[str, Any]) -> None:
    name = ev.BY_NAME[type_].schema
    if name is not None:
        jsonschema.Draft202012Validator({**SCHEMA["$defs"][name],
                                         "$defs": SCHEMA["$defs"]}).validate(payload)


class Journal:
    """Journal entries fed to the mapper one history event at a time."""

    def __init__(self) -> None:
        self.m = SessionMapper("s1")
        self.m.run_id, self.seq, self.event_id = "run1", 0, 1
        self.lines: list[dict[str, Any]] = []

    def feed(self, kind: str, data: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        self.m._event, self.m._ts, self.m._out = HistoryEvent(event_id=self.event_id), AT, []
        self.event_id += 1
        self.m.journal([{"seq": self.seq, "kind": kind, "at": AT, "data": data}])
        self.seq += 1
        for e in self.m._out:
            valid(e.type, e.payload)
            self.lines.append({"seq": len(self.lines) + 1, "type": e.type,
                               "payload": e.payload, "event_id": e.event_id,
                               "event_hash": str(len(self.lines)), "ts": AT})
        return [(e.type, e.payload) for e in self.m._out]

    def contract(self, execution_id: str = "e1") -> None:
        self.feed("contract.created", {
            "execution_id": execution_id, "action_type": "tool_call", "irreversible": True,
            "action_detail": {"server": "notes", "tool": "delete_note",
                              "arguments": {"name": "x"}},
            "idempotency_key": "k", "created_at": AT})

    def ask(self, **terms: Any) -> list[tuple[str, dict[str, Any]]]:
        detail = {"request_id": "e1", "kind": "approval", "prompt": "Approve?",
                  "execution_id": "e1", "created_at": AT, **terms}
        return self.feed("session.status", {
            "from_status": "running", "to_status": "waiting_user",
            "event": "interaction.requested", "fcmp": [], "detail": detail})


def test_a_request_carries_its_digest_and_who_may_answer_only_when_set():
    j = Journal()
    j.contract()
    ((_, plain),) = [x for x in j.ask() if x[0] == ev.ISSUE_OPENED]
    assert not set(plain) & set(ev.ISSUE_TERMS)  # an older request: as it was
    j = Journal()
    j.contract()
    ((_, opened),) = [x for x in j.ask(
        digest=DIGEST, approvers=["group:security"], approvals_required=2, rule="prod",
        separation_of_duties=True, asked={"tool": "delete_note"}) if x[0] == ev.ISSUE_OPENED]
    assert {k: opened[k] for k in ev.ISSUE_TERMS if k in opened} == {
        "asked": {"tool": "delete_note"}, "digest": DIGEST, "approvers": ["group:security"],
        "approvals_required": 2, "rule": "prod", "separation_of_duties": True}


def test_approvals_then_the_decision_with_who_and_what():
    j = Journal()
    j.contract()
    j.ask(digest=DIGEST, approvals_required=2)
    with pytest.raises(MappingError, match="not open"):
        Journal().feed("approval.recorded", {"request_id": "e1", "kind": "approval",
                                             "principal": BOB, "approvals": [BOB],
                                             "approvals_required": 2})
    ((t, p),) = j.feed("approval.recorded", {
        "request_id": "e1", "kind": "approval", "principal": BOB, "digest": DIGEST,
        "approvals": [BOB], "approvals_required": 2, "execution_id": "e1"})
    assert (t, p["by"], p["approvals"], p["approved_at"]) == (
        ev.ISSUE_APPROVAL_RECORDED, "Bob", [BOB], AT)
    assert ev.is_journal_lead(t, p)
    view = fold("s1", j.lines)
    assert view.pending["approvals"] == [BOB] and view.pending["digest"] == DIGEST
    # what the API reads back (the read model keeps the view's pending) is a request the
    # same pure checks take: Bob again is a conflict, before anything reaches Temporal
    pending = PendingRequest.model_validate(view.pending)
    bob = Principal(**BOB, role="approver")
    found = decisions.answer_conflict(bob, CONFIG, pending, approve=True, digest=DIGEST)
    assert (found.type, found.details) == (ANSWER_CONFLICT, {"code": "already_approved"})
    ((t, resolved),) = j.feed("reply.accepted", {
        "request_id": "e1", "kind": "approval", "answer": {"approved": True}, "by": "Ops",
        "auto": False, "principal": OPS, "digest": DIGEST, "approvals": [BOB, OPS],
        "edited_digest": EDITED, "edited_by": OPS, "edited_arguments": {"name": "y"}})
    assert (resolved["principal"], resolved["approvals"], resolved["edited_digest"],
            resolved["edited_by"], resolved["by"]) == (OPS, [BOB, OPS], EDITED, OPS, "Ops")
    assert fold("s1", j.lines).pending is None


def test_a_reply_without_attribution_keeps_its_old_shape():
    j = Journal()
    j.contract()
    j.ask()
    ((_, resolved),) = j.feed("reply.accepted", {
        "request_id": "e1", "kind": "approval", "answer": {"approved": True}, "by": "user",
        "auto": False})
    assert set(resolved) == {"issue_id", "kind", "resolution", "answer", "by", "auto",
                             "detail", "resolved_at"}


def test_a_transition_a_person_made_names_them_and_the_digest():
    j = Journal()
    j.contract()
    record = {"execution_id": "e1", "from_status": "pending", "to_status": "running",
              "trigger": "start", "actor": "reasoning", "actor_category": "reasoning",
              "timestamp": AT}
    ((_, started), _) = j.feed("contract.transition", record)
    assert set(started) == set(ExecutionStateEvent.model_fields)
    j.feed("contract.transition", {**record, "from_status": "running",
                                   "to_status": "waiting", "trigger": "suspend",
                                   "actor": "tool_node", "actor_category": "tool_node"})
    ((t, resumed),) = j.feed("contract.transition", {
        **record, "from_status": "waiting", "to_status": "running", "trigger": "resume",
        "actor": "user", "actor_category": "user", "principal": BOB, "digest": DIGEST})
    assert (t, resumed["principal"], resumed["digest"]) == (ev.EXECUTION_STATE, BOB, DIGEST)


def test_a_call_decided_without_asking_is_one_entry_naming_what_decided_it():
    j = Journal()
    j.contract()
    made = j.feed("request.decided", {
        "request_id": "e1", "kind": "approval", "execution_id": "e1", "prompt": "delete x",
        "asked": {}, "digest": DIGEST, "decision": "allow", "created_at": AT,
        "standing_id": "sd-r0", "standing_set_by": BOB})
    assert [t for t, _ in made] == [ev.ISSUE_OPENED, ev.ISSUE_RESOLVED]
    assert [ev.is_journal_lead(t, p) for t, p in made] == [True, False]  # one lead
    opened, resolved = (p for _, p in made)
    assert (opened["auto_decision"], opened["digest"]) == ("allow", DIGEST)
    assert (resolved["resolution"], resolved["standing_id"], resolved["standing_set_by"],
            resolved["by"], resolved["answer"]) == (
        "decided_by_standing", "sd-r0", BOB, "standing decision sd-r0 of Bob",
        {"approved": True, "auto": True})
    view = fold("s1", j.lines)
    assert view.pending is None and view.replies == 0
    assert view.journal_seq == 2  # contract.created and request.decided
    j.contract("e2")
    ((_, o2), (_, r2)) = j.feed("request.decided", {
        "request_id": "e2", "kind": "approval", "execution_id": "e2", "prompt": "delete y",
        "digest": DIGEST, "decision": "deny", "created_at": AT, "rule": "rules[1]"})
    assert (o2["auto_decision"], r2["resolution"], r2["rule"], r2["by"],
            r2["answer"]["approved"]) == ("deny", "decided_by_rule", "rules[1]",
                                          "rule rules[1]", False)


def test_revocations_and_messages_name_who():
    j = Journal()
    ((t, p),) = j.feed("standing.revoked", {
        "standing_id": "sd-1", "tool": "delete_note", "server": "notes", "arguments": None,
        "set_by": BOB, "revoked_by": OPS})
    assert (t, p["revoked_by"], p["at"]) == (ev.STANDING_DECISION_REVOKED, OPS, AT)
    assert ev.is_sse(t) and ev.is_sse(ev.ISSUE_APPROVAL_RECORDED)
    ((_, m),) = j.feed("message.accepted", {"text": "hi", "by": "Bob", "principal": BOB})
    assert m == {"text": "hi", "at": AT, "by": "Bob", "principal": BOB}
    ((_, old),) = j.feed("message.accepted", {"text": "hi"})
    assert old == {"text": "hi", "at": AT}


def test_the_schema_refuses_a_principal_without_a_subject_and_a_bad_digest():
    with pytest.raises(jsonschema.ValidationError):
        valid(ev.ISSUE_RESOLVED, {"issue_id": "x", "resolution": "answered",
                                  "resolved_at": AT, "principal": {"issuer": "local"}})
    with pytest.raises(jsonschema.ValidationError):
        valid(ev.ISSUE_OPENED, {"issue_id": "x", "kind": "approval", "prompt": "",
                                "opened_at": AT, "digest": "md5:abc"})
    with pytest.raises(jsonschema.ValidationError):
        valid(ev.EXECUTION_STATE, {"execution_id": "e", "action_summary": "", "from_status":
                                   "a", "to_status": "b", "trigger": "t", "actor_category":
                                   "user", "is_terminal": False, "is_resumable": True,
                                   "has_side_effects": True, "timestamp": AT, "who": "x"})
