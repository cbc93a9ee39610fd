"""The workflow holds only live state (DESIGN invariant 7): the session state and
what continue-as-new carries stay bounded however long the session runs. Pure:
no Temporal."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from workflows import agent
from workflows.config import LLMConfig, SessionConfig, ToolCallRequest
from workflows.contract import ActionType, Actor, Trigger
from workflows.io import ChatMessage, ToolSpec
from workflows.messages import SessionInput
from workflows.safety import SafetyClass
from workflows.session_book import SessionBook, context_window
from workflows.session_state import RECENT, PendingRequest, SessionState
from workflows.statechart import SessionEvent

T0 = datetime(2026, 1, 1, tzinfo=UTC)
CATALOG = [ToolSpec(server="notes", name="delete_note", safety=SafetyClass.IRREVERSIBLE),
           ToolSpec(server="notes", name="read_note", safety=SafetyClass.READ_ONLY)]


def config(responses: int = 3, **context) -> SessionConfig:
    return SessionConfig.model_validate({"agent": {
        "llm": {"provider": "scripted", "responses": [{"text": f"r{i}"}
                                                      for i in range(responses)]},
        "tools": [{"name": "notes", "command": ["notes-server"]}],
        **({"context": context} if context else {}),
    }})


def run_turns(book: SessionBook, n: int, *, tool: str = "read_note") -> None:
    """n turns of: a confirm request answered, and one tool call completed."""
    s = book.state
    for i in range(n):
        book.fire(SessionEvent.TURN_STARTED, T0)
        d = agent.decide_tool_call(s, ToolCallRequest(tool=tool, arguments={"i": i}), CATALOG)
        c = book.new_contract(f"s1.t{i}", ActionType.TOOL_CALL,
                              {**d.detail, "safety": d.safety.value}, T0,
                              irreversible=d.kind == "approve_first",
                              idempotency_key=d.idempotency_key)
        book.transition(c, Trigger.START, Actor.REASONING, T0)
        book.transition(c, Trigger.SUCCEED, Actor.TOOL_NODE, T0, result={"n": i})
        book.say(ChatMessage(role="assistant", content=f"turn {i}"))
        book.request(PendingRequest(request_id=f"r{i}", kind="confirm", prompt="ok?",
                                    created_at=T0))
        book.fire(SessionEvent.INTERACTION_REQUESTED, T0)
        book.accept_reply({"approved": True}, "user", T0)
        book.fire(SessionEvent.REPLY_ACCEPTED, T0)
        book.take_journal()


def test_the_state_keeps_windows_and_totals():
    s = SessionState(session_id="s1", config=config())
    book = SessionBook(s)
    run_turns(book, 3 * RECENT)
    assert len(s.contracts) == RECENT and s.contracts_total == 3 * RECENT
    assert len(s.replies) == RECENT and s.replies_total == 3 * RECENT
    assert len(s.status_history) == RECENT and len(s.execution_trace) == RECENT
    assert len(s.memory) == 50  # the context policy's max_facts
    # the newest are kept
    assert s.contracts[-1].execution_id == f"s1.t{3 * RECENT - 1}"


def test_what_a_run_carries_does_not_grow_with_the_session():
    sizes = []
    for turns in (100, 400):
        s = SessionState(session_id="s1", config=config(responses=2000))
        s.llm_calls = turns
        run_turns(SessionBook(s), turns)
        carried = SessionInput(session_id="s1", config=s.config).carried(s)
        assert carried.config is None and carried.state is not None
        assert carried.state.contracts == [] and carried.state.replies == []
        assert carried.state.execution_trace == [] and len(carried.state.status_history) == 1
        # the scripted responses already played stay behind
        assert carried.state.config.agent.llm.responses_offset == turns
        assert len(carried.state.config.agent.llm.responses) == 2000 - turns
        sizes.append(len(carried.model_dump_json(exclude={"state": {"config"}})))
    assert sizes[1] <= sizes[0] * 1.05, sizes


def test_a_carried_input_round_trips_and_old_states_get_their_totals():
    s = SessionState(session_id="s1", config=config())
    run_turns(SessionBook(s), 5)
    again = SessionInput.model_validate_json(
        SessionInput(session_id="s1", config=s.config).carried(s).model_dump_json())
    assert again.state.contracts_total == 5 and again.state.replies_total == 5
    # A state carried by an older version: lists, no totals, no ledger.
    old = s.model_dump(mode="json", exclude={"contracts_total", "replies_total"})
    assert SessionState.model_validate(old).contracts_total == len(s.contracts)


def test_an_older_carried_state_keeps_its_completed_irreversible_actions_done():
    s = SessionState(session_id="s1", config=config())
    run_turns(SessionBook(s), 1, tool="delete_note")
    old = SessionState.model_validate(s.model_dump(mode="json", exclude={"once_done"}))
    d = agent.decide_tool_call(old, ToolCallRequest(tool="delete_note", arguments={"i": 0}),
                               CATALOG)
    assert d.kind == "already_done"


def test_an_input_needs_a_config_or_a_state():
    try:
        SessionInput(session_id="s1")
    except ValueError as err:
        assert "config" in str(err)
    else:
        raise AssertionError("accepted an input without a config")


def test_the_idempotency_ledger_outlives_the_contract_window():
    """Invariant 5 across continue-as-new: a completed irreversible call is refused
    long after its contract left the state."""
    s = SessionState(session_id="s1", config=config())
    book = SessionBook(s)
    run_turns(book, 1, tool="delete_note")
    run_turns(book, 2 * RECENT)
    carried = SessionInput(session_id="s1", config=s.config).carried(s).state
    assert all(c.execution_id != "s1.t0" for c in carried.contracts)
    d = agent.decide_tool_call(carried, ToolCallRequest(tool="delete_note",
                                                        arguments={"i": 0}), CATALOG)
    assert d.kind == "already_done" and "s1.t0" in d.message and '{"n": 0}' in d.message
    other = agent.decide_tool_call(carried, ToolCallRequest(tool="delete_note",
                                                            arguments={"i": 1}), CATALOG)
    assert other.kind == "approve_first"


def test_the_model_sees_a_window_and_is_told_what_it_does_not_see():
    s = SessionState(session_id="s1", config=config(max_messages=5, max_facts=3))
    run_turns(SessionBook(s), 20)
    messages = agent.build_messages(s)
    assert [m.content for m in messages[1:]] == [f"turn {i}" for i in range(15, 20)]
    system = messages[0].content
    assert "15 earlier messages of this conversation are not shown" in system
    assert "17 earlier actions are not listed" in system
    assert system.count("\n- ") == 3


def test_a_person_s_answer_resets_the_agent_s_call_budget():
    s = SessionState(session_id="s1", config=config())
    s.turn_llm_calls = 7
    run_turns(SessionBook(s), 1)
    assert s.turn_llm_calls == 0


messages = st.lists(st.builds(
    ChatMessage, role=st.sampled_from(["user", "assistant", "tool"]),
    content=st.text(max_size=40)), max_size=30)


@given(messages, st.integers(1, 10), st.integers(1, 200))
def test_the_context_window_is_a_suffix_within_budget(msgs, max_messages, max_chars):
    w = context_window(msgs, max_messages, max_chars)
    assert w == msgs[len(msgs) - len(w):]  # a suffix: order kept, newest kept
    if msgs:
        assert w and w[-1] == msgs[-1]  # never empty: the latest message always goes
        assert len(w) <= max_messages
        assert len(w) == 1 or sum(len(m.content) for m in w) <= max_chars
        assert len(w) == 1 or w[0].role != "tool"  # no tool result without its call


def test_each_llm_call_carries_one_scripted_response():
    llm = LLMConfig.model_validate({"provider": "scripted",
                                    "responses": [{"text": str(i)} for i in range(5)]})
    one = llm.script_from(3, 1)
    assert [r.text for r in one.responses] == ["3"] and one.responses_offset == 3
    later = llm.script_from(2).script_from(4, 1)
    assert [r.text for r in later.responses] == ["4"] and later.responses_offset == 4
    done = llm.script_from(7, 1)
    assert done.responses == [] and done.responses_offset == 5  # "the script has 5"
    openai = LLMConfig(provider="openai", base_url="http://127.0.0.1:1/v1")
    assert openai.script_from(9, 1) is openai


def test_a_scripted_response_serialises_only_what_is_set():
    """A long script travels in the first runs' inputs: each answer costs its content."""
    confirm = {"ecs_request": {"kind": "confirm", "prompt": "step 1?"}}
    llm = LLMConfig.model_validate({"provider": "scripted", "responses": [
        confirm, {"text": "", "end": True}, {"error": "boom", "http_status": 0}]})
    again = LLMConfig.model_validate_json(llm.model_dump_json())
    assert again == llm and again.responses[2].http_status == 0
    assert len(llm.responses[0].model_dump_json()) < 80
