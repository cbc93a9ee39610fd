"""The wait's steps (remind, escalate, timeout), pure: workflows/wait_policy.py, and what
the book, the carried state, the validator and the operators' details make of them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from workflows import decisions
from workflows.config import SessionConfig
from workflows.messages import SessionInput
from workflows.operators import static_details, waiting_details
from workflows.people import ANSWER_FORBIDDEN, ANSWER_INVALID, Principal
from workflows.session_book import SessionBook
from workflows.session_state import PendingRequest, SessionState
from workflows.statechart import SessionStatus
from workflows.wait_policy import DUE_NOW, addressees, escalated, next_step, timeout_applies

T0 = datetime(2026, 1, 1, tzinfo=UTC)
AGENT = {"llm": {"provider": "scripted", "responses": [{"text": "done"}]}}


def config(**kw) -> SessionConfig:
    return SessionConfig.model_validate({"agent": AGENT, **kw})


WAIT = dict(remind_after_s=60, escalate_after_s=120, escalate_to=["bob", "group:ops"],
            reply_timeout_s=180, interactive_require_user_reply=False,
            people={"owner": "olga", "approvers": ["alice"]})


def request(kind="approval", **kw) -> PendingRequest:
    return PendingRequest(request_id="r1", kind=kind, prompt="?", created_at=T0, **kw)


def steps_until_done(cfg: SessionConfig, pending: PendingRequest) -> list[tuple[str, datetime]]:
    """Take every step as the workflow does, in order, until none is left or the timeout."""
    state = SessionState(session_id="s", config=cfg, status=SessionStatus.WAITING_USER,
                         pending=pending)
    book, taken = SessionBook(state), []
    for _ in range(5):  # bounded: a step that fired twice shows as a longer list
        step = next_step(cfg, state.pending, T0)
        if step is None:
            break
        taken.append((step.name, step.at))
        if step.name == "remind":
            book.remind(addressees(cfg, state.pending), step.at)
        elif step.name == "escalate":
            book.escalate(*escalated(cfg, state.pending), step.at)
        else:
            break
    return taken


def test_the_steps_come_in_order_each_once_from_when_the_request_opened():
    taken = steps_until_done(config(**WAIT), request())
    assert taken == [("remind", T0 + timedelta(seconds=60)),
                     ("escalate", T0 + timedelta(seconds=120)),
                     ("timeout", T0 + timedelta(seconds=180))]


def test_a_step_already_past_is_due_at_once_and_the_next_waits_for_its_time():
    cfg, pending = config(**WAIT), request()
    late = T0 + timedelta(seconds=500)  # the worker was down for all three times
    step = next_step(cfg, pending, late)
    assert step is not None and step.name == "remind" and step.due_in(late) == DUE_NOW
    pending.reminded_at = late
    step = next_step(cfg, pending, late)
    assert step is not None and step.name == "escalate"
    assert step.due_in(T0 + timedelta(seconds=100)) == timedelta(seconds=20)


def test_without_wait_steps_the_deadline_is_todays_timeout():
    """Sessions without remind/escalate: exactly today's deadline (replay safety)."""
    cfg = config(reply_timeout_s=30, interactive_require_user_reply=False)
    step = next_step(cfg, request(), T0 + timedelta(seconds=10))
    assert step is not None and step.name == "timeout"
    assert step.due_in(T0 + timedelta(seconds=10)) == timedelta(seconds=20)
    assert next_step(config(), request(), T0) is None


@pytest.mark.parametrize("kw, applies", [
    (dict(reply_timeout_s=30), False),  # strict mode keeps waiting: no timer
    (dict(reply_timeout_s=30, on_reply_timeout="cancel"), True),
    (dict(reply_timeout_s=30, interactive_require_user_reply=False), True),
    (dict(interactive_require_user_reply=False), False),
])
def test_the_timeout_is_a_step_only_where_todays_rules_make_it_one(kw, applies):
    cfg = config(**kw)
    assert timeout_applies(cfg) is applies
    assert (next_step(cfg, request(), T0) is not None) is applies


def test_strict_mode_still_reminds_and_escalates_but_never_times_out():
    cfg = config(**{**WAIT, "interactive_require_user_reply": True})
    assert [n for n, _ in steps_until_done(cfg, request())] == ["remind", "escalate"]


def test_a_wait_for_the_next_message_has_no_steps():
    assert next_step(config(**WAIT), request("message"), T0) is None
    assert next_step(config(**WAIT), None, T0) is None


def test_only_the_steps_configured_fire():
    only_remind = config(remind_after_s=5)
    assert [n for n, _ in steps_until_done(only_remind, request())] == ["remind"]
    only_escalate = config(escalate_after_s=5, escalate_to=["bob"])
    assert [n for n, _ in steps_until_done(only_escalate, request())] == ["escalate"]


def test_escalation_adds_escalate_to_after_the_session_people_when_the_request_names_none():
    cfg = config(**WAIT)
    assert addressees(cfg, request()) == ["olga", "alice"]  # as may_answer's fallback
    assert escalated(cfg, request()) == (["olga", "alice", "bob", "group:ops"],
                                         ["bob", "group:ops"])


def test_escalation_keeps_a_rules_approvers_first_and_adds_no_one_twice():
    cfg = config(**{**WAIT, "escalate_to": ["bob", "alice", "bob", "carol"]})
    pending = request(approvers=["alice", "group:leads"], rule="rules[0]")
    assert escalated(cfg, pending) == (["alice", "group:leads", "bob", "carol"],
                                       ["bob", "carol"])


def test_escalation_without_anyone_named_before_is_for_escalate_to_alone():
    cfg = config(escalate_after_s=5, escalate_to=["bob"])
    assert escalated(cfg, request()) == (["bob"], ["bob"])


def test_the_book_records_each_step_in_the_journal_and_the_request():
    cfg = config(**WAIT)
    state = SessionState(session_id="s", config=cfg, status=SessionStatus.WAITING_USER,
                         pending=request(digest="sha256:" + "a" * 64, execution_id="s.x"))
    book = SessionBook(state)
    book.remind(addressees(cfg, state.pending), T0 + timedelta(seconds=60))
    book.escalate(*escalated(cfg, state.pending), T0 + timedelta(seconds=120))
    reminded, escalation = book.take_journal()
    assert (reminded.kind, reminded.data) == ("request.reminded", {
        "request_id": "r1", "kind": "approval", "digest": "sha256:" + "a" * 64,
        "approvers": ["olga", "alice"], "execution_id": "s.x"})
    assert (escalation.kind, escalation.data) == ("request.escalated", {
        "request_id": "r1", "kind": "approval", "digest": "sha256:" + "a" * 64,
        "approvers": ["olga", "alice", "bob", "group:ops"],
        "escalated_to": ["bob", "group:ops"], "execution_id": "s.x"})
    assert state.pending.approvers == ["olga", "alice", "bob", "group:ops"]
    assert state.pending.reminded_at == T0 + timedelta(seconds=60)
    assert state.pending.escalated_at == T0 + timedelta(seconds=120)


def test_continue_as_new_carries_the_steps_done():
    cfg = config(**WAIT)
    state = SessionState(session_id="s", config=cfg, status=SessionStatus.WAITING_USER,
                         pending=request())
    book = SessionBook(state)
    book.remind(addressees(cfg, state.pending), T0 + timedelta(seconds=60))
    carried = SessionInput(session_id="s", config=cfg).carried(state)
    again = SessionInput.model_validate_json(carried.model_dump_json())  # as history holds it
    assert again.state is not None and again.state.pending is not None
    assert again.state.pending.reminded_at == T0 + timedelta(seconds=60)
    step = next_step(again.state.config, again.state.pending, T0 + timedelta(seconds=61))
    assert step is not None and step.name == "escalate"  # not a second reminder


def test_a_request_without_steps_done_keeps_its_json():
    """Saved histories replay and export byte-identically: the new fields stay out."""
    dumped = request().model_dump(mode="json")
    assert "reminded_at" not in dumped and "escalated_at" not in dumped
    done = request(reminded_at=T0).model_dump(mode="json")
    assert done["reminded_at"] == "2026-01-01T00:00:00Z"


def test_after_escalation_the_escalated_person_may_answer_and_before_not():
    cfg = config(**WAIT)
    bob = Principal(issuer="local", subject="bob", role="approver")
    pending = request()
    before = decisions.answer_problem(bob, cfg, pending, approve=True, digest=None)
    assert before is not None and before.type == ANSWER_FORBIDDEN
    pending.approvers, _ = escalated(cfg, pending)
    assert decisions.answer_problem(bob, cfg, pending, approve=True, digest=None) is None
    olga = Principal(issuer="local", subject="olga", role="approver")
    assert decisions.answer_problem(olga, cfg, pending, approve=True, digest=None) is None


def test_an_answer_via_a_link_needs_the_person_it_was_sent_to():
    cfg, pending = config(**WAIT), request()
    problem = decisions.answer_problem(None, cfg, pending, approve=True, digest=None,
                                       via="link")
    assert problem is not None and problem.type == ANSWER_INVALID
    assert problem.details["code"] == "invalid_via"
    olga = Principal(issuer="local", subject="olga", role="approver")
    assert decisions.answer_problem(olga, cfg, pending, approve=True, digest=None,
                                    via="link") is None


def test_the_current_details_say_each_step_done():
    cfg = config(**WAIT)
    state = SessionState(session_id="s", config=cfg, status=SessionStatus.WAITING_USER,
                         pending=request())
    assert "Reminded" not in waiting_details(state)
    book = SessionBook(state)
    book.remind(addressees(cfg, state.pending), T0 + timedelta(seconds=60))
    text = waiting_details(state)
    assert "Reminded at 2026-01-01 00:01:00 UTC" in text and "Escalated" not in text
    book.escalate(*escalated(cfg, state.pending), T0 + timedelta(seconds=120))
    text = waiting_details(state)
    assert "Escalated to bob, group:ops at 2026-01-01 00:02:00 UTC" in text
    assert "For olga, alice, bob, group:ops" in text and "rule None" not in text


@pytest.mark.parametrize("kw, says", [
    (dict(remind_after_s=120, escalate_after_s=60, escalate_to=["b"]), "must come before"),
    (dict(remind_after_s=60, reply_timeout_s=60), "must come before"),
    (dict(escalate_after_s=60), "go together"),
    (dict(escalate_to=["bob"]), "go together"),
    (dict(remind_after_s=0), "greater than 0"),
    (dict(escalate_after_s=5, escalate_to=[""]), "at least 1 character"),
])
def test_broken_wait_configs_are_refused_with_the_reason(kw, says):
    with pytest.raises(ValidationError, match=says):
        config(**kw)


def test_the_static_details_name_the_steps_only_when_set():
    details = static_details(config(**WAIT))
    assert "Reminder: after 60 s" in details
    assert "Escalation: after 120 s, to bob, group:ops" in details
    plain = static_details(config())
    assert "Reminder" not in plain and "Escalation" not in plain
    assert "Reply timeout: none\n\nSignals" in plain  # as before
