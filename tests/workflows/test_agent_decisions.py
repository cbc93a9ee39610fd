"""The pure decisions of the agent driver, exhaustively and without Temporal."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError
from temporalio.exceptions import ActivityError, ApplicationError

from workflows import agent
from workflows.config import (
    FormField,
    LLMConfig,
    McpServerConfig,
    ScriptedResponse,
    SessionConfig,
    ToolCallRequest,
)
from workflows.contract import ActionType, Actor, Trigger
from workflows.io import ToolSpec
from workflows.messages import ReplyInput
from workflows.operators import waiting_details
from workflows.safety import SafetyClass
from workflows.session_book import SessionBook
from workflows.session_state import PendingRequest, SessionState
from workflows.statechart import SessionEvent, SessionStatus

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def config(**kw) -> SessionConfig:
    return SessionConfig.model_validate({
        "agent": {
            "llm": {"provider": "scripted", "responses": [{"text": "hi"}]},
            "tools": [{"name": "notes", "command": ["notes-server"]}],
        },
        **kw,
    })


CATALOG = [
    ToolSpec(server="notes", name="read_note", safety=SafetyClass.READ_ONLY),
    ToolSpec(server="notes", name="delete_note", safety=SafetyClass.IRREVERSIBLE),
    ToolSpec(server="notes", name="append_note", safety=SafetyClass.AT_MOST_ONCE),
]


def state(**kw) -> SessionState:
    return SessionState(session_id="s1", config=config(**kw))


def complete(book: SessionBook, decision: agent.ToolDecision) -> None:
    c = book.new_contract(
        f"x{len(book.state.contracts)}", ActionType.TOOL_CALL,
        {**decision.detail, "safety": decision.safety.value}, T0,
        irreversible=decision.kind == "approve_first", idempotency_key=decision.idempotency_key,
    )
    book.transition(c, Trigger.START, Actor.REASONING, T0)
    book.transition(c, Trigger.SUCCEED, Actor.TOOL_NODE, T0, result="done")


def test_read_only_tool_runs_without_asking():
    d = agent.decide_tool_call(state(), ToolCallRequest(tool="read_note"), CATALOG)
    assert (d.kind, d.safety, d.server.name) == ("run", SafetyClass.READ_ONLY, "notes")


def test_destructive_tool_asks_first():
    d = agent.decide_tool_call(state(), ToolCallRequest(tool="delete_note",
                                                        arguments={"name": "a"}), CATALOG)
    assert d.kind == "approve_first"


def test_seed001_completed_irreversible_is_not_run_twice():
    """Seed 001 'Blocking duplicate irreversible execution', as the agent sees it."""
    s = state()
    call = ToolCallRequest(tool="delete_note", arguments={"name": "a"})
    first = agent.decide_tool_call(s, call, CATALOG)
    complete(SessionBook(s), first)
    again = agent.decide_tool_call(s, call, CATALOG)
    assert again.kind == "already_done"
    assert "already completed" in again.message and again.message.endswith(
        'its result was: "done"')  # as JSON, not a Python repr
    other = agent.decide_tool_call(s, ToolCallRequest(tool="delete_note",
                                                      arguments={"name": "b"}), CATALOG)
    assert other.kind == "approve_first"


def test_at_most_once_tool_is_not_run_twice_either():
    s = state()
    call = ToolCallRequest(tool="append_note", arguments={"name": "a", "text": "x"})
    first = agent.decide_tool_call(s, call, CATALOG)
    assert first.kind == "run"
    complete(SessionBook(s), first)
    assert agent.decide_tool_call(s, call, CATALOG).kind == "already_done"


def test_read_only_tool_may_run_again():
    s = state()
    call = ToolCallRequest(tool="read_note", arguments={"name": "a"})
    complete(SessionBook(s), agent.decide_tool_call(s, call, CATALOG))
    assert agent.decide_tool_call(s, call, CATALOG).kind == "run"


def test_unknown_server_is_named_in_the_refusal():
    d = agent.decide_tool_call(state(), ToolCallRequest(tool="x", server="nope"), CATALOG)
    assert d.kind == "unknown_server" and "'nope'" in d.message


def test_unlisted_tool_on_the_only_server_is_sent_at_most_once():
    d = agent.decide_tool_call(state(), ToolCallRequest(tool="no_such_tool"), CATALOG)
    assert (d.kind, d.safety) == ("run", SafetyClass.AT_MOST_ONCE)


def pending(kind, **kw) -> PendingRequest:
    return PendingRequest(request_id="r1", kind=kind, prompt="?", created_at=T0, **kw)


@pytest.mark.parametrize(("pend", "reply", "problem"), [
    (None, ReplyInput(request_id="r1", approve=True), "nothing is pending"),
    (pending("message"), ReplyInput(request_id="r1"), "send a message"),
    (pending("approval"), ReplyInput(request_id="r2", approve=True), "pending request is 'r1'"),
    (pending("approval"), ReplyInput(request_id="r1"), "needs `approve`"),
    (pending("confirm"), ReplyInput(request_id="r1", choice="a"), "needs `approve`"),
    (pending("choose", options=["a", "b"]), ReplyInput(request_id="r1", choice="c"),
     "must be one of"),
    (pending("form", fields=[FormField(name="n")]), ReplyInput(request_id="r1", values={}),
     "missing ['n']"),
    (pending("form", fields=[FormField(name="n")]),
     ReplyInput(request_id="r1", values={"n": "x", "m": 1}), "unknown ['m']"),
    (pending("form", fields=[FormField(name="n", type="number")]),
     ReplyInput(request_id="r1", values={"n": "x"}), "must be a number"),
])
def test_reply_of_the_wrong_shape_is_refused(pend, reply, problem):
    assert problem in agent.reply_problem(pend, reply)


@pytest.mark.parametrize(("pend", "reply", "answer"), [
    (pending("approval"), ReplyInput(request_id="r1", approve=False, comment="no"),
     {"approved": False, "comment": "no"}),
    (pending("confirm"), ReplyInput(request_id="r1", approve=True), {"approved": True}),
    (pending("choose", options=["a", "b"]), ReplyInput(request_id="r1", choice="b"),
     {"choice": "b"}),
    (pending("form", fields=[FormField(name="n", type="number")]),
     ReplyInput(request_id="r1", values={"n": 3}), {"values": {"n": 3}}),
])
def test_fitting_reply_is_accepted_and_becomes_an_answer(pend, reply, answer):
    assert agent.reply_problem(pend, reply) is None
    assert agent.answer_of(pend, reply) == answer


@pytest.mark.parametrize(("decision", "pend", "answer"), [
    ("reject", pending("approval"), {"approved": False, "auto": True}),
    ("approve", pending("approval"), {"approved": True, "auto": True}),
    ("approve", pending("choose", options=["a", "b"]), {"choice": "a", "auto": True}),
    ("reject", pending("choose", options=["a", "b"]), {"declined": True, "auto": True}),
    ("approve", pending("form", fields=[FormField(name="n")]),
     {"declined": True, "auto": True}),
])
def test_auto_decision_is_the_documented_default(decision, pend, answer):
    cfg = config(mode="auto", interactive_require_user_reply=False, auto_decision=decision)
    assert agent.auto_answer(pend, cfg) == answer


def waiting_state(contract_status: str | None) -> SessionState:
    s = state()
    book = SessionBook(s)
    book.fire(SessionEvent.TURN_STARTED, T0)
    c = book.new_contract("c1", ActionType.ECS_REQUEST, {"kind": "confirm", "prompt": "ok?"},
                          T0)
    book.transition(c, Trigger.START, Actor.ECS_NODE, T0)
    book.transition(c, Trigger.SUSPEND, Actor.ECS_NODE, T0)
    book.request(pending("confirm").model_copy(update={"execution_id": "c1"}))
    book.fire(SessionEvent.INTERACTION_REQUESTED, T0)
    if contract_status == "cancelled":
        book.transition(c, Trigger.CANCEL, Actor.SYSTEM, T0 + timedelta(seconds=1))
    return s


def test_seed004_restart_preserves_a_valid_wait():
    d = agent.recovery_check(waiting_state(None))
    assert d.event is SessionEvent.RESTART_PRESERVE_WAITING
    assert (d.waiting_contracts, d.expected_waiting, d.warnings) == (1, 1, [])


def test_seed004_restart_reconciles_an_invalid_wait_to_failed():
    d = agent.recovery_check(waiting_state("cancelled"))
    assert d.event is SessionEvent.RESTART_RECONCILE_FAILED
    assert "cancelled, not waiting" in d.reason
    assert d.warnings and "0 WAITING" in d.warnings[0]  # seed 000 alignment warning


def test_seed004_restart_without_pending_request_fails():
    s = waiting_state(None)
    s.pending = None
    d = agent.recovery_check(s)
    assert d.event is SessionEvent.RESTART_RECONCILE_FAILED and d.reason == "no pending request"


def test_seed000_alignment_mismatch_warns_but_resume_proceeds():
    s = waiting_state(None)
    s.pending = pending("message")  # waits for a message while a contract waits too
    d = agent.recovery_check(s)
    assert d.event is SessionEvent.RESTART_PRESERVE_WAITING
    assert d.warnings == ["alignment: 1 WAITING contract(s), expected 0 for the pending request"]


def test_book_records_every_transition_in_trace_and_terminal_ones_in_memory():
    s = waiting_state(None)
    book = SessionBook(s)
    c = s.contract("c1")
    book.transition(c, Trigger.RESUME, Actor.USER, T0)
    book.transition(c, Trigger.SUCCEED, Actor.ECS_NODE, T0, result={"approved": True})
    assert [st.action["to"] for st in s.execution_trace] == [
        "running", "waiting", "running", "completed"]
    assert [st.node_id for st in s.execution_trace] == ["ecs_node", "ecs_node", "user",
                                                       "ecs_node"]
    assert len(s.memory) == 1 and s.memory[0].final_status.value == "completed"


def test_accepted_reply_is_kept_once_and_clears_the_request():
    s = waiting_state(None)
    book = SessionBook(s)
    book.accept_reply({"approved": True}, "ann", T0)
    assert [r.request_id for r in s.replies] == ["r1"] and s.pending is None
    with pytest.raises(ValueError, match="no request is pending"):
        book.accept_reply({"approved": True}, "ann", T0)
    assert len(s.replies) == 1


def test_waiting_details_say_what_the_session_waits_for():
    s = waiting_state(None)
    assert s.status is SessionStatus.WAITING_USER
    assert waiting_details(s) == (
        "Waiting for the person: a confirmation — ? (request r1)\n\n"
        'Answer from the Temporal UI: signal `submit_reply` with `{"request_id": "r1", '
        '"approve": true}` (`"approve": false` says no); or `end_conversation` with '
        '`{"reason": "..."}`.')


def test_reasoner_messages_carry_facts_not_contracts():
    s = waiting_state(None)
    book = SessionBook(s)
    c = s.contract("c1")
    book.transition(c, Trigger.RESUME, Actor.USER, T0)
    book.transition(c, Trigger.SUCCEED, Actor.ECS_NODE, T0, result={"approved": True})
    msgs = agent.build_messages(s)
    assert msgs[0].role == "system" and "Execution facts so far" in msgs[0].content
    view = agent.consequence_message(c, "call-1")
    assert view.content.startswith("[SUCCESS] Ask the person to confirm: ok?")
    assert "was_suspended=true" in view.content and view.tool_call_id == "call-1"


def _activity_error(cause: BaseException) -> ActivityError:
    err = ActivityError("activity failed", scheduled_event_id=1, started_event_id=2,
                        identity="w", activity_type="call_tool", activity_id="1",
                        retry_state=None)
    err.__cause__ = cause
    return err


def test_a_call_the_pool_never_sent_is_not_an_unknown_outcome():
    """A full MCP pool refuses before sending: the at-most-once call did not run."""
    from workflows.activity_calls import not_sent

    assert not_sent(_activity_error(ApplicationError("pool full", type="McpPoolFullError")))
    assert not not_sent(_activity_error(ApplicationError("boom", type="McpTransportError")))
    assert not not_sent(_activity_error(TimeoutError("heartbeat")))


# -- scripted alternatives: branching on the previous outcome -------------------------


def decided(book: SessionBook, tool: str, *, approve: bool | None, end: Trigger,
            irreversible: bool = True) -> None:
    c = book.new_contract(f"x{len(book.state.contracts)}", ActionType.TOOL_CALL,
                          {"server": "notes", "tool": tool, "arguments": {}}, T0,
                          irreversible=irreversible)
    book.transition(c, Trigger.START, Actor.REASONING, T0)
    if approve is not None:
        book.transition(c, Trigger.SUSPEND, Actor.TOOL_NODE, T0)
        book.transition(c, Trigger.RESUME, Actor.USER, T0)
        if not approve:
            book.transition(c, Trigger.REJECT, Actor.USER, T0)
            return
    book.transition(c, end, Actor.TOOL_NODE, T0)


def test_script_outcomes_name_the_latest_action_and_each_tools_latest_call():
    book = SessionBook(state())
    assert agent.script_outcomes(book.state) == {}
    decided(book, "delete_note", approve=False, end=Trigger.SUCCEED)
    decided(book, "read_note", approve=None, end=Trigger.SUCCEED, irreversible=False)
    assert agent.script_outcomes(book.state) == {
        "": ["completed"], "read_note": ["completed"], "delete_note": ["rejected"]}
    decided(book, "delete_note", approve=True, end=Trigger.FAIL)
    assert agent.script_outcomes(book.state)["delete_note"] == ["failed", "approved"]
    # A confirm answered no is rejected; yes is approved.
    c = book.new_contract("ecs", ActionType.ECS_REQUEST, {"kind": "confirm"}, T0)
    book.transition(c, Trigger.START, Actor.ECS_NODE, T0)
    book.transition(c, Trigger.SUCCEED, Actor.ECS_NODE, T0, result={"approved": False})
    assert agent.script_outcomes(book.state)[""] == ["completed", "rejected"]


def test_script_outcomes_are_only_for_the_scripted_provider():
    s = SessionState(session_id="s1", config=SessionConfig.model_validate({"agent": {
        "llm": {"provider": "openai", "base_url": "http://127.0.0.1:1/v1"}}}))
    book = SessionBook(s)
    decided(book, "delete_note", approve=False, end=Trigger.SUCCEED)
    assert agent.script_outcomes(s) == {}


def test_an_alternative_plays_when_its_condition_holds():
    r = ScriptedResponse.model_validate({"text": "deleted", "alternatives": [
        {"when": {"previous": "rejected", "tool": "delete_note"}, "text": "kept"},
        {"when": {"previous": "failed"}, "text": "failed"}]})
    assert r.played({}).text == "deleted"
    assert r.played({"": ["rejected"], "delete_note": ["completed"]}).text == "deleted"
    assert r.played({"": ["completed"], "delete_note": ["rejected"]}).text == "kept"
    assert r.played({"": ["failed"], "delete_note": ["rejected"]}).text == "kept"  # first wins
    assert r.played({"": ["failed", "approved"]}).text == "failed"


@pytest.mark.parametrize(("response", "problem"), [
    ({"text": "a", "alternatives": [{"text": "b"}]}, "every alternative needs `when`"),
    ({"text": "a", "alternatives": [{"when": {"previous": "rejected"}, "alternatives": [
        {"when": {"previous": "failed"}, "text": "c"}]}]}, "cannot have alternatives"),
    ({"text": "a", "alternatives": [{"when": {"previous": "maybe"}, "text": "b"}]},
     "previous"),
    ({"text": "a", "alternatives": [{"when": {"previous": "failed", "x": 1}, "text": "b"}]},
     "Extra inputs are not permitted"),
    ({"text": "a", "when": {"previous": "failed"}}, "`when` belongs to an alternative"),
])
def test_a_broken_script_branch_is_refused_with_its_reason(response, problem):
    with pytest.raises(ValidationError, match=problem):
        LLMConfig.model_validate({"provider": "scripted", "responses": [response]})
# -- model mistakes go back to the model ----------------------------------------------


@pytest.mark.parametrize(("call", "unknown_tools", "problem"), [
    (ToolCallRequest(tool="read_note", arguments_error="the arguments of notes__read_note "
                     "are not valid JSON (x)"), False,
     "the arguments of notes__read_note are not valid JSON (x). Call the tool again with "
     "arguments that fit its schema."),
    (ToolCallRequest(tool="read_note", arguments={"name": "a"}), True, None),
    (ToolCallRequest(tool="no_such_tool"), True,
     "there is no tool 'no_such_tool' on 'notes'. Call one of the tools you were given."),
    (ToolCallRequest(tool="x", server="nope"), True,
     "there is no tool 'x' (there is no tool server 'nope'). Call one of the tools you were "
     "given."),
    # Sessions from before the patch send an unlisted tool to the server, as they did.
    (ToolCallRequest(tool="no_such_tool"), False, None),
])
def test_call_mistake_says_what_is_wrong(call, unknown_tools, problem):
    assert agent.call_mistake(config(), call, CATALOG, unknown_tools=unknown_tools) == problem


def test_a_mistake_fails_without_reaching_a_server_and_keeps_what_the_model_sent():
    call = ToolCallRequest(id="c1", tool="read_note", raw_arguments="{",
                           arguments_error="the arguments of notes__read_note are not valid")
    d = agent.decide_tool_call(state(), call, CATALOG, unknown_tools=True)
    assert d.kind == "mistake" and d.message.startswith("the arguments of notes__read_note")
    assert d.detail["mistake"] is True and d.detail["raw_arguments"] == "{"
    unknown = agent.decide_tool_call(state(), ToolCallRequest(tool="nope"), CATALOG,
                                     unknown_tools=True)
    assert unknown.kind == "mistake" and "there is no tool 'nope'" in unknown.message
    # A tool no server has is recorded on no server (not on the only one configured).
    assert unknown.detail["server"] == "?" and unknown.server is None
    ask = ToolCallRequest(tool="ask_user", arguments={"kind": "choose"},
                          arguments_error="the ask_user request is invalid (x)")
    assert agent.decide_tool_call(state(), ask, CATALOG).detail["server"] == "?"


def test_a_call_has_arguments_or_raw_arguments_not_both():
    with pytest.raises(ValueError, match="not both"):
        ToolCallRequest(tool="t", arguments={"a": 1}, raw_arguments='{"a": 1}')
    assert ToolCallRequest(tool="t", raw_arguments="{").arguments == {}


@pytest.mark.parametrize(("before", "problems", "limit", "after", "fails"), [
    (2, [], 3, 0, False),          # a clean answer resets the count
    (0, ["a"], 3, 1, False),
    (2, ["a", "b"], 3, 3, False),  # one answer is one mistake, however many calls
    (3, ["a"], 3, 4, True),        # N+1 in a row fails
    (0, ["a"], 0, 1, True),        # a bound of 0: the first mistake fails
])
def test_judge_mistakes_counts_answers_in_a_row(before, problems, limit, after, fails):
    verdict = agent.judge_mistakes(before, problems, limit)
    assert verdict.consecutive == after
    assert (verdict.fail_reason is not None) is fails
    if fails:
        assert verdict.fail_reason == (
            f"the model made mistakes in {after} answers in a row (max_consecutive_mistakes "
            f"is {limit}); the last: {problems[-1]}")


def test_mistake_bound_and_tool_result_limit_are_validated_config():
    assert config().agent.max_consecutive_mistakes == 3
    assert config().agent.context.max_tool_result_chars == 20_000
    for bad in ({"max_consecutive_mistakes": -1}, {"context": {"max_tool_result_chars": 5}}):
        with pytest.raises(ValueError):
            SessionConfig.model_validate({"agent": {
                "llm": {"provider": "scripted", "responses": [{"text": "hi"}]}, **bad}})


@pytest.mark.parametrize(("server", "why"), [
    ({"url": "http://127.0.0.1:9/mcp", "env": {"A": "1"}}, "env is for a command"),
    ({"command": ["srv"], "env": {"A=B": "1"}}, "env name 'A=B' is not a variable name"),
    ({"command": ["srv"], "env": {"": "1"}}, "env name '' is not a variable name"),
    ({"command": ["srv"], "env": {"A\0": "1"}}, "is not a variable name"),
    ({"command": ["srv"], "env": {"A": "1\0"}}, "env A holds a NUL character"),
    ({"command": ["srv"], "url": "http://127.0.0.1:9/mcp"}, "exactly one of command or url"),
])
def test_a_tool_server_the_worker_could_not_start_is_refused_with_the_config(server, why):
    body = {"agent": {"llm": {"provider": "scripted", "responses": [{"text": "hi"}]},
                      "tools": [{"name": "srv", **server}]}}
    with pytest.raises(ValidationError, match=why):
        SessionConfig.model_validate(body)
    fine = McpServerConfig(name="srv", command=["srv"], env={"GIT_DIR": "${HOME}/x", "E": ""})
    assert fine.env == {"GIT_DIR": "${HOME}/x", "E": ""}  # kept literally, expanded nowhere
