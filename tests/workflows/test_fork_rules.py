"""A fork's pure rules (issue 27): its first input, and what it asks before it repeats
a once-only call that its parent sent after the fork point."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from workflows import decisions as d
from workflows.agent import auto_answer
from workflows.config import SessionConfig
from workflows.fork import fork_input
from workflows.lineage import RAN_IN_PARENT, ForkedFrom, ParentAction
from workflows.messages import SessionInput
from workflows.people import DecisionRule, PrincipalRef, StandingDecision
from workflows.session_state import PendingRequest, SessionState

NOW = datetime(2026, 1, 1, tzinfo=UTC)
ASKED = d.asked_tool_call("notes", "delete_note", {"name": "x"})
DONE = ParentAction(digest=d.digest_of(ASKED), server="notes", tool="delete_note", seq=9,
                    at="2026-01-01T00:00:00.000000Z")
LINEAGE = ForkedFrom(session_id="s-parent", seq=7, line_hash="a" * 64)
ALLOW = DecisionRule(name="ok", tool="delete_*", decision="allow")
DENY = DecisionRule(name="no", tool="delete_*", decision="deny")


def held() -> StandingDecision:
    return StandingDecision(standing_id="sd-r1", tool="delete_note", request_id="r1", at=NOW,
                            set_by=PrincipalRef(issuer="local", subject="ann", name="ann"))


def test_the_same_digest_is_a_repeat_other_arguments_are_not():
    assert d.repeat_of([DONE], ASKED) == DONE
    assert d.repeat_of([DONE], d.asked_tool_call("notes", "delete_note", {"name": "y"})) is None
    assert d.repeat_of([DONE], d.asked_tool_call("other", "delete_note", {"name": "x"})) is None
    assert d.repeat_of([], ASKED) is None


@pytest.mark.parametrize(("rules", "standing", "safety_asks"), [
    ([ALLOW], [], True), ([], [held()], True), ([], [], False), ([ALLOW], [], False)])
def test_a_repeat_asks_whatever_would_have_run_it_without_asking(rules, standing, safety_asks):
    args = ASKED["arguments"]
    assert d.tool_verdict(rules, standing, "notes", "delete_note", args,
                          safety_asks=safety_asks).kind != "ask"  # the parent's way
    v = d.tool_verdict(rules, standing, "notes", "delete_note", args,
                       safety_asks=safety_asks, repeat=True)
    assert v.kind == "ask"


def test_a_deny_rule_still_beats_a_repeat():
    v = d.tool_verdict([DENY], [], "notes", "delete_note", {"name": "x"}, repeat=True)
    assert (v.kind, v.rule) == ("deny", "no")


def test_an_auto_decision_never_approves_a_repeat():
    config = SessionConfig.model_validate({
        "auto_decision": "approve", "initial_message": "go",
        "agent": {"llm": {"provider": "scripted", "responses": [{"text": "ok"}]}}})
    pending = PendingRequest(request_id="r", kind="approval", prompt="?", created_at=NOW)
    assert auto_answer(pending, config)["approved"] is True
    repeat = pending.model_copy(update={"reason_code": RAN_IN_PARENT})
    assert auto_answer(repeat, config)["approved"] is False
    assert d.repeat_note(DONE, "s-parent").startswith(
        "This already ran in the parent session s-parent at 2026-01-01T00:00:00.000000Z "
        "(its log's line 9)")


def test_the_fork_input_is_a_new_session_of_its_own_owner_with_the_parent_state():
    config = SessionConfig.model_validate({
        "initial_message": "go", "people": {"owner": "ann", "viewers": ["vic"]},
        "agent": {"llm": {"provider": "scripted",
                          "responses": [{"text": "a"}, {"text": "b"}, {"text": "c"}]}}})
    parent = SessionState(session_id="s-parent", config=config, llm_calls=1, journal_seq=12,
                          inbox=[])
    start = fork_input(parent, "s-fork", LINEAGE, owner="bob", message="again",
                       parent_actions=[DONE])
    assert start.session_id == start.state.session_id == "s-fork"
    assert start.state.config.people.owner == "bob"
    assert start.state.config.people.viewers == ["vic"]
    assert start.state.inbox == ["again"] and start.state.journal_seq == 0
    assert start.state.config.agent.llm.responses_offset == 1  # the played one is gone
    dumped = start.model_dump(mode="json")
    assert dumped["forked_from"] == LINEAGE.model_dump() and len(dumped["parent_actions"]) == 1
    # a continued run keeps what it must ask about, not the lineage (its log has it)
    carried = start.carried(start.state).model_dump(mode="json")
    assert "forked_from" not in carried and len(carried["parent_actions"]) == 1
    # every other input is what it was: neither field is in its JSON
    plain = SessionInput(session_id="s", config=config).model_dump(mode="json")
    assert "forked_from" not in plain and "parent_actions" not in plain
    with pytest.raises(ValueError):
        ForkedFrom(session_id="s", seq=0, line_hash="a" * 64)
    with pytest.raises(ValueError):
        ForkedFrom(session_id="s", seq=1, line_hash="nothex")
