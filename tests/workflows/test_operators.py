"""What operators read in the Temporal UI and the signal inputs they send (pure)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from workflows.config import SessionConfig
from workflows.messages import EndInput, MessageInput, ReplyInput
from workflows.operators import (
    INPUT_KEPT,
    SIGNALS,
    refusal,
    reply_example,
    signal_input,
    static_details,
    static_summary,
    waiting_details,
)
from workflows.session_state import PendingRequest, SessionState
from workflows.statechart import SessionStatus

T0 = datetime(2026, 1, 1, tzinfo=UTC)
PLAN = SessionConfig.model_validate({"title": "Release", "plan": {"name": "rel", "steps": [
    {"name": "build", "run": "make", "verify": "human"}, {"name": "go?", "gate": True},
    {"run": {"server": "git", "tool": "git_tag"}}], "tools": []}})
AGENT = SessionConfig.model_validate({"initial_message": "Tidy   up\nmy notes", "agent": {
    "llm": {"provider": "openai", "base_url": "http://x/v1", "model": "m1"},
    "tools": [{"name": "notes", "command": ["x"]}]}, "reply_timeout_s": 60})


def test_static_summary_and_details_say_what_the_session_is():
    assert static_summary(PLAN) == "Release · plan rel (3 steps) · interactive"
    assert static_summary(AGENT) == "Tidy up my notes · agent on openai/m1 · interactive"
    details = static_details(PLAN)
    assert "0. build — make · verify: human" in details
    assert "1. go? — gate (a person decides)" in details
    assert "2. tool git_tag on git" in details
    agent = static_details(AGENT)
    assert "Tool servers: notes" in agent and "Reply timeout: 60 s, then keep_waiting" in agent
    assert all(f"`{name}`" in agent for name in SIGNALS)
    long = AGENT.model_copy(update={"title": "x" * 500})
    assert len(static_summary(long)) == 200 and "\n" not in static_summary(long)


def waiting(pending: PendingRequest) -> SessionState:
    return SessionState(session_id="s", config=AGENT, status=SessionStatus.WAITING_USER,
                        pending=pending)


@pytest.mark.parametrize(("kind", "extra", "example"), [
    ("approval", {}, {"request_id": "r", "approve": True}),
    ("choose", {"options": ["a", "b"]}, {"request_id": "r", "choice": "a"}),
    ("form", {"fields": [{"name": "n", "type": "number"}]},
     {"request_id": "r", "values": {"n": 0}}),
    ("step", {"options": ["approve", "skip"], "output": "built 42"},
     {"request_id": "r", "choice": "approve"}),
])
def test_current_details_give_the_signal_that_answers(kind, extra, example):
    p = PendingRequest(request_id="r", kind=kind, prompt="p?", created_at=T0, **extra)
    assert reply_example(p) == example
    text = waiting_details(waiting(p))
    assert text.splitlines()[0].endswith("— p? (request r)")
    assert f"signal `submit_reply` with `{json.dumps(example)}`" in text
    ReplyInput.model_validate(example)  # the example is a valid reply
    assert ("```\nbuilt 42\n```" in text) == (kind == "step")


def test_a_message_wait_names_submit_message_and_end():
    p = PendingRequest(request_id="m", kind="message", prompt="next?", created_at=T0)
    text = waiting_details(waiting(p))
    assert '`submit_message` with `{"text": "..."}`' in text
    assert "`end_conversation`" in text


@pytest.mark.parametrize(("args", "problem"), [
    ((), "malformed signal: expected one JSON object, got 0 inputs"),
    (({"text": "a"}, {"text": "b"}), "malformed signal: expected one JSON object, got 2 inputs"),
    (("hello",), 'malformed signal: expected a JSON object, got str "hello"'),
    ((None,), "malformed signal: expected a JSON object, got NoneType null"),
    (({"text": ""},), "malformed signal: text: String should have at least 1 character"),
    (({"text": "hi", "x": 1},), "malformed signal: x: Extra inputs are not permitted"),
])
def test_signal_inputs_are_validated_never_raised(args, problem):
    assert signal_input(MessageInput, args) == (None, problem)


def test_good_inputs_pass_and_refusals_keep_a_clipped_input():
    assert signal_input(EndInput, ({"reason": "done"},)) == (EndInput(reason="done"), None)
    reply, problem = signal_input(ReplyInput, ({"request_id": "r", "approve": True},))
    assert problem is None and reply == ReplyInput(request_id="r", approve=True)
    big = {"request_id": "r", "by": "ann", "comment": "x" * 5000}
    r = refusal("submit_reply", (big,), "why")
    assert (r["signal"], r["reason"], r["request_id"], r["by"]) == (
        "submit_reply", "why", "r", "ann")
    assert len(r["input"]) == INPUT_KEPT + 1 and r["input"].endswith("…")
    odd = refusal("submit_reply", ({"request_id": 5},), "why")
    assert odd["request_id"] is None and odd["input"] == '{"request_id": 5}'
