"""The pure decisions of workflows/cancel.py and the bounded record of requests that
ended without a reply, without Temporal."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from workflows.cancel import (
    cancelled_in_flight,
    cancelled_in_flight_code,
    late_reply_problem,
    runs_at_most_once,
)
from workflows.config import SessionConfig
from workflows.contract import ActionType, ExecutionContract
from workflows.session_book import SessionBook
from workflows.session_state import (
    UNANSWERED_KEPT,
    PendingRequest,
    SessionState,
    UnansweredRequest,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def contract(action_type: ActionType = ActionType.TOOL_CALL, safety: str | None = None,
             irreversible: bool = False) -> ExecutionContract:
    detail = {"safety": safety} if safety else {}
    return ExecutionContract(execution_id="e1", session_id="s1", action_type=action_type,
                             action_detail=detail, irreversible=irreversible, created_at=T0)


@pytest.mark.parametrize(("c", "once"), [
    (contract(safety="read_only"), False),
    (contract(safety="reversible"), False),
    (contract(safety="at_most_once"), True),
    (contract(safety="irreversible", irreversible=True), True),
    (contract(ActionType.PLAN_STEP), True),
])
def test_an_in_flight_call_that_runs_at_most_once_ends_with_an_unknown_outcome(c, once):
    assert runs_at_most_once(c) is once
    message = cancelled_in_flight(c)
    assert message.startswith("outcome unknown") is once
    assert cancelled_in_flight_code(c) == ("outcome_unknown" if once else None)
    assert "the session was cancelled while the call was under way" in message


def unanswered(how, answer=None, rid="r1") -> UnansweredRequest:
    return UnansweredRequest(request_id=rid, how=how, at=T0, answer=answer)


@pytest.mark.parametrize(("record", "words"), [
    (unanswered("expired"), "expired at 2026-01-01T00:00:00+00:00"),
    (unanswered("auto_decided", {"approved": False, "auto": True}), "auto-decided: rejected"),
    (unanswered("auto_decided", {"approved": True, "auto": True}), "auto-decided: approved"),
    (unanswered("auto_decided", {"choice": "a", "auto": True}), "auto-decided: chose 'a'"),
    (unanswered("auto_decided", {"declined": True, "auto": True}), "auto-decided: declined"),
    (unanswered("auto_decided", {"choice": "stop", "auto": True}),
     "auto-decided: stopped the plan"),
])
def test_a_late_reply_is_told_what_became_of_its_request(record, words):
    problem = late_reply_problem([record], "r1")
    assert problem is not None and words in problem and "'r1'" in problem
    assert late_reply_problem([record], "r2") is None


def test_the_record_of_unanswered_requests_is_bounded_and_loads_from_old_state():
    cfg = SessionConfig.model_validate(
        {"agent": {"llm": {"provider": "scripted", "responses": [{"text": "hi"}]}}})
    old = SessionState(session_id="s1", config=cfg).model_dump(mode="json")
    del old["unanswered"]  # a state carried by continue-as-new before the field existed
    book = SessionBook(SessionState.model_validate(old))
    for i in range(UNANSWERED_KEPT + 5):
        book.record_unanswered(PendingRequest(request_id=f"r{i}", kind="confirm", prompt="?",
                                              created_at=T0), "expired", T0 + timedelta(i))
    kept = book.state.unanswered
    assert len(kept) == UNANSWERED_KEPT
    assert [r.request_id for r in kept] == [f"r{i}" for i in range(5, UNANSWERED_KEPT + 5)]
